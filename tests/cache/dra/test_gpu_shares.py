"""The adapter that shows DRA shared GPUs to the packing scores (cache/dra/gpu_shares.py):
which devices are shared GPUs, what is free of each, and which claims are GPU demands."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import ClusterCache, EventType
from cache.dra.claims import claim_from_api
from cache.dra.gpu_shares import (
    SHARE_CAPACITY,
    SHARE_DRIVER,
    device_id_of,
    gpu_demand,
    plain_shared_gpu,
    shared_gpu_ids,
)
from cache.dra.slices import DeviceId, slice_from_api
from cache.dra.store import DraCache
from cache.gpu import GpuRequest
from tests.dra_builders import claim_obj, device, exactly, first_available, slice_obj, sub
from tests.factories import node_obj


def gpu(name: str, milli: str = "1000", model: str = "A100", **extra: Any) -> dict[str, Any]:
    body = device(name, productName=model)
    body["allowMultipleAllocations"] = True
    body["capacity"] = {SHARE_CAPACITY: {"value": milli}, **extra}
    return body


def share(pool: str, name: str, milli: str, share_id: str) -> dict[str, Any]:
    return {
        "request": "gpu",
        "driver": SHARE_DRIVER,
        "pool": pool,
        "device": name,
        "shareID": share_id,
        "consumedCapacity": {SHARE_CAPACITY: milli},
    }


def allocated_claim(name: str, *results: dict[str, Any]) -> dict[str, Any]:
    return claim_obj(name, [exactly()], allocation={"devices": {"results": list(results)}})


def demand(**request: Any) -> GpuRequest | None:
    return gpu_demand(claim_from_api(claim_obj("c", [exactly(**request)])))


def test_free_milli_is_the_capacity_less_the_shares_and_zero_when_taken_whole() -> None:
    cache = DraCache()
    devices = [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2"), device("nic-0")]
    cache.apply_slice("ADDED", slice_obj("s", devices, node="n1", driver=SHARE_DRIVER))
    cache.apply_claim(
        "ADDED",
        allocated_claim(
            "a",
            share("n1", "gpu-0", "300", "11111111-1111-1111-1111-111111111111"),
            share("n1", "gpu-0", "250", "22222222-2222-2222-2222-222222222222"),
        ),
    )
    whole = {"request": "gpu", "driver": SHARE_DRIVER, "pool": "n1", "device": "gpu-2"}
    cache.apply_claim("ADDED", allocated_claim("b", whole))
    shown = cache.shared_gpus("n1", {})
    assert shown.free == (450, 1000, 0)  # the NIC is no shared GPU
    assert [d.index for d in shown.devices] == [0, 1, 2]
    assert {d.model for d in shown.devices} == {"A100"}
    assert shown.ids[1] == DeviceId(SHARE_DRIVER, "n1", "gpu-1")
    assert shown.devices[1].uuid == f"{SHARE_DRIVER}/n1/gpu-1"


def test_devices_not_shared_or_of_another_unit_are_not_shown() -> None:
    cache = DraCache()
    unshared = gpu("gpu-0")
    unshared["allowMultipleAllocations"] = False
    devices = [unshared, gpu("gpu-1", milli="100"), gpu("gpu-2")]
    cache.apply_slice("ADDED", slice_obj("s", devices, node="n1", driver=SHARE_DRIVER))
    shown = cache.shared_gpus("n1", {})
    assert [str(i) for i in shown.ids] == [f"{SHARE_DRIVER}/n1/gpu-2"]
    assert cache.shared_gpus("elsewhere", {}).ids == ()


def test_plain_shared_gpu_has_the_share_capacity_alone_without_policy() -> None:
    def record(body: dict[str, Any]) -> Any:
        return slice_from_api(slice_obj("s", [body], node="n1", driver=SHARE_DRIVER)).devices[0]

    assert plain_shared_gpu(record(gpu("g")))
    assert not plain_shared_gpu(record(gpu("g", memory={"value": "80Gi"})))
    policy = gpu("g")
    policy["capacity"][SHARE_CAPACITY]["requestPolicy"] = {
        "validRange": {"min": "100", "step": "100"}
    }
    assert not plain_shared_gpu(record(policy))


@pytest.mark.parametrize(
    ("request_fields", "expected"),
    [
        ({"capacity": {"requests": {SHARE_CAPACITY: "300"}}}, GpuRequest(1, 300)),
        ({"count": 4, "capacity": {"requests": {SHARE_CAPACITY: "1000"}}}, GpuRequest(4, 1000)),
        # Several fractions, a share of a whole unit, no capacity, another capacity.
        ({"count": 2, "capacity": {"requests": {SHARE_CAPACITY: "300"}}}, None),
        ({"capacity": {"requests": {SHARE_CAPACITY: "1500"}}}, None),
        ({"capacity": {"requests": {SHARE_CAPACITY: "300m"}}}, None),
        ({}, None),
        ({"capacity": {"requests": {"memory": "10Gi"}}}, None),
        ({"adminAccess": True, "capacity": {"requests": {SHARE_CAPACITY: "300"}}}, None),
    ],
)
def test_gpu_demand(request_fields: dict[str, Any], expected: GpuRequest | None) -> None:
    assert demand(**request_fields) == expected


def test_claims_of_other_forms_are_no_gpu_demand() -> None:
    asks = {"capacity": {"requests": {SHARE_CAPACITY: "300"}}}
    two = claim_obj("c", [exactly("a", **asks), exactly("b", **asks)])
    assert gpu_demand(claim_from_api(two)) is None
    either = claim_obj("c", [first_available("gpu", sub("x"), sub("y"))])
    assert gpu_demand(claim_from_api(either)) is None
    constrained = claim_obj(
        "c", [exactly(**asks)], constraints=[{"matchAttribute": f"{SHARE_DRIVER}/productName"}]
    )
    assert gpu_demand(claim_from_api(constrained)) is None


def test_device_ids_from_shares_of_shown_gpus() -> None:
    assert device_id_of("gpu.gang-scheduler.io/rack/7/node-1/gpu-3") == DeviceId(
        SHARE_DRIVER, "rack/7/node-1", "gpu-3"
    )
    assert device_id_of("no-pool") is None
    cache = DraCache()
    cache.apply_slice(
        "ADDED", slice_obj("s", [gpu("gpu-0"), gpu("gpu-1")], node="n1", driver=SHARE_DRIVER)
    )
    shown = cache.shared_gpus("n1", {})
    assert shared_gpu_ids(shown.devices, ((1, 500), (9, 100))) == (shown.ids[1],)


def test_shared_gpus_are_shown_only_on_nodes_without_gpus_of_their_own() -> None:
    """ClusterCache.show_shared_gpus: a node advertising device-plugin GPUs keeps them;
    on another node the shown GPUs are its devices, and go when nothing is shown; a
    node update keeps them shown."""
    cluster = ClusterCache()
    cluster.apply_node(EventType.ADDED, node_obj("plain"))
    cluster.apply_node(EventType.ADDED, node_obj("plugin", gpus=2, model="T4"))
    cache = DraCache()
    cache.apply_slice(
        "ADDED", slice_obj("s", [gpu("gpu-0"), gpu("gpu-1")], node="x", driver=SHARE_DRIVER)
    )
    shown = cache.shared_gpus("x", {})
    for name in ("plain", "plugin"):
        cluster.show_shared_gpus(name, shown.devices, (400, 1000))
    plugin = cluster.node("plugin")
    assert plugin is not None and plugin.gpu_model == "T4" and plugin.gpu_free == [1000, 1000]
    plain = cluster.node("plain")
    assert plain is not None and plain.devices == shown.devices and plain.gpu_free == [400, 1000]
    cluster.apply_node(EventType.MODIFIED, node_obj("plain", cpu="32", resource_version="2"))
    again = cluster.node("plain")
    assert again is not None and again.gpu_free == [400, 1000]
    cluster.show_shared_gpus("plain", (), ())
    gone = cluster.node("plain")
    assert gone is not None and gone.devices == () and gone.gpu_free == []
