"""The time-based replay carries out the core's preemption decisions: victims
terminate for a grace period, are requeued whole and restart from scratch; the run
they lose is counted."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.sim.cluster_spec import parse_cluster
from scheduler.sim.tenants import build_core, mode_config, mode_named, mode_quotas, parse_quotas
from scheduler.sim.timeline import TimelineResult, _Replay, replay_timeline
from scheduler.sim.workload import parse_workload

# One box of 8 GPUs: whoever runs there holds all of it.
BOX = """
pools:
  - {name: box, count: 1, cpu: 64, memory: 256Gi, gpus: 8, gpu_model: A100, links: nvlink}
"""


def _task(name: str, arrival: float, duration: float, priority: int, pods: int = 2) -> str:
    gpus = 8 // pods
    return (
        f"  - {{name: {name}, arrival: {arrival}, duration: {duration}, priority: {priority},"
        f" roles: [{{name: worker, replicas: {pods}, cpu: 8, memory: 32Gi, gpus: {gpus}}}]}}\n"
    )


def _core():  # type: ignore[no-untyped-def]
    config, unsupported = mode_config(mode_named("no-quotas"), "binpack")
    assert unsupported == ()
    return build_core(config, [])


def _run(workload: str, grace: float = 30.0) -> TimelineResult:
    return replay_timeline(
        parse_cluster(BOX), parse_workload(workload), _core(), preemption_grace=grace
    )


def test_a_higher_priority_gang_evicts_the_running_one_which_restarts_from_scratch() -> None:
    result = _run(_task("low", 0, 1000, 0) + _task("high", 100, 50, 100))
    low, high = result.outcomes
    assert (result.preemptions, result.evicted_gangs) == (1, 1)
    # Evicted at 100, gone after the 30 s grace: the preemptor starts then.
    assert (high.start, high.finish, high.queueing_delay) == (130.0, 180.0, 30.0)
    # The victim is queued again at 130 and runs its whole duration after the preemptor.
    assert (low.preemptions, low.start, low.finish) == (1, 180.0, 1180.0)
    assert low.queueing_delay == pytest.approx(50.0)  # 0 before its first run, 50 after
    # Its first run (8 GPUs for 130 s, grace included) is lost.
    assert low.lost_gpu_hours == pytest.approx(8 * 130 / 3600)
    assert result.lost_gpu_hours == pytest.approx(8 * 130 / 3600)
    assert (result.partial_gangs, result.finished, result.unfinished) == (0, 2, 0)


def test_a_victim_that_ends_within_the_grace_loses_nothing() -> None:
    result = _run(_task("low", 0, 110, 0) + _task("high", 100, 50, 100))
    low, high = result.outcomes
    assert (low.preemptions, low.finish, low.lost_gpu_hours) == (0, 110.0, 0.0)
    assert high.start == 110.0  # the room is its own as soon as the victim left


def test_victims_terminate_whole_then_are_gone_and_requeued_with_new_pods() -> None:
    tasks = parse_workload(_task("low", 0, 1000, 0, pods=4) + _task("high", 100, 50, 100))
    replay = _Replay(parse_cluster(BOX), tasks, _core(), preemption_grace=30.0)
    replay.arrive(0.0)
    replay.schedule(0.0)
    cache = replay.core.cache
    first_run = list(replay.active["sim/low"].uids)
    assert all(cache.pod(uid).node_name == "box-00" for uid in first_run)  # type: ignore[union-attr]
    replay.arrive(100.0)
    replay.schedule(100.0)
    # Every member of the victim is terminating, still holding its room.
    pods = [cache.pod(uid) for uid in first_run]
    assert all(p is not None and p.deleting and p.consumes_resources for p in pods)
    assert replay.outcomes[1].start is None  # the preemptor waits for the room
    replay._check_devices(100.0)  # the room held for it overlaps the victims': allowed
    replay.terminate(129.0)
    assert all(cache.pod(uid) is not None for uid in first_run)  # the grace is not over
    replay.terminate(130.0)
    assert all(cache.pod(uid) is None for uid in first_run)
    again = replay.active["sim/low"]
    assert again.run == 1 and not set(again.uids) & set(first_run)
    assert all(cache.pod(uid) is not None and not cache.pod(uid).node_name for uid in again.uids)  # type: ignore[union-attr]
    replay.schedule(130.0)
    assert replay.outcomes[1].start == 130.0
    replay._check_devices(130.0)
    replay._check_gangs()
    assert replay.partial == set()
    assert replay.outcomes[0].lost_gpu_milli_seconds == 8000 * 130


def test_no_preemption_among_equal_priorities() -> None:
    result = _run(_task("first", 0, 100, 0) + _task("second", 10, 50, 0))
    assert result.preemptions == 0
    assert result.outcomes[1].start == 100.0


QUOTAS = """
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: ElasticQuota
  metadata: {name: alpha, namespace: alpha}
  spec: {min: {nvidia.com/gpu: 8}, max: {nvidia.com/gpu: 16}}
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: ElasticQuota
  metadata: {name: beta, namespace: beta}
  spec: {min: {nvidia.com/gpu: 8}, max: {nvidia.com/gpu: 16}}
"""
# 4 boxes of 4 GPUs.
BOXES = """
pools:
  - {name: box, count: 4, cpu: 64, memory: 256Gi, gpus: 4, gpu_model: V100, links: pcie}
"""

# Tasks crowded into the first 300 s on 16 GPUs, so that about a third of the
# examples preempt.
_task_shape = st.tuples(
    st.sampled_from(["alpha", "beta"]),
    st.integers(0, 300),  # arrival
    st.integers(100, 900),  # duration
    st.sampled_from([0, 50, 100]),  # priority
    st.sampled_from([(1, 2), (2, 2), (1, 4), (2, 4), (3, 4), (4, 4)]),  # pods, GPUs each
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_task_shape, min_size=4, max_size=10), st.sampled_from([0.0, 30.0]))
def test_replayed_preemption_keeps_gangs_whole_and_never_cycles(
    shapes: list[tuple[str, int, int, int, tuple[int, int]]], grace: float
) -> None:
    lines = []
    for i, (team, arrival, duration, priority, (pods, gpus)) in enumerate(shapes):
        lines.append(
            f"- {{name: t{i}, namespace: {team}, arrival: {arrival}, duration: {duration}, "
            f"priority: {priority}, roles: [{{name: w, replicas: {pods}, cpu: 4, "
            f"memory: 8Gi, gpus: {gpus}}}]}}"
        )
    tasks = parse_workload("\n".join(lines))
    mode = mode_named("borrowing")
    config, _ = mode_config(mode, "binpack")
    core = build_core(config, mode_quotas(mode, parse_quotas(QUOTAS)))
    # The replay checks over-commitment and whole gangs after every change itself.
    result = replay_timeline(parse_cluster(BOXES), tasks, core, preemption_grace=grace)
    assert (result.partial_gangs, result.unfinished) == (0, 0)
    priority = {f"{t.namespace}/{t.name}": t.priority for t in tasks}
    pairs = set()
    for _, preemptor, victims in result.preemption_log:
        for victim in victims:
            assert priority[victim] < priority[preemptor]  # reclaim off: priority only
            pairs.add((preemptor, victim))
    assert not any((victim, preemptor) in pairs for preemptor, victim in pairs)
    # A victim whose run ends within the grace finishes: evicted, no run lost.
    restarted = sum(o.preemptions for o in result.outcomes)
    assert restarted <= result.evicted_gangs == sum(len(v) for _, _, v in result.preemption_log)
    for outcome in result.outcomes:
        assert outcome.lost_gpu_milli_seconds >= 0.0
        assert (outcome.lost_gpu_milli_seconds > 0) <= (outcome.preemptions > 0)
