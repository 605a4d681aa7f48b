"""Tenant replays end to end: the per-team figures add up, quotas hold, and
`gang-scheduler simulate --teams/--quotas` prints them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cli.main import main
from scheduler.sim.cluster_spec import gpu_pools, parse_cluster
from scheduler.sim.teams import generate_teams, parse_teams
from scheduler.sim.tenant_report import (
    arrival_window,
    team_figures,
    tenants_json,
    tenants_markdown,
    window_samples,
)
from scheduler.sim.tenants import mode_named, parse_quotas, run_mode
from scheduler.sim.timeline import time_weighted_mean
from scheduler.sim.workload import parse_workload

# 4 boxes of 4 GPUs: 16 GPUs.
CLUSTER = """
pools:
  - {name: box, count: 4, cpu: 64, memory: 256Gi, gpus: 4, gpu_model: V100, links: pcie}
"""
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
TEAMS = """
hours: 3
teams:
  - {name: alpha, arrivals_per_hour: 6, gpus: {1: 5, 2: 3, 4: 2}, priorities: {0: 1, 100: 1},
     duration_median: 600, duration_mean: 1800}
  - {name: beta, arrivals_per_hour: 2, gpus: {4: 1, 8: 2}, priorities: {0: 1, 100: 1},
     duration_median: 1800, duration_mean: 3600}
"""


def _tasks(seed: int = 3) -> list:  # type: ignore[type-arg]
    nodes = parse_cluster(CLUSTER)
    return generate_teams(parse_teams(TEAMS), seed, 16, pools=gpu_pools(nodes))


@pytest.mark.parametrize("mode", ["no-quotas", "no-borrowing", "borrowing"])
def test_per_team_figures_add_up_to_the_cluster(mode: str) -> None:
    tasks = _tasks()
    quotas = parse_quotas(QUOTAS)
    run = run_mode(parse_cluster(CLUSTER), tasks, quotas, mode_named(mode))
    result = run.result
    assert (result.partial_gangs, result.unfinished) == (0, 0)
    # At every sample the teams' GPUs are the cluster's allocated GPUs.
    for held, total in zip(result.allocated_by_namespace, result.allocated_milli, strict=True):
        assert sum(held.values()) == total
        assert all(milli > 0 for milli in held.values())
    if mode == "no-borrowing":  # max = min: no team ever above its 8 GPUs
        assert all(
            milli <= 8000 for held in result.allocated_by_namespace for milli in held.values()
        )
    figures = team_figures(run, quotas)
    teams = {team.team: team for team in figures.teams}
    assert set(teams) == {"alpha", "beta"}
    assert sum(team.tasks for team in figures.teams) == len(tasks)
    assert all(team.entitlement == 0.5 for team in figures.teams)
    # The teams' mean shares over the arrival window sum to the cluster's utilization.
    first, last = arrival_window(result)
    utilization = time_weighted_mean(*window_samples(result.times, result.utilization, first, last))
    assert sum(team.share_mean for team in figures.teams) == pytest.approx(utilization)
    assert utilization == pytest.approx(result.utilization_mean)
    assert sum(team.lost_gpu_hours for team in figures.teams) == pytest.approx(
        result.lost_gpu_hours
    )
    assert sum(team.preempted for team in figures.teams) <= result.evicted_gangs
    for team in figures.teams:
        assert 0.0 <= team.share_mean <= 1.0
        assert team.under_entitlement is not None and 0.0 <= team.under_entitlement <= 1.0
        waits = [w for w in team.wait_by_priority.values() if w is not None]
        assert all(0.0 <= p50 <= p95 for p50, p95 in waits)
        assert team.largest_gang_wait is not None and team.largest_gang_wait >= 0.0
        assert (
            team.largest_gang_gpus
            == max(t.gpu_milli for t in tasks if t.namespace == team.team) / 1000
        )
    entry = tenants_json([figures])["modes"][0]
    assert entry["mode"] == mode and set(entry["teams"]) == {"alpha", "beta"}
    json.dumps(entry)  # plain JSON


def test_a_team_preempted_by_another_carries_the_lost_gpu_hours() -> None:
    # Alpha runs one gang within its min (8 GPUs) and one borrowed beyond it; beta's
    # higher-priority gang evicts the borrowed one (the later started: less GPU-time
    # lost), which leaves alpha its guarantee.
    workload = """
- {name: own, namespace: alpha, arrival: 0, duration: 7200, priority: 0,
   roles: [{name: w, replicas: 2, cpu: 8, memory: 32Gi, gpus: 4}]}
- {name: extra, namespace: alpha, arrival: 1, duration: 7200, priority: 0,
   roles: [{name: w, replicas: 2, cpu: 8, memory: 32Gi, gpus: 4}]}
- {name: urgent, namespace: beta, arrival: 600, duration: 600, priority: 100,
   roles: [{name: w, replicas: 2, cpu: 8, memory: 32Gi, gpus: 4}]}
"""
    quotas = parse_quotas(QUOTAS)
    run = run_mode(
        parse_cluster(CLUSTER), parse_workload(workload), quotas, mode_named("borrowing")
    )
    assert run.result.preemption_log == [(600.0, "beta/urgent", ("alpha/extra",))]
    figures = {t.team: t for t in team_figures(run, quotas).teams}
    # alpha's 8 borrowed GPUs ran from 1 s to 600 s + the 30 s grace: lost.
    assert figures["alpha"].lost_gpu_hours == pytest.approx(8 * 629 / 3600)
    assert (figures["alpha"].preempted, figures["beta"].preempted) == (1, 0)
    assert figures["beta"].wait_by_priority == {100: (30.0, 30.0)}
    assert figures["beta"].largest_gang_wait == 30.0
    table = tenants_markdown([team_figures(run, quotas)])
    # Over the arrival window (0 to 600 s) alpha held the whole cluster, but for 1 s.
    assert "| borrowing | alpha | 100% (50%) | 0% |" in table.replace(" *", "")


def test_the_team_generator_replays_the_same_figures_for_a_seed() -> None:
    quotas = parse_quotas(QUOTAS)
    nodes = parse_cluster(CLUSTER)
    first = team_figures(run_mode(nodes, _tasks(5), quotas, mode_named("borrowing")), quotas)
    again = team_figures(run_mode(nodes, _tasks(5), quotas, mode_named("borrowing")), quotas)
    assert first.teams == again.teams


def _files(tmp_path: Path) -> list[str]:
    (tmp_path / "c.yaml").write_text(CLUSTER)
    (tmp_path / "t.yaml").write_text(TEAMS)
    (tmp_path / "q.yaml").write_text(QUOTAS)
    return [
        "--cluster",
        str(tmp_path / "c.yaml"),
        "--teams",
        str(tmp_path / "t.yaml"),
        "--quotas",
        str(tmp_path / "q.yaml"),
    ]


def test_simulate_teams_with_quotas_prints_json_and_a_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "teams.png"
    args = [*_files(tmp_path), "--mode", "no-quotas", "--mode", "borrowing"]
    code = main(["simulate", *args, "--json", "--plot", str(plot)])
    out = capsys.readouterr().out
    assert code == 0
    modes = json.loads(out)["modes"]
    assert [(m["mode"], m["policy"], m["seed"]) for m in modes] == [
        ("no-quotas", "binpack", 42),
        ("borrowing", "binpack", 42),
    ]
    assert modes[1]["teams"]["alpha"]["entitlement"] == 0.5
    assert plot.stat().st_size > 10_000
    code = main(["simulate", *args])
    out = capsys.readouterr().out
    assert code == 0 and "under entitlement" in out and "beta" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mode", "fair"], "unknown mode 'fair'; known: no-quotas, no-borrowing"),
        (["--load", "0.5"], "--load is for --generate"),
        (["--generate", "5"], "give one of --workload, --generate and --teams, not both"),
        (["--preemption-grace", "-1"], "--preemption-grace must be a number of seconds >= 0"),
    ],
)
def test_simulate_tenant_usage_errors(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", *_files(tmp_path), *extra])
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert captured.err.count("\n") == 1 and message in captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--generate", "5", "--mode", "reclaim"], "--mode needs --quotas"),
        (["--quotas", "default"], "--quotas is for the time-based replay"),
        (["--teams", "missing.yaml"], "cannot read the team file missing.yaml"),
    ],
)
def test_simulate_tenant_options_out_of_place(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", *args])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err


def test_simulate_refuses_a_bad_quotas_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _files(tmp_path)
    (tmp_path / "q.yaml").write_text(QUOTAS.replace("nvidia.com/gpu: 16", "nvidia.com/gpu: x"))
    code = main(["simulate", *args])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1
    assert "q.yaml: ElasticQuota alpha/alpha: spec.max:" in captured.err


def test_under_entitlement_counts_a_waiting_task_the_guarantee_has_room_for() -> None:
    workload = """
- {name: b1, namespace: beta, arrival: 0, duration: 1000,
   roles: [{name: w, replicas: 2, cpu: 8, memory: 32Gi, gpus: 4}]}
- {name: b2, namespace: beta, arrival: 0, duration: 1000,
   roles: [{name: w, replicas: 2, cpu: 8, memory: 32Gi, gpus: 4}]}
- {name: a1, namespace: alpha, arrival: 100, duration: 100,
   roles: [{name: w, replicas: 1, cpu: 8, memory: 32Gi, gpus: 4}]}
- {name: a2, namespace: alpha, arrival: 1000, duration: 100,
   roles: [{name: w, replicas: 1, cpu: 8, memory: 32Gi, gpus: 1}]}
"""
    quotas = parse_quotas(QUOTAS)
    nodes, tasks = parse_cluster(CLUSTER), parse_workload(workload)

    def under(mode: str) -> dict[str, float | None]:
        figures = team_figures(run_mode(nodes, tasks, quotas, mode_named(mode)), quotas)
        return {team.team: team.under_entitlement for team in figures.teams}

    # Beta borrows alpha's idle 8 GPUs; alpha's 4-GPU task then waits 100 s to 1000 s
    # with its guarantee unused (no reclaim, equal priorities): 90% of the window.
    assert under("borrowing") == {"beta": 0.0, "alpha": pytest.approx(0.9)}
    # Capped at its min, beta's second task waits, but beyond beta's guarantee: not
    # counted; alpha runs at once.
    assert under("no-borrowing") == {"beta": 0.0, "alpha": 0.0}
