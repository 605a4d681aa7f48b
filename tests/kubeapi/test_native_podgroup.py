"""The emulator validates, defaults and admits Kubernetes' own PodGroup
(scheduling.k8s.io/v1alpha2) as a 1.36 API server does for the fields the scheduler
reads (tests/kubeapi/native_podgroup.py), over HTTP with the real client."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from scheduler.kube.client import ApiError, KubeClient
from tests.integrations.controllers import native_podgroup_obj
from tests.kubeapi import KubeApiEmulator, api_client

GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"


@pytest_asyncio.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with KubeApiEmulator() as api, KubeClient(await api_client(api.base_url)) as kube:
        yield kube


def group(**spec: Any) -> dict[str, Any]:
    obj = native_podgroup_obj("g", 4)
    obj["spec"].update(spec)
    return obj


def rack(*keys: object) -> dict[str, Any]:
    return {"topology": [{"key": key} for key in keys]}


async def create(client: KubeClient, body: dict[str, Any]) -> int:
    try:
        await client.request_json("POST", GROUPS, body=copy.deepcopy(body))
    except ApiError as err:
        return err.status
    return 201


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "status"),
    [
        (group(schedulingConstraints=rack("topology.kubernetes.io/rack")), 201),
        (group(schedulingConstraints=rack("a", "b")), 422),  # 1.36: at most one level
        (group(schedulingConstraints=rack("")), 422),
        (group(schedulingConstraints=rack("bad key!")), 422),
        (group(schedulingConstraints=rack("UPPER.example/rack")), 422),
        (group(schedulingConstraints={"topology": [{}]}), 422),
        (group(disruptionMode="PodGroup"), 201),
        (group(disruptionMode="Whole"), 422),
        (group(priority=0), 201),
        (group(priority=5), 403),  # no class: the admission plugin computes 0
        (group(priorityClassName="high", priority=1000), 201),
        (group(priorityClassName="high", priority=2_000_000_000), 422),
        (group(priorityClassName="high", priority=2**40), 400),
        (group(priorityClassName="Not A Name", priority=1), 422),
        (group(schedulingPolicy={"gang": {"minCount": 0}}), 422),
        (group(schedulingPolicy={}), 422),
    ],
)
async def test_fields_are_validated_on_create(
    client: KubeClient, body: dict[str, Any], status: int
) -> None:
    assert await create(client, body) == status


@pytest.mark.asyncio
async def test_defaults_and_immutability(client: KubeClient) -> None:
    created = await client.request_json(
        "POST", GROUPS, body=group(schedulingConstraints=rack("topology.kubernetes.io/rack"))
    )
    assert created["spec"]["disruptionMode"] == "Pod"  # +default="Pod"
    assert created["spec"]["priority"] == 0  # no class and no global default class
    changed = copy.deepcopy(created)
    changed["spec"]["schedulingConstraints"] = rack("topology.kubernetes.io/zone")
    with pytest.raises(ApiError) as refused:
        await client.request_json("PUT", f"{GROUPS}/g", body=changed)
    assert refused.value.status == 422
    assert "spec.schedulingConstraints" in str(refused.value)


def claims(*entries: dict[str, Any]) -> list[dict[str, Any]]:
    return list(entries)


NAMED = {"name": "gpus", "resourceClaimName": "shared"}
TEMPLATED = {"name": "gpus", "resourceClaimTemplateName": "two-gpus"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("entries", "status"),
    [
        ([NAMED], 201),
        ([TEMPLATED], 201),
        ([{"name": "gpus"}], 422),  # a union: exactly one of the two
        ([{**NAMED, "resourceClaimTemplateName": "two-gpus"}], 422),
        ([{"name": "gpus", "resourceClaimName": "other/shared"}], 422),  # k8s-long-name
        ([{"name": "GPUs", "resourceClaimName": "shared"}], 422),  # k8s-short-name
        ([{"resourceClaimName": "shared"}], 422),  # name required
        ([NAMED, {**NAMED, "resourceClaimName": "b"}], 422),  # listMapKey=name
        ([{"name": f"c{i}", "resourceClaimName": "s"} for i in range(5)], 422),  # maxItems=4
    ],
)
async def test_group_claims_are_validated_on_create(
    client: KubeClient, entries: list[dict[str, Any]], status: int
) -> None:
    assert await create(client, group(resourceClaims=entries)) == status


@pytest.mark.asyncio
async def test_group_claims_are_immutable_and_their_statuses_must_name_one(
    client: KubeClient,
) -> None:
    created = await client.request_json("POST", GROUPS, body=group(resourceClaims=[TEMPLATED]))
    changed = copy.deepcopy(created)
    changed["spec"]["resourceClaims"] = [NAMED]
    with pytest.raises(ApiError) as refused:
        await client.request_json("PUT", f"{GROUPS}/g", body=changed)
    assert refused.value.status == 422 and "spec.resourceClaims" in str(refused.value)
    status = copy.deepcopy(created)
    status["status"] = {"resourceClaimStatuses": [{"name": "other", "resourceClaimName": "x"}]}
    with pytest.raises(ApiError) as refused:
        await client.request_json("PUT", f"{GROUPS}/g/status", body=status)
    assert refused.value.status == 422
    assert "must match the name of an entry in `spec.resourceClaims`" in str(refused.value)
    status["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "g-x"}]}
    stored = await client.request_json("PUT", f"{GROUPS}/g/status", body=status)
    assert stored["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "g-x"


OWN_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"


def own_group(topology: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 4, "topology": topology},
    }


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("topology", "status"),
    [
        ({"requiredKey": "topology.kubernetes.io/rack", "sliceSize": 2, "sliceKey": "c"}, 201),
        ({"sliceSize": 0, "sliceKey": "c"}, 422),  # minimum: 1
        ({"sliceSize": "2", "sliceKey": "c"}, 422),  # type: integer
        ({"sliceSize": 2**40, "sliceKey": "c"}, 400),  # format: int32
        ({"preferredKeys": ["k"] * 9}, 422),  # maxItems: 8
        ({"preferredKeys": "k"}, 422),  # type: array
        ({"requiredKey": "k" * 318}, 422),  # maxLength: 317
        # What the schema cannot say (a label key's format, a slice larger than the
        # gang) is stored, and the scheduler refuses it on the pods.
        ({"requiredKey": "not a key", "sliceSize": 9, "sliceKey": "c"}, 201),
    ],
)
async def test_the_own_crd_schema_is_enforced(
    client: KubeClient, topology: dict[str, Any], status: int
) -> None:
    try:
        await client.request_json("POST", OWN_GROUPS, body=own_group(topology))
    except ApiError as err:
        assert err.status == status, err
        return
    assert status == 201
