"""The time-based replay carries out the core's preemption decisions: victims
terminate for a grace period, are requeued whole and restart from scratch; the run
they lose is counted."""

from __future__ import annotations

import pytest

from scheduler.sim.cluster_spec import parse_cluster
from scheduler.sim.tenants import build_core, mode_config, mode_named
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
