"""The revisit's count of devices (scheduler/planner/dra_choice.py, policies/dra/
shortage.py), and the offers refused for a member asking alike (dra_choice.refusal_key),
only skip searches that would fail: over random nodes, devices others
hold and gangs (1-2 devices per member, on one root or not, a claim shared or not),
each gang is planned with the count and with every search run, and the plans agree.
(Within the revisit's bound, which these small gangs never reach: the count leaves
more of it to searches that can succeed.)"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.dra.store import DraCache
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.dra import shortage
from policies.profile import build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner import dra_choice
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, PlanResult
from scheduler.planner.volume_claims import plan_with_claims
from tests.dra_builders import DRIVER, allocated, claim_obj, class_obj, device, exactly, slice_obj
from tests.factories import node_obj
from tests.scheduler.dra_cores import claiming

NODES = ("n0", "n1")
SAME_ROOT = [{"matchAttribute": f"{DRIVER}/root"}]


def _plan(cache: ClusterCache, dra: DraCache, pods: list[dict[str, Any]]) -> PlanResult:
    infos = [cache.pod(pod["metadata"]["uid"]) for pod in pods]
    gang = next(iter(assemble_gangs([p for p in infos if p], {}, "gang-scheduler").gangs.values()))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    planner = Planner(build_profile())
    return plan_with_claims(planner, gang, snapshot, VolumeCache(), cache, dra=dra)


@settings(max_examples=120, deadline=None)
@given(
    devices=st.lists(st.integers(0, 6), min_size=2, max_size=2),  # per node
    running=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5)), max_size=5),
    counts=st.lists(st.integers(1, 2), min_size=2, max_size=6),
    same_root=st.booleans(),
    shared=st.integers(0, 2),  # the devices of a claim every member also uses (0: none)
)
def test_plans_with_the_count_are_the_plans_of_every_search_run(
    devices: list[int],
    running: list[tuple[int, int]],
    counts: list[int],
    same_root: bool,
    shared: int,
) -> None:
    cache = ClusterCache()
    dra = DraCache()
    dra.apply_class("ADDED", class_obj())
    for node, number in zip(NODES, devices, strict=True):
        cache.apply_node(EventType.ADDED, node_obj(node))
        listed = [device(f"gpu-{i}", memory=80, root=f"r{i // 4}") for i in range(number)]
        dra.apply_slice("ADDED", slice_obj(f"s-{node}", listed, node=node))
    for index, (node, number) in enumerate(running):
        if number < devices[node]:
            status = allocated((DRIVER, NODES[node], f"gpu-{number}"))
            dra.apply_claim("ADDED", claim_obj(f"run-{index}", [exactly()], allocation=status))
    if shared:
        dra.apply_claim("ADDED", claim_obj("shared", [exactly(count=shared)]))
    pods = []
    for member, count in enumerate(counts):
        constraints = SAME_ROOT if same_root else None
        request = [exactly(count=count)]
        dra.apply_claim("ADDED", claim_obj(f"c{member}", request, constraints=constraints))
        claims = (f"c{member}", "shared") if shared else (f"c{member}",)
        pods.append(claiming(f"p{member}", *claims, size=len(counts)))
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)

    told: list[bool] = []

    def counting(*args: Any) -> bool:
        told.append(shortage.too_few_devices(*args))
        return told[-1]

    with mock.patch.object(dra_choice, "too_few_devices", counting):
        counted = _plan(cache, dra, pods)
    with mock.patch.object(dra_choice, "too_few_devices", lambda *args: False):
        searched = _plan(cache, dra, pods)
    event(f"searches skipped: {min(sum(told), 3)}{'+' if sum(told) >= 3 else ''}")
    event(f"placed: {isinstance(counted, Plan)}")
    assert counted == searched
    # Offers refused for a member asking alike on the node as it stands are not
    # searched again (dra_choice.refusal_key): the plans, and the words of a gang that
    # waits, are those of every offer searched.
    with mock.patch.object(dra_choice, "refusal_key", lambda *args: None):
        every_offer = _plan(cache, dra, pods)
    assert counted == every_offer
