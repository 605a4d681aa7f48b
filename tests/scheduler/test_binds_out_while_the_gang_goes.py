"""A bind sent to complete a running gang, while the cluster takes the rest of the gang
away (the fuzz suite's partial gang, tests/fuzz/test_quota_guard_fuzz.py).

A member is recreated and planned alone, its gang's other members bound; before its
bind lands, those members go. Through the API (watch events and relists, the
resourceVersions it writes) two things hold:

- a member seen bound is never seen pending again under its uid: nodeName is set once,
  by the Binding, which writes a newer resourceVersion, so an older record of the pod
  (a stale relist, a late event) is dropped. The fuzz harness's "bound" confirms without
  a newer version, which is how its example showed bound members pending again;
- members deleted (and recreated under new uids) while the bind is out are the
  cluster's doing: the bind was sent when the gang was whole, and a Binding has no
  precondition on other pods, so it may land and leave 1 of 4 bound. The core keeps the
  bind's reservation through the relist, plans nothing for the gang until the outcome
  is known, then plans exactly the recreated members: the gang is whole again.
"""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType, Reservation
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj

ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED
SIZE = 4


def member(i: int, uid: str, *, node: str = "", rv: str = "1") -> dict[str, Any]:
    return pod_obj(
        f"g-{i}", gang="g", min_member=SIZE, gpus=1, uid=uid, node_name=node, resource_version=rv
    )


def bound_members(core: SchedulingCore) -> list[str]:
    return sorted(pod.uid for pod in core.cache.pods() if pod.node_name and pod.gang_name == "g")


def plan(core: SchedulingCore, now: float) -> Plan:
    attempt = core.schedule_next(now)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    return attempt.result


def bind(core: SchedulingCore, planned: Plan, uids: list[str], rv: str) -> None:
    """The binder's 201s, then the watch showing each member bound at a newer version."""
    core.bind_accepted(planned.placements)
    for placement in planned.placements:
        i = uids.index(placement.pod_uid)
        core.apply_pod(MODIFIED, member(i, placement.pod_uid, node=placement.node, rv=rv), 1)


def running_gang() -> tuple[SchedulingCore, list[str]]:
    core = SchedulingCore(build_profile())
    for name in ("n0", "n1"):
        core.apply_node(ADDED, node_obj(name, gpus=4), 0)
    uids = [f"a{i}" for i in range(SIZE)]
    for i, uid in enumerate(uids):
        core.apply_pod(ADDED, member(i, uid), 0)
    bind(core, plan(core, 0), uids, rv="2")
    assert bound_members(core) == uids
    return core, uids


def test_the_fuzz_example_through_the_api_never_shows_a_bound_member_pending() -> None:
    core, uids = running_gang()
    lone = pod_obj("h0")
    core.apply_pod(ADDED, lone, 1)
    (lone_placement,) = plan(core, 1).placements
    core.apply_pod(MODIFIED, member(0, uids[0]), 1)  # "well_formed 0": its old version
    core.apply_pod(ADDED, lone, 1)
    assert core.schedule_next(1) is None  # nothing to re-plan: the gang is whole
    core.bind_accepted([lone_placement])
    core.replace_pods([member(i, uid) for i, uid in enumerate(uids)], 2)  # a stale list
    assert bound_members(core) == uids and core.cache.pod("uid-default-h0") is None
    assert core.schedule_next(3) is None


def test_a_bind_out_when_the_rest_of_the_gang_goes_lands_then_the_gang_is_made_whole() -> None:
    core, uids = running_gang()
    # Member 0 is deleted and recreated (uid r0): planned alone, the others still bound.
    core.apply_pod(DELETED, member(0, uids[0], node="n0", rv="3"), 1)
    core.apply_pod(ADDED, member(0, "r0", rv="4"), 1)
    replacement = plan(core, 1)
    assert [p.pod_uid for p in replacement.placements] == ["r0"]
    # The watch breaks; meanwhile the other three were deleted and recreated.
    recreated = ["r0", "r1", "r2", "r3"]
    core.replace_pods([member(i, uid, rv=str(5 + i)) for i, uid in enumerate(recreated)], 2)
    assert core.cache.reservation("r0") == Reservation.BINDING  # survives the relist
    assert bound_members(core) == []
    # Ready (r0 shown where it is being bound, three pending), but not planned while its
    # bind is out: its outcome decides what is left to place.
    core.refresh(3)
    assert core.gangs["default/g"].ready
    assert core.schedule_next(3) is None
    # The bind lands: 1 of 4 bound, by the cluster's doing; the next cycle places the rest.
    bind(core, replacement, recreated, rv="9")
    assert bound_members(core) == ["r0"]
    rest = plan(core, 400)
    assert sorted(p.pod_uid for p in rest.placements) == ["r1", "r2", "r3"]
    bind(core, rest, recreated, rv="10")
    assert bound_members(core) == recreated


def test_when_that_bind_fails_nothing_of_the_gang_stays_bound_or_reserved() -> None:
    core, uids = running_gang()
    core.apply_pod(DELETED, member(0, uids[0], node="n0", rv="3"), 1)
    core.apply_pod(ADDED, member(0, "r0", rv="4"), 1)
    replacement = plan(core, 1)
    recreated = ["r0", "r1", "r2", "r3"]
    core.replace_pods([member(i, uid, rv=str(5 + i)) for i, uid in enumerate(recreated)], 2)
    core.bind_failed("default/g", replacement.placements, 3, "409: conflict")
    assert bound_members(core) == [] and core.cache.assumed() == {}
    whole = plan(core, 400)
    assert sorted(p.pod_uid for p in whole.placements) == recreated
