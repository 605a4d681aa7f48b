"""The fast victim search (scheduler/victim_fit.py) decides as the straightforward one.

The straightforward search plans the preemptor on a fresh what-if copy of the snapshot
for every victim set `choose_victims` asks about (scheduler.preemption.WhatIf and a new
planner each time); the core's search keeps one copy and one planner between searches,
skips sets the resource bound refuses, and answers large sets with a witness. On random
small clusters, through arrivals, carried-out and refused decisions and cluster changes,
both must pick the same victims and the same placements.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cache.cluster import EventType
from policies.preemption import Candidate, choose_victims
from policies.profile import build_profile
from scheduler import victim_fit
from scheduler.core import SchedulingCore
from scheduler.gang import Gang
from scheduler.planner import Plan, Planner
from scheduler.preemption import WhatIf
from scheduler.quotas import within_quota
from tests.factories import node_obj, pod_obj

Decision = tuple[frozenset[str], frozenset[tuple[str, str, tuple[tuple[int, int], ...]]]]


def straightforward(core: SchedulingCore, gang: Gang, now: float) -> Decision | None:
    """The search as first written: every set planned on a fresh what-if copy."""
    victims = core.preempter.candidates(gang, now)
    if not victims:
        return None
    what_if = WhatIf(core.cache, core.snapshot)
    planner = Planner(core.profile, explain=False)

    def plan_without(keys: Iterable[str]) -> Plan | None:
        view = what_if.without(p for k in keys for p in victims[k].pods)
        result = planner.plan(gang, view)
        if not isinstance(result, Plan):
            return None
        admitted = within_quota(gang, result, core.cache.quotas, core.cache.pod)
        return admitted if isinstance(admitted, Plan) else None

    pool = [
        Candidate(
            key,
            victim.priority,
            sum(p.gpu.total_milli for p in victim.pods),
            max(0.0, now - min(p.created for p in victim.pods)),
        )
        for key, victim in victims.items()
    ]
    chosen = choose_victims(pool, lambda keys: plan_without(keys) is not None)
    if chosen is None:
        return None
    plan = plan_without(chosen.keys)
    if plan is None:
        return None
    return chosen.keys, frozenset((p.pod_uid, p.node, p.shares) for p in plan.placements)


def gang_pods(
    name: str, namespace: str, size: int, gpus: int, priority: int
) -> list[dict[str, Any]]:
    return [
        pod_obj(
            f"{name}-{i}",
            namespace=namespace,
            gang=name,
            min_member=size,
            gpus=gpus,
            cpu="4" if gpus else "16",
            priority=priority,
        )
        for i in range(size)
    ]


def quota(max_gpus: int, min_gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "team", "uid": "q", "resourceVersion": "1"},
        "spec": {
            "min": {"nvidia.com/gpu": str(min_gpus)},
            "max": {"nvidia.com/gpu": str(max_gpus)},
        },
    }


def place_all(core: SchedulingCore, now: float) -> None:
    while (attempt := core.schedule_next(now)) is not None:
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)
        elif attempt.preemption is not None:
            core.preempter.refuse(attempt.gang.key, None, "test", now)
    core.refresh(now)


shape = st.tuples(
    st.integers(1, 4),  # members
    st.sampled_from([0, 1, 2, 4, 8]),  # GPUs each (0: cpu only)
    st.integers(0, 6),  # priority
    st.sampled_from(["default", "team"]),
)


@settings(max_examples=80, deadline=None)
@given(
    nodes=st.lists(st.sampled_from([4, 8]), min_size=1, max_size=5),
    running=st.lists(shape, min_size=1, max_size=10),
    arrivals=st.lists(
        st.tuples(
            shape, st.sampled_from(["carry out", "refuse"]), st.sampled_from(["", "add", "remove"])
        ),
        min_size=1,
        max_size=4,
    ),
    limits=st.none() | st.tuples(st.integers(4, 40), st.integers(0, 16)),
    witness_above=st.sampled_from([0, 3, victim_fit.WITNESS_NODES]),
)
def test_the_fast_search_decides_as_the_straightforward_one(
    nodes: list[int],
    running: list[tuple[int, int, int, str]],
    arrivals: list[tuple[tuple[int, int, int, str], str, str]],
    limits: tuple[int, int] | None,
    witness_above: int,
) -> None:
    core = SchedulingCore(build_profile())
    core.preempter.enabled = True
    now = 1.0
    for i, gpus in enumerate(nodes):
        core.apply_node(EventType.ADDED, node_obj(f"n{i}", gpus=gpus, cpu="32"), now)
    if limits is not None:
        core.apply_elasticquota(EventType.ADDED, quota(*limits), now)
    for i, (size, gpus, priority, namespace) in enumerate(running):
        pods = gang_pods(f"r{i}", namespace, size, gpus, priority)
        for pod in pods:
            core.apply_pod(EventType.ADDED, pod, now)
        place_all(core, now)
        if f"{namespace}/r{i}" in core.queue:  # did not fit: not part of the cluster
            for pod in pods:
                core.apply_pod(EventType.DELETED, pod, now)
            core.refresh(now)
    with mock.patch.object(victim_fit, "WITNESS_NODES", witness_above):
        for j, ((size, gpus, priority, namespace), outcome, change) in enumerate(arrivals):
            now += 10.0
            pods = gang_pods(f"a{j}", namespace, size, gpus, 4 + priority)
            for pod in pods:
                core.apply_pod(EventType.ADDED, pod, now)
            core.refresh(now)
            core.cache.update_snapshot(core.snapshot)
            key = f"{namespace}/a{j}"
            expected = straightforward(core, core.gangs[key], now)
            attempt = core.schedule_next(now)
            assert attempt is not None and attempt.gang.key == key
            if isinstance(attempt.result, Plan):
                for placement in attempt.result.placements:
                    core.bound(placement)
                continue
            decision = attempt.preemption
            got = None
            if decision is not None:
                got = (
                    frozenset(v.key for v in decision.victims),
                    frozenset((p.pod_uid, p.node, p.shares) for p in decision.placements),
                )
            assert got == expected
            event("a decision" if got is not None else "no decision")
            if decision is not None and outcome == "carry out":
                for victim in decision.victims:
                    for pod in victim.pods:
                        core.apply_pod(
                            EventType.DELETED,
                            {
                                "metadata": {
                                    "uid": pod.uid,
                                    "name": pod.name,
                                    "namespace": pod.namespace,
                                }
                            },
                            now,
                        )
                place_all(core, now + 1.0)
            else:
                if decision is not None:
                    core.preempter.refuse(key, None, "test", now)
                for pod in pods:
                    core.apply_pod(EventType.DELETED, pod, now)
                core.refresh(now)
            # The kept copy catches up with nodes that come and go (their pods stay).
            if change == "add":
                core.apply_node(EventType.ADDED, node_obj(f"m{j}", gpus=4, cpu="32"), now)
            elif change == "remove":
                core.apply_node(EventType.DELETED, node_obj(f"n{j % len(nodes)}", gpus=4), now)
