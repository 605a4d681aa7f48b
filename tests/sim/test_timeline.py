"""The time-based replay of learning tasks through the scheduling core, its report and
`gang-scheduler simulate --workload/--generate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from cache.cluster import Placement
from policies.profile import build_profile
from policies.scores.fragmentation import OnlineWorkload
from scheduler.cli.main import main
from scheduler.sim.cluster_spec import Pool, default_cluster, gpu_pools, nodes_of, parse_cluster
from scheduler.sim.openb import cluster_size
from scheduler.sim.report import TimelineRun, timeline_entry, timeline_json, timeline_tables
from scheduler.sim.timeline import (
    TimelineError,
    TimelineResult,
    _Replay,
    percentile,
    replay_timeline,
    time_weighted_mean,
    timeline_profile,
)
from scheduler.sim.workload import Role, Task, generate_workload, parse_workload

# 4 PCIe boxes of 4 GPUs: 16 GPUs.
SMALL = """
pools:
  - {name: box, count: 4, cpu: 64, memory: 256Gi, gpus: 4, gpu_model: V100, links: pcie}
"""


def _three_quarters(name: str, arrival: float, duration: float) -> str:
    return (
        f"  - {{name: {name}, arrival: {arrival}, duration: {duration}, roles: "
        "[{name: worker, replicas: 3, cpu: 8, memory: 32Gi, gpus: 4}]}\n"
    )


def _replay(cluster: str, workload: str, policy: str = "binpack") -> TimelineResult:
    profile = timeline_profile(policy)
    return replay_timeline(parse_cluster(cluster), parse_workload(workload), profile)


def test_two_tasks_of_three_quarters_run_one_after_the_other() -> None:
    result = _replay(SMALL, _three_quarters("first", 0, 100) + _three_quarters("second", 0, 50))
    first, second = result.outcomes
    assert (first.start, first.finish) == (0.0, 100.0)
    # The second waits whole (holding nothing) until the first leaves.
    assert second.queueing_delay == first.task.duration
    assert (second.start, second.finish) == (100.0, 150.0)
    assert (second.completion_time, result.end_time) == (150.0, 150.0)
    assert (result.finished, result.unfinished, result.partial_gangs) == (2, 0, 0)
    assert result.times == [0.0, 100.0, 150.0]
    assert result.utilization == [0.75, 0.75, 0.0]
    assert result.queue_length == [1, 0, 0]
    assert result.utilization_mean == pytest.approx(0.75)
    delays = result.queueing_delay()
    assert delays["2-4"] is not None
    assert (delays["2-4"].p50, delays["2-4"].p99) == (50.0, 99.0)
    assert delays["1"] is None
    assert result.largest_gang_wait == 100.0


def test_a_later_arrival_waits_for_the_rest_of_the_first_run() -> None:
    result = _replay(SMALL, _three_quarters("first", 0, 100) + _three_quarters("second", 30, 50))
    assert [o.queueing_delay for o in result.outcomes] == [0.0, 70.0]
    assert result.completion_times() == (110.0, 119.0)  # p50, p95 of 100 s and 120 s
    # Over the arrival window [0, 30] three quarters of the GPUs were allocated.
    assert result.utilization_mean == pytest.approx(0.75)


def test_an_elastic_task_starts_with_min_member_and_grows() -> None:
    workload = (
        _three_quarters("first", 0, 100)
        + "  - {name: elastic, arrival: 10, duration: 40, min_member: 1, roles: "
        "[{name: worker, replicas: 3, cpu: 8, memory: 32Gi, gpus: 4}]}\n"
    )
    result = _replay(SMALL, workload)
    _, elastic = result.outcomes
    # One box is free: one member runs from t=10 while two wait; the task leaves at 50
    # with them (their pods are deleted with the task).
    assert (elastic.start, elastic.finish) == (10.0, 50.0)
    assert result.partial_gangs == 0
    assert result.times == [0.0, 10.0, 50.0, 100.0]
    assert result.utilization == [0.75, 1.0, 0.75, 0.0]


def test_a_task_that_can_never_fit_is_left_unfinished_and_the_replay_ends() -> None:
    workload = (
        _three_quarters("first", 0, 100) + "  - {name: pinned, arrival: 0, duration: 10, roles: "
        "[{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpus: 1, gpu_type: H100}]}\n"
        + "  - {name: huge, arrival: 5, duration: 10, roles: "
        "[{name: w, replicas: 5, cpu: 1, memory: 1Gi, gpus: 4}]}\n"
    )
    result = _replay(SMALL, workload)
    assert [o.finish for o in result.outcomes] == [100.0, None, None]
    assert (result.finished, result.unfinished) == (1, 2)
    assert result.largest_gang_wait == result.end_time - 5.0
    assert result.end_time < 1000  # tried once after the last task left, then stopped


def test_multi_gpu_placements_score_their_links() -> None:
    nvlink = (
        "pools: [{name: dgx, count: 1, cpu: 64, memory: 256Gi, gpus: 8, gpu_model: A100, "
        "links: nvlink}]"
    )
    two_gpus = (
        "- {name: pair, arrival: 0, duration: 5, roles: "
        "[{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpus: 2}]}"
    )
    assert _replay(nvlink, two_gpus).mean_link_score == 1200.0  # NV12
    # On a PCIe box the topology-aware device choice takes a PIX pair, not SYS.
    result = _replay(SMALL, two_gpus)
    assert (result.mean_link_score, result.multi_gpu_placements) == (50.0, 1)
    one_gpu = two_gpus.replace("gpus: 2", "gpus: 1")
    assert _replay(SMALL, one_gpu).mean_link_score is None


def test_the_over_commit_check_raises() -> None:
    replay = _Replay(parse_cluster(SMALL), [], build_profile("binpack"))
    replay._check_devices(0.0)  # a fresh cluster is fine
    node = next(iter(replay.core.cache.nodes()))
    node.gpu_free[1] = -200
    with pytest.raises(TimelineError, match="GPU 1 of node box-00 is over-committed"):
        replay._check_devices(7.0)


def test_the_partial_gang_check_counts_a_half_bound_gang() -> None:
    tasks = parse_workload(_three_quarters("first", 0, 100))
    replay = _Replay(parse_cluster(SMALL), tasks, build_profile("binpack"))
    replay.arrive(0.0)
    replay._check_gangs()
    assert replay.partial == set()
    # Bind one of the three members behind the planner's back.
    replay.core.cache.assume([Placement("sim-first-worker-0", "box-00", ((0, 1000),))], 0.0)
    replay._check_gangs()
    assert replay.partial == {"sim/first"}


def _pool(index: int, draw: Any) -> Pool:
    gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
    return Pool(
        name=f"p{index}",
        count=draw(st.integers(1, 3)),
        cpu_milli=draw(st.sampled_from([8000, 16000, 64000])),
        memory_bytes=64 * 2**30,
        gpus=gpus,
        gpu_model=draw(st.sampled_from(["A100", "V100"])) if gpus else "",
        links=draw(st.sampled_from(["nvlink", "pcie", "none"])) if gpus else "none",
        racks=draw(st.integers(0, 2)),
    )


@st.composite
def scenarios(draw: Any) -> tuple[list[Pool], list[Task]]:
    pools = [_pool(i, draw) for i in range(draw(st.integers(1, 3)))]
    if not any(pool.gpus for pool in pools):
        pools.append(Pool("gpu", 1, 16000, 64 * 2**30, gpus=4, gpu_model="A100", links="pcie"))
    tasks = []
    for i in range(draw(st.integers(1, 8))):
        roles = []
        for j in range(draw(st.integers(1, 2))):
            kind = draw(st.sampled_from(["cpu", "whole", "share"]))
            roles.append(
                Role(
                    f"r{j}",
                    draw(st.integers(1, 4)),
                    draw(st.sampled_from([500, 2000, 8000])),
                    draw(st.sampled_from([2**30, 16 * 2**30])),
                    gpus=draw(st.integers(1, 4)) if kind == "whole" else 0,
                    gpu_milli=draw(st.integers(1, 999)) if kind == "share" else 0,
                    gpu_types=draw(st.sampled_from([(), ("A100",), ("V100", "A100")]))
                    if kind != "cpu"
                    else (),
                )
            )
        pods = sum(role.replicas for role in roles)
        tasks.append(
            Task(
                f"t{i}",
                float(draw(st.integers(0, 50))),
                float(draw(st.integers(1, 60))),
                tuple(roles),
                priority=draw(st.integers(0, 2)),
                min_member=draw(st.none() | st.integers(1, pods)),
            )
        )
    return pools, tasks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["binpack", "spread", "fgd", "fgd-complete-reserve"]))
def test_the_replay_never_binds_a_partial_gang_nor_over_commits(
    scenario: tuple[list[Pool], list[Task]], policy: str
) -> None:
    pools, tasks = scenario
    profile = timeline_profile(policy)
    # The replay raises TimelineError on any over-committed device, CPU or memory.
    result = replay_timeline(nodes_of(pools), tasks, profile)
    assert result.partial_gangs == 0
    assert result.finished + result.unfinished == len(tasks)
    assert all(0 <= milli <= result.total_gpu_milli for milli in result.allocated_milli)
    for outcome in result.outcomes:
        if outcome.start is None:
            assert outcome.finish is None
            continue
        assert outcome.start >= outcome.task.arrival
        assert outcome.finish == outcome.start + outcome.task.duration
    # At every sample, the GPUs held are those of the tasks running then: all of a whole
    # gang's, at most all of an elastic one's (min_member below its size).
    for moment, milli in zip(result.times, result.allocated_milli, strict=True):
        running = [
            o.task
            for o in result.outcomes
            if o.start is not None and o.start <= moment and (o.finish is None or o.finish > moment)
        ]
        whole = sum(task.gpu_milli for task in running if task.gang_min == task.pods)
        assert whole <= milli <= sum(task.gpu_milli for task in running)
    # fgd learns its workload from every pod that arrived (the core feeds it).
    if isinstance(profile.workload, OnlineWorkload):
        assert profile.workload.observed == sum(task.pods for task in tasks)


def test_same_seed_same_result() -> None:
    nodes = default_cluster()
    gpus = cluster_size(nodes).total_gpu_milli // 1000
    tasks = generate_workload(11, 120, gpus, 0.9, pools=gpu_pools(nodes))
    runs = []
    for _ in range(2):
        profile = timeline_profile("binpack")
        result = replay_timeline(nodes, tasks, profile)
        entry = timeline_entry(TimelineRun("binpack", 11, result))
        del entry["seconds"]
        runs.append((entry, [(o.start, o.finish) for o in result.outcomes], result.times))
    assert runs[0] == runs[1]
    assert runs[0][0]["partial_gangs"] == 0


def test_helpers() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    assert time_weighted_mean([0.0, 10.0, 30.0], [1.0, 0.5, 0.0]) == pytest.approx(20 / 30)
    assert time_weighted_mean([4.0, 4.0], [0.2, 0.4]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="unknown policy 'bestfit'"):
        timeline_profile("bestfit")


def test_the_report_object_and_tables() -> None:
    result = _replay(SMALL, _three_quarters("first", 0, 100) + _three_quarters("second", 0, 50))
    (entry,) = timeline_json([TimelineRun("spread", None, result)])["results"]
    assert entry["policy"] == "spread" and entry["seed"] is None
    assert entry["utilization_mean"] == 0.75
    assert list(entry["queueing_delay_s"]) == ["1", "2-4", "5-8", "9-16", "17-64"]
    assert entry["queueing_delay_s"]["2-4"] == {"p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert entry["queueing_delay_s"]["1"] == {"p50": None, "p95": None, "p99": None}
    assert entry["jct_s"] == {"p50": 125.0, "p95": 147.5}
    assert entry["largest_gang_wait_s"] == 100.0
    assert entry["mean_link_score"] is not None
    assert (entry["partial_gangs"], entry["tasks_finished"]) == (0, 2)
    console = Console(record=True, width=200)
    for table in timeline_tables([TimelineRun("spread", None, result)], "two tasks"):
        console.print(table)
    text = console.export_text()
    assert "two tasks: learning tasks over time" in text
    assert "50s / 1.6m / 1.6m" in text  # the 2-4 pods bucket: 50 s, 95 s, 99 s


# --- the command -------------------------------------------------------------------------------
def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_simulate_generate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--generate", "50", "--json"], capsys)
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["policy"], r["seed"]) for r in results] == [("binpack", 42), ("spread", 42)]
    for entry in results:
        assert set(entry) >= {
            "policy",
            "seed",
            "utilization_mean",
            "queueing_delay_s",
            "jct_s",
            "largest_gang_wait_s",
            "mean_link_score",
            "partial_gangs",
            "seconds",
        }
        assert entry["partial_gangs"] == 0
        assert entry["tasks_finished"] + entry["tasks_unfinished"] == 50
        assert 0 < entry["utilization_mean"] <= 1
        assert set(entry["queueing_delay_s"]["1"]) == {"p50", "p95", "p99"}
        assert set(entry["jct_s"]) == {"p50", "p95"}


def test_simulate_a_workload_file_on_a_cluster_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(SMALL)
    workload = tmp_path / "workload.yaml"
    workload.write_text(
        "tasks:\n" + _three_quarters("first", 0, 100) + _three_quarters("second", 0, 50)
    )
    plot = tmp_path / "timeline.png"
    args = ["--workload", str(workload), "--cluster", str(cluster), "--policy", "fgd"]
    code, out, _ = run([*args, "--plot", str(plot)], capsys)
    assert code == 0
    assert "learning tasks over time" in out and "fgd" in out
    assert plot.stat().st_size > 10_000
    code, out, _ = run([*args, "--json"], capsys)
    (entry,) = json.loads(out)["results"]
    assert (entry["policy"], entry["seed"], entry["tasks_finished"]) == ("fgd", None, 2)
    assert entry["queueing_delay_s"]["2-4"]["p99"] == 99.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--generate", "5", "--workload", "w.yaml"], "give --workload or --generate, not both"),
        (["--cluster", "c.yaml"], "--cluster is for the time-based replay"),
        (["--generate", "5", "--trace", "default"], "--trace is for the openb replay"),
        (["--generate", "5", "--nodes", "n.csv"], "--nodes is for the openb replay"),
        (["--generate", "0"], "--generate needs a number of tasks >= 1"),
        (["--generate", "5", "--load", "-1"], "--load must be a number > 0"),
        (["--generate", "5", "--policy", "bestfit"], "unknown policy 'bestfit' for the time"),
        (["--workload", "/nonexistent/w.yaml"], "cannot read /nonexistent/w.yaml"),
        (["--generate", "5", "--cluster", "/nonexistent.yaml"], "cannot read /nonexistent.yaml"),
        (["--generate", "5", "--plot", "/nonexistent/p.png"], "no such directory"),
    ],
)
def test_simulate_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(args, capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert message in err


def test_simulate_reports_a_bad_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text("- {name: job, arrival: 0, roles: []}")
    code, _, err = run(["--workload", str(workload)], capsys)
    assert (code, err.count("\n")) == (2, 1)
    assert "task 'job': field 'duration' is missing" in err
    cluster = tmp_path / "c.yaml"
    cluster.write_text("pools: [{name: a, count: 1, cpu: 1, memory: 1Gi}]")
    code, _, err = run(["--generate", "3", "--cluster", str(cluster)], capsys)
    assert (code, err.strip()) == (2, "gang-scheduler simulate: error: the cluster has no GPU")


def test_simulate_notes_a_sample_too_small_for_the_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["--generate", "3", "--policy", "binpack", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["results"][0]["tasks_finished"] == 3
    assert "note: 3 tasks (seed 42) offer only" in err
    assert "not 0.9: too few for this cluster" in err
