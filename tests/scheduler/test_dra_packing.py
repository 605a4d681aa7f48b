"""DRA shares packed as `nvidia.com/vgpu` shares through the core (docs/dra.md,
"Packing DRA shares"): the node's shared GPUs, with what others' claims consume, are
what the packing scores and GpuFit judge; the claim gets the GPU the chosen shares name;
the whole-node reserve sees DRA GPUs as device-plugin GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import EventType
from cache.dra.view import ReleasedView
from cache.gpu import NO_GPU, GpuRequest
from cache.pod import pod_from_api
from policies.profile import build_profile
from policies.scores.fragmentation import OnlineWorkload
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.dra_claims import resolve_dra
from scheduler.planner.result import Plan
from scheduler.sim.openb import OpenbPod, pod_object
from scheduler.sim.profiles import openb_profile
from tests.dra_builders import claim_obj, class_obj, device, exactly, slice_obj
from tests.factories import node_obj, pod_obj

# Written out, not imported: the convention as a user writes it
# (cache/dra/gpu_shares.py).
DRIVER = "gpu.gang-scheduler.io"
MILLI = f"{DRIVER}/milli"


def shared_gpus(node: str, count: int) -> dict[str, Any]:
    devices = []
    for index in range(count):
        body = device(f"gpu-{index}", productName="A100")
        body["allowMultipleAllocations"] = True
        body["capacity"] = {MILLI: {"value": "1000"}}
        devices.append(body)
    return slice_obj(f"{node}-gpus", devices, node=node, driver=DRIVER)


def share_claim(name: str, milli: int, count: int = 1, **kw: Any) -> dict[str, Any]:
    asks = {"capacity": {"requests": {MILLI: str(milli)}}}
    return claim_obj(name, [exactly(device_class=DRIVER, count=count, **asks)], **kw)


def taken_by_others(node: str, device_name: str, milli: int) -> dict[str, Any]:
    """A claim another scheduler allocated: a share of `device_name` on `node`."""
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": node,
        "device": device_name,
        "shareID": "7f1c58e4-4a6e-4f0e-9d0e-3a3b7c1d2e4f",
        "consumedCapacity": {MILLI: str(milli)},
    }
    return share_claim("others", milli, allocation={"devices": {"results": [result]}})


# What FGD learns to expect: whole GPUs and shares of 400.
HISTORY = [
    pod_from_api(pod_object(OpenbPod(f"h{i}", 1000, 1024, 1, milli), i))
    for i, milli in enumerate([1000, 1000, 400, 400])
]


def core_with(policy: str, seed: int, gpus: dict[str, int], **profile: Any) -> SchedulingCore:
    core = SchedulingCore(
        openb_profile(policy, seed=seed, max_cpu_milli=64_000, max_gpu_milli=8000, **profile)
    )
    core.apply_dra_object(
        "deviceclasses", EventType.ADDED, class_obj(DRIVER, (f'device.driver == "{DRIVER}"',)), 0
    )
    for name, count in gpus.items():
        core.apply_node(EventType.ADDED, node_obj(name, cpu="64"), 0.0)
        core.apply_dra_object("resourceslices", EventType.ADDED, shared_gpus(name, count), 0.0)
    return core


def place(core: SchedulingCore, name: str, claim: dict[str, Any]) -> tuple[str, list[str]]:
    """Schedule a one-pod gang using `claim`; its node and the devices its claim got."""
    core.apply_dra_object("resourceclaims", EventType.ADDED, claim, 0.0)
    pod = pod_obj(name, namespace="ns", gang=None, cpu="1")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name(claim)}]
    core.apply_pod(EventType.ADDED, pod, 0.0)
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    (placement,) = attempt.result.placements
    (allocated,) = attempt.result.claims
    assert allocated.allocation is not None
    for key in (f"{c.namespace}/{c.name}" for c in attempt.result.claims):
        core.dra.confirm(key)
    core.bound(placement)
    devices = [f"{r.pool}/{r.device}" for r in allocated.allocation.results]
    return placement.node, devices


def claim_name(claim: dict[str, Any]) -> str:
    return str(claim["metadata"]["name"])


@pytest.mark.parametrize("policy", ["bestfit", "fgd"])
@pytest.mark.parametrize("seed", range(5))
def test_a_share_completes_the_gpu_others_claims_already_cut(policy: str, seed: int) -> None:
    """Six nodes of one GPU; another scheduler's claim took 600 of n5's. A claim asking
    400 goes there, on that GPU, whatever the tie-break ranks (the seed): what is left
    of each GPU is what the scores judge. Before, they saw no GPU on a DRA node and the
    ranks chose."""
    core = core_with(policy, seed, {f"n{i}": 1 for i in range(6)}, history=HISTORY)
    core.apply_dra_object("resourceclaims", EventType.ADDED, taken_by_others("n5", "gpu-0", 600), 0)
    assert place(core, "p", share_claim("c", 400)) == ("n5", ["n5/gpu-0"])
    core.refresh(0.0)
    assert core.cache.node("n5").gpu_free == [0]  # type: ignore[union-attr]


def test_whole_gpus_and_shares_follow_the_chosen_devices() -> None:
    """On one node of four GPUs: a share goes to GPU 0 by the packing rule; two whole
    GPUs then take two fully free ones, never the cut GPU; a share of what is left
    on GPU 0 completes it."""
    core = core_with("fgd", 0, {"n0": 4}, history=[])
    node, first = place(core, "a", share_claim("a", 300))
    assert (node, len(first)) == ("n0", 1)
    _, whole = place(core, "b", share_claim("b", 1000, count=2))
    assert first[0] not in whole and len(set(whole)) == 2
    _, last = place(core, "c", share_claim("c", 700))
    assert last == first
    core.refresh(0.0)  # the shown GPUs follow the DRA cache at each cycle's start
    free = core.cache.node("n0").gpu_free  # type: ignore[union-attr]
    assert sorted(free) == [0, 0, 0, 1000]


def test_the_whole_node_reserve_keeps_a_dra_node_whole_for_the_largest_request() -> None:
    """fgd-complete-reserve learns from the history that 8-GPU pods come: a share
    goes to the small node, not onto one of the two 8-GPU nodes that the reserve keeps
    whole, as it does for nvidia.com/vgpu."""
    history = [
        pod_from_api(pod_object(OpenbPod(f"h{i}", 8000, 1024, 8, 1000), i)) for i in range(4)
    ] + [pod_from_api(pod_object(OpenbPod(f"s{i}", 1000, 1024, 1, 500), 10 + i)) for i in range(4)]
    core = core_with(
        "fgd-complete-reserve",
        0,
        {"big-0": 8, "big-1": 8, "small": 2},
        history=history,
        cluster_cpu_milli=3 * 64_000,
        cluster_gpu_milli=18_000,
    )
    node, _ = place(core, "p", share_claim("p", 500))
    assert node == "small"


def test_a_what_if_judges_the_member_by_the_allocator_alone() -> None:
    """Preemption's what-if frees the victims' devices, which the shown GPUs do not: a
    GPU demand is the member's GPU request on the core's DraCache, never on a view."""
    core = core_with("bestfit", 0, {"n0": 1}, history=[])
    claim = share_claim("c", 400)
    core.apply_dra_object("resourceclaims", EventType.ADDED, claim, 0.0)
    pod = pod_obj("p", namespace="ns", gang=None, cpu="1")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    core.apply_pod(EventType.ADDED, pod, 0.0)
    core.refresh(0.0)
    record = core.cache.pod(pod["metadata"]["uid"])
    assert record is not None
    core.cache.update_snapshot(core.snapshot)
    labels = core.cache.namespace_labels()
    (direct,), kind = resolve_dra([record], core.dra, core.snapshot, labels)
    assert direct.gpu == GpuRequest(1, 400) and kind is not None and kind.gpu_members
    (viewed,), kind = resolve_dra([record], ReleasedView(core.dra, ()), core.snapshot, labels)
    assert viewed.gpu == NO_GPU and kind is not None and not kind.gpu_members


def test_the_learnt_workload_counts_a_claim_asking_gpu_shares_as_those_gpus() -> None:
    """A live core learns the workload from arriving pods. A pod whose one claim asks a
    400 share is counted as a 400-milli GPU pod, as the planner judges it; one whose
    claim is not there yet is counted once it is."""
    core = SchedulingCore(build_profile("fgd"))
    workload = core.profile.workload
    assert isinstance(workload, OnlineWorkload)
    core.apply_dra_object("resourceclaims", EventType.ADDED, share_claim("c", 400), 0.0)
    for name, claim in (("p", "c"), ("q", "later")):
        pod = pod_obj(name, namespace="ns", gang=None, cpu="1")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        core.apply_pod(EventType.ADDED, pod, 0.0)
    assert {(s.gpu_milli, s.gpu_count): n for s, n in workload.shape_counts().items()} == {
        (400, 1): 1
    }
    core.apply_dra_object("resourceclaims", EventType.ADDED, share_claim("later", 1000, 2), 0.0)
    later = pod_obj("q", namespace="ns", gang=None, cpu="1")
    later["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "later"}]
    later["metadata"]["resourceVersion"] = "2"
    core.apply_pod(EventType.MODIFIED, later, 0.0)
    assert {(s.gpu_milli, s.gpu_count): n for s, n in workload.shape_counts().items()} == {
        (400, 1): 1,
        (1000, 2): 1,
    }
