"""The emulator refuses, as the real API server does, hostile values in the fields the
scheduler reads for host ports, preferred node affinity and volumes (over HTTP, with
the real client)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from scheduler.kube.client import ApiError, KubeClient
from tests.factories import pod_obj
from tests.kubeapi import KubeApiEmulator, api_client
from tests.volume_objects import csinode_obj, pvc_obj, storage_class_obj, with_claims

PODS = "/api/v1/namespaces/default/pods"


@pytest_asyncio.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with KubeApiEmulator() as api, KubeClient(await api_client(api.base_url)) as kube:
        yield kube


def _pod_with_port(**port: object) -> dict[str, Any]:
    pod = pod_obj("p")
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, **port}]
    return pod


def _pod_with_weight(weight: object) -> dict[str, Any]:
    pod = pod_obj("p")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": weight,
                    "preference": {"matchExpressions": [{"key": "k", "operator": "Exists"}]},
                }
            ]
        }
    }
    return pod


def _two_containers_on_port(port: int) -> dict[str, Any]:
    pod = _pod_with_port(hostPort=port)
    second = {**pod["spec"]["containers"][0], "name": "second"}
    pod["spec"]["containers"].append(second)
    return pod


def _host_network(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["hostNetwork"] = True
    return pod


def _ephemeral_named(name: str) -> dict[str, Any]:
    return with_claims(pod_obj("p"), ephemeral=[name])


def _claimless_volume() -> dict[str, Any]:
    pod = with_claims(pod_obj("p"), "data")
    pod["spec"]["volumes"][0]["persistentVolumeClaim"] = {"claimName": ""}
    return pod


async def _create(client: KubeClient, path: str, body: dict[str, Any]) -> int:
    body = copy.deepcopy(body)
    body["metadata"].pop("resourceVersion", None)
    body["metadata"].pop("uid", None)
    try:
        await client.request_json("POST", path, body=body)
    except ApiError as err:
        return err.status
    return 201


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("pod", "status"),
    [
        (_pod_with_port(hostPort=70000), 422),
        (_pod_with_port(hostPort=-1), 422),
        (_pod_with_port(hostPort=2**40), 400),
        (_pod_with_port(hostPort="80"), 400),
        (_pod_with_port(hostPort=80.5), 400),
        (_pod_with_port(containerPort=0), 422),
        (_pod_with_port(containerPort=65536), 422),
        (_pod_with_port(hostPort=80, protocol="ICMP"), 422),
        (_host_network(_pod_with_port(hostPort=9090)), 422),
        (_pod_with_weight(0), 422),
        (_pod_with_weight(101), 422),
        (_pod_with_weight("50"), 400),
        (_claimless_volume(), 422),
        (_two_containers_on_port(80), 422),
        (_ephemeral_named("../other"), 422),
        (_ephemeral_named("x" * 64), 422),
        (_ephemeral_named("Scratch"), 422),
        (_ephemeral_named("scratch"), 201),
        (_pod_with_port(hostPort=80, protocol="UDP", hostIP="10.0.0.1"), 201),
        (_host_network(_pod_with_port(hostPort=8080)), 201),
        (_pod_with_weight(100), 201),
    ],
)
async def test_pod_fields_are_validated_on_create(
    client: KubeClient, pod: dict[str, Any], status: int
) -> None:
    assert await _create(client, PODS, pod) == status


@pytest.mark.asyncio
async def test_storage_objects_are_validated_on_create(client: KubeClient) -> None:
    claims = "/api/v1/namespaces/default/persistentvolumeclaims"
    assert await _create(client, claims, pvc_obj("a", modes=["Everything"])) == 422
    assert await _create(client, claims, pvc_obj("b", modes=[])) == 422
    assert await _create(client, claims, pvc_obj("c")) == 201
    csinodes = "/apis/storage.k8s.io/v1/csinodes"
    assert await _create(client, csinodes, csinode_obj("n0", {"pd.csi": -1})) == 422
    assert await _create(client, csinodes, csinode_obj("n1", {"pd.csi": 10**30})) == 400
    assert await _create(client, csinodes, csinode_obj("n2", {"pd.csi": 0})) == 201
    classes = "/apis/storage.k8s.io/v1/storageclasses"
    broken = storage_class_obj("zonal", zones=["a"])
    broken["allowedTopologies"][0]["matchLabelExpressions"][0]["values"] = []
    assert await _create(client, classes, broken) == 422
    assert await _create(client, classes, storage_class_obj("zonal", zones=["a"])) == 201
