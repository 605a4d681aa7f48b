"""The emulator's resource.k8s.io/v1 for consumable capacity and partitionable devices,
over HTTP with kubernetes_asyncio, as Kubernetes 1.36's validation treats them
(pkg/apis/resource/validation/validation.go: validateRequestPolicy and its helpers,
validateCounterSet, validateDeviceCounterConsumption, validateDeviceCounter "any parsed
quantity is valid", shareID as a UID; capacity.requests is not validated by the
handwritten code, only decoded). What the server stores, the scheduler's cache must
then judge itself (a negative request, counters that do not add up)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from cache.dra.claims import claim_from_api
from cache.dra.store import DraCache
from tests.dra_objects import DRIVER, allocation, claim_obj, gpu_device, slice_obj
from tests.kubeapi import KubeApiEmulator, api_client

Json = dict[str, Any]
pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def dra() -> AsyncIterator[client.ResourceV1Api]:
    async with KubeApiEmulator() as emulator, await api_client(emulator.base_url) as http:
        yield client.ResourceV1Api(http)


async def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as error:
        await call
    return error.value.status, json.loads(error.value.body)["message"]


def shared_slice(policy: Json | None, capacity: str = "40Gi", **device: Any) -> Json:
    obj = slice_obj(gpus=1)
    body = obj["spec"]["devices"][0]
    body["allowMultipleAllocations"] = True
    body["capacity"] = {"memory": {"value": capacity}}
    if policy is not None:
        body["capacity"]["memory"]["requestPolicy"] = policy
    body.update(device)
    return obj


POLICY = "spec.devices[0].capacity[memory].requestPolicy"
POLICY_REFUSALS = [
    (
        "both-policies",
        {"default": "1Gi", "validValues": ["1Gi"], "validRange": {"min": "1Gi"}},
        f'{POLICY}: Forbidden: exactly one policy can be specified, cannot specify "validValues" '
        'and "validRange" at the same time',
    ),
    (
        "values-need-a-default",
        {"validValues": ["1Gi"]},
        f"{POLICY}.default: Required value: required when validValues is defined",
    ),
    (
        "values-sorted",
        {"default": "1Gi", "validValues": ["2Gi", "1Gi"]},
        f'{POLICY}.validValues[1]: Invalid value: "1Gi": values must be sorted in ascending order',
    ),
    (
        "value-above-capacity",
        {"default": "1Gi", "validValues": ["1Gi", "41Gi"]},
        f'{POLICY}.validValues[1]: Invalid value: "41Gi": option is larger than capacity value: '
        "40Gi",
    ),
    (
        "default-among-values",
        {"default": "3Gi", "validValues": ["1Gi", "2Gi"]},
        f'{POLICY}.validValues: Invalid value: "3Gi": default value is not valid according to the '
        "requestPolicy",
    ),
    (
        "range-needs-min",
        {"default": "1Gi", "validRange": {"max": "2Gi"}},
        f"{POLICY}.validRange.min: Required value: required when validRange is defined",
    ),
    (
        "min-above-capacity",
        {"default": "50Gi", "validRange": {"min": "50Gi"}},
        f'{POLICY}.validRange.min: Invalid value: "50Gi": min is larger than capacity value: 40Gi',
    ),
    (
        "default-below-min",
        {"default": "1Gi", "validRange": {"min": "2Gi"}},
        f'{POLICY}.validRange.min: Invalid value: "1Gi": default is less than min: 2Gi',
    ),
    (
        "max-above-capacity",
        {"default": "1Gi", "validRange": {"min": "1Gi", "max": "41Gi"}},
        f'{POLICY}.validRange.max: Invalid value: "41Gi": max is larger than capacity value: 40Gi',
    ),
    (
        "default-off-step",
        {"default": "3Gi", "validRange": {"min": "2Gi", "step": "2Gi"}},
        f'{POLICY}.validRange.step: Invalid value: "3Gi": value is not a multiple of a given step '
        "(2Gi) from (2Gi)",
    ),
]


@pytest.mark.parametrize(
    ("policy", "expected"), [c[1:] for c in POLICY_REFUSALS], ids=[c[0] for c in POLICY_REFUSALS]
)
async def test_a_request_policy_the_server_refuses(
    dra: client.ResourceV1Api, policy: Json, expected: str
) -> None:
    code, message = await refused(dra.create_resource_slice(shared_slice(policy)))
    assert code == 422
    assert expected in message


async def test_policies_at_their_limits_and_any_counter_quantity_are_stored(
    dra: client.ResourceV1Api,
) -> None:
    """Accepted as the real server accepts them: a default at min and max equal to the
    capacity, a step landing on max; and counters of any quantity, negative included
    (validateDeviceCounter), and a consumption naming a counter set no slice has (the
    allocator, not validation, judges that)."""
    policy = {"default": "8Gi", "validRange": {"min": "8Gi", "max": "40Gi", "step": "8Gi"}}
    await dra.create_resource_slice(shared_slice(policy))
    counters = copy.deepcopy(slice_obj(node="n2", gpus=0))
    counters["metadata"]["name"] = "n2-counters"
    del counters["spec"]["devices"]
    counters["spec"]["pool"]["resourceSliceCount"] = 2
    counters["spec"]["sharedCounters"] = [
        {"name": "gpu-0", "counters": {"memory": {"value": "-1Gi"}}}
    ]
    await dra.create_resource_slice(counters)
    parts = slice_obj(node="n2", gpus=1)
    parts["spec"]["pool"]["resourceSliceCount"] = 2
    parts["spec"]["devices"][0]["consumesCounters"] = [
        {"counterSet": "gpu-9", "counters": {"memory": {"value": "-40Gi"}}}
    ]
    stored = await dra.create_resource_slice(parts)
    cache = DraCache()
    for obj in (counters, parts):
        cache.apply_slice("ADDED", obj)
    pool = cache.pools()[0]
    assert stored.spec.devices[0].consumes_counters[0].counter_set == "gpu-9"
    assert "counter set gpu-9 not found" in pool.why_unusable()


async def test_capacity_requests_are_decoded_not_validated(dra: client.ResourceV1Api) -> None:
    """A wrong unit is a decoding error (400); a negative request is stored, and the
    scheduler's cache refuses the claim naming the field."""
    wrong = claim_obj()
    wrong["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "1Gx"}}
    code, _ = await refused(dra.create_namespaced_resource_claim("ml", wrong))
    assert code == 400
    negative = claim_obj()
    negative["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {"memory": "-1Gi"}
    }
    stored = await dra.create_namespaced_resource_claim("ml", negative)
    record = claim_from_api(dra.api_client.sanitize_for_serialization(stored))
    assert (
        "spec.devices.requests[0].exactly.capacity.requests[memory] is negative"
        in (record.problems[0])
    )


async def test_a_share_is_written_with_a_uuid_share_id_only(dra: client.ResourceV1Api) -> None:
    await dra.create_resource_slice(shared_slice(None))
    created = await dra.create_namespaced_resource_claim("ml", claim_obj())
    status = {"allocation": allocation()}
    result = status["allocation"]["devices"]["results"][0]
    result["shareID"] = "not-a-uuid"
    result["consumedCapacity"] = {"memory": "10Gi"}
    body = {"metadata": {"resourceVersion": created.metadata.resource_version}, "status": status}
    code, message = await refused(dra.patch_namespaced_resource_claim_status("train-0", "ml", body))
    assert code == 422 and "status.allocation.devices.results[0].shareID" in message
    result["shareID"] = "9e107d9d-372b-4f2c-9c64-8d0a4b3c6f11"
    written = await dra.patch_namespaced_resource_claim_status("train-0", "ml", body)
    [stored] = written.status.allocation.devices.results
    assert stored.share_id == result["shareID"]
    assert stored.consumed_capacity == {"memory": "10Gi"}
    assert gpu_device(0)["name"] == stored.device and stored.driver == DRIVER
