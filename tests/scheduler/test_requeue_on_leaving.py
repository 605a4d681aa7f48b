"""A deleted pod retries a gang waiting on inter-pod terms only when those terms could
have counted it (scheduler/cycle/requeue.py): a pod a gang's required anti-affinity or hard
spread selects, or whose own anti-affinity kept the gang out. Every other deletion
leaves the gang waiting, unless the room it frees on its node could take a member."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.podconstraints import ZONE, labelled_pod, required, spread, term, zoned_node

BIG, SMALL = "64", "2"  # a member asks for 4 CPUs: it fits on a big node only


def core_with(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> SchedulingCore:
    core = SchedulingCore(build_profile())
    for node in nodes:
        core.apply_node(EventType.ADDED, node, 0.0)
    for pod in pods:
        core.apply_pod(EventType.ADDED, pod, 0.0)
    return core


def running(name: str, node: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return labelled_pod(name, labels, node_name=node, cpu="1", **extra)


def waits(core: SchedulingCore, key: str) -> None:
    attempt = core.schedule_next(1.0)
    assert attempt is not None and attempt.gang.key == key
    assert not isinstance(attempt.result, Plan)
    assert core.queue.state(key) == "unschedulable"


def leave(core: SchedulingCore, pod: dict[str, Any], now: float) -> None:
    pod["metadata"]["resourceVersion"] = "9"
    core.apply_pod(EventType.DELETED, pod, now)


def test_anti_affinity_a_deletion_it_never_counted_does_not_retry_the_gang() -> None:
    web_a, web_b = running("web-a", "s0", {"app": "web"}), running("web-b", "s1", {"app": "web"})
    db = running("db", "s1", {"app": "db"})
    elsewhere = running("web-c", "s1", {"app": "web"}, namespace="other")
    member = labelled_pod(
        "g-0",
        gang="g",
        min_member=1,
        cpu="4",
        affinity=required("podAntiAffinity", term({"app": "web"}, ZONE)),
    )
    nodes = [
        zoned_node("n0", "a", cpu=BIG),
        zoned_node("s0", "a", cpu=SMALL),
        zoned_node("n1", "b", cpu=BIG),
        zoned_node("s1", "b", cpu=SMALL),
    ]
    core = core_with(nodes, [web_a, web_b, db, elsewhere, member])
    core.refresh(0.0)
    waits(core, "default/g")
    leave(core, db, 2.0)  # other labels: its terms never counted it
    leave(core, elsewhere, 2.0)  # the labels, but another namespace
    assert core.queue.state("default/g") == "unschedulable"
    leave(core, web_a, 3.0)  # zone a has no web pod left: the gang fits on n0
    assert core.queue.state("default/g") == "backoff"
    core.refresh(5.0)
    attempt = core.schedule_next(5.0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert [p.node for p in attempt.result.placements] == ["n0"]


def test_hard_spread_only_a_pod_its_selector_counts_retries_the_gang() -> None:
    web = running("web-a", "s0", {"app": "web"})
    db = running("db", "s1", {"app": "db"})
    member = labelled_pod(
        "g-0", {"app": "web"}, gang="g", min_member=1, cpu="4", spread=[spread({"app": "web"})]
    )
    # Zone a would have 2 web pods to zone b's 0 (skew 2 > 1); zone b has no room.
    nodes = [zoned_node("n0", "a", cpu=BIG), zoned_node("s0", "a", cpu=SMALL)]
    nodes.append(zoned_node("s1", "b", cpu=SMALL))
    core = core_with(nodes, [web, db, member])
    core.refresh(0.0)
    waits(core, "default/g")
    leave(core, db, 2.0)
    assert core.queue.state("default/g") == "unschedulable"
    leave(core, web, 3.0)
    assert core.queue.state("default/g") == "backoff"


def test_a_pod_whose_own_anti_affinity_kept_the_gang_out_retries_it_only_that_pod() -> None:
    keeps_out = required("podAntiAffinity", term({"app": "batch"}, ZONE))
    guard = running("guard", "s0", {"app": "guard"}, affinity=keeps_out)
    # The same term in another namespace selects that namespace's pods only.
    foreign = running("guard-x", "s0", {"app": "guard"}, affinity=keeps_out, namespace="other")
    member = labelled_pod("g-0", {"app": "batch"}, gang="g", min_member=1, cpu="4")
    nodes = [zoned_node("n0", "a", cpu=BIG), zoned_node("s0", "a", cpu=SMALL)]
    core = core_with(nodes, [guard, foreign, member])
    core.refresh(0.0)
    waits(core, "default/g")
    leave(core, foreign, 2.0)
    assert core.queue.state("default/g") == "unschedulable"
    leave(core, guard, 3.0)
    assert core.queue.state("default/g") == "backoff"
