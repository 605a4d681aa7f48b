"""The quotas file, the sharing modes and the multi-team generator of the simulator."""

from __future__ import annotations

from importlib import resources

import pytest

from cache.quota import GPU
from scheduler.sim.cluster_spec import default_cluster, gpu_pools
from scheduler.sim.teams import Teams, TeamsError, generate_teams, parse_teams
from scheduler.sim.tenants import (
    MODES,
    QuotaFileError,
    build_core,
    mode_config,
    mode_named,
    mode_quotas,
    parse_quotas,
)

QUOTA = """
- apiVersion: scheduling.x-k8s.io/v1alpha1
  kind: ElasticQuota
  metadata: {name: team-a, namespace: team-a}
  spec:
    min: {nvidia.com/gpu: 8, cpu: "64"}
    max: {nvidia.com/gpu: 16}
"""


def _bundled(name: str) -> str:
    return resources.files("scheduler.sim").joinpath("data", name).read_text("utf-8")


def test_a_quotas_file_reads_as_the_scheduler_reads_it() -> None:
    (quota,) = parse_quotas(QUOTA, "q.yaml")
    assert (quota.namespace, quota.name) == ("team-a", "team-a")
    assert (quota.min_gpu_milli, quota.max_gpu_milli) == (8000, 16000)
    # A `kind: List` (what kubectl get -o yaml prints) is read too.
    listed = parse_quotas("kind: List\nitems:\n" + QUOTA.replace("\n", "\n  "), "q.yaml")
    assert listed[0].obj == quota.obj


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- [", "q.yaml: not valid YAML at line 1"),
        ("{}", "q.yaml: expected a non-empty list of ElasticQuota objects"),
        ("[]", "q.yaml: expected a non-empty list of ElasticQuota objects"),
        ("- 3", "q.yaml: item #1: expected an ElasticQuota object, got 3"),
        (
            QUOTA.replace("v1alpha1", "v1"),
            "q.yaml: item #1: expected apiVersion scheduling.x-k8s.io/v1alpha1 and kind "
            "ElasticQuota, got 'scheduling.x-k8s.io/v1' and 'ElasticQuota'",
        ),
        (QUOTA.replace("namespace: team-a", "x: y"), "item #1: field 'metadata.namespace' is"),
        (
            QUOTA.replace("min:", "minimum:"),
            "q.yaml: ElasticQuota team-a/team-a: unknown field 'spec.minimum'; known: min, max",
        ),
        (
            QUOTA.replace("{nvidia.com/gpu: 16}", "16"),
            "ElasticQuota team-a/team-a: field 'spec.max' must be a resource list",
        ),
        (
            QUOTA.replace("nvidia.com/gpu: 16", "nvidia.com/gpu: lots"),
            "q.yaml: ElasticQuota team-a/team-a: spec.max:",
        ),
        (
            QUOTA.replace("nvidia.com/gpu: 16", "nvidia.com/gpu: 4"),
            "ElasticQuota team-a/team-a: spec.min nvidia.com/gpu is above spec.max",
        ),
        (
            QUOTA.replace('cpu: "64"', "pods: 10"),
            "ElasticQuota team-a/team-a: spec.min: 'pods' not enforced "
            "(only GPU, cpu, memory and DRA devices per DeviceClass)",
        ),
        (
            QUOTA + QUOTA.replace("name: team-a,", "name: other,"),
            "ElasticQuota team-a/other: namespace 'team-a' already has ElasticQuota 'team-a'",
        ),
        (QUOTA + "  spex: 1\n", "q.yaml: ElasticQuota team-a/team-a: unknown field 'spex'"),
    ],
)
def test_a_bad_quotas_file_is_refused_with_the_quota_and_field(text: str, message: str) -> None:
    with pytest.raises(QuotaFileError) as error:
        parse_quotas(text, "q.yaml")
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_bundled_quotas_guarantee_the_cluster_in_thirds() -> None:
    quotas = parse_quotas(_bundled("quotas-3.yaml"))
    assert [q.min_gpu_milli for q in quotas] == [96_000] * 3


def test_modes_apply_the_quotas_as_they_say() -> None:
    quotas = parse_quotas(QUOTA)
    assert mode_quotas(mode_named("no-quotas"), quotas) == []
    (capped,) = mode_quotas(mode_named("no-borrowing"), quotas)
    assert capped["spec"]["max"] == {"nvidia.com/gpu": 8, "cpu": "64"}
    assert quotas[0].obj["spec"]["max"] == {"nvidia.com/gpu": 16}  # the file is untouched
    (written,) = mode_quotas(mode_named("borrowing"), quotas)
    assert written == quotas[0].obj
    config, _ = mode_config(mode_named("borrowing"), "binpack")
    core = build_core(config, [written])
    governing = core.cache.quotas.governing("team-a")
    assert governing is not None and governing.max[GPU] == 16_000
    assert core.preempter.enabled


def test_a_mode_whose_setting_this_build_lacks_runs_without_it_and_says_so() -> None:
    for mode in MODES:
        config, unsupported = mode_config(mode, "spread")
        assert config.policy.name == "spread"
        for path in unsupported:
            # Only settings turned on are reported: an unknown "off" changes nothing.
            assert path in ("preemption.reclaim", "starvation", "starvation.guardSeconds")
    assert mode_config(mode_named("no-quotas"), "binpack")[1] == ()
    with pytest.raises(ValueError, match="unknown mode 'fair'; known: no-quotas"):
        mode_named("fair")


TEAMS = """
hours: 4
teams:
  - {name: small, arrivals_per_hour: 20, gpus: {1: 9, 2: 1}, priorities: {0: 1},
     duration_median: 100, duration_mean: 400}
  - {name: big, arrivals_per_hour: 2, gpus: {32: 1, 64: 1}, priorities: {0: 1, 100: 3},
     duration_median: 3600, duration_mean: 3600}
"""


def _generate(teams: Teams, seed: int) -> list[object]:
    nodes = default_cluster()
    return list(generate_teams(teams, seed, 288, pools=gpu_pools(nodes)))


def test_the_team_generator_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    teams = parse_teams(TEAMS)
    first, again, other = _generate(teams, 7), _generate(teams, 7), _generate(teams, 8)
    assert first == again
    assert first != other
    # A team's tasks do not depend on the other teams.
    alone = parse_teams(TEAMS.split("  - {name: big")[0])
    assert [t for t in first if t.namespace == "small"] == _generate(alone, 7)  # type: ignore[attr-defined]


def test_the_team_generator_draws_each_team_from_its_own_mix() -> None:
    tasks = generate_teams(parse_teams(TEAMS), 1, 288, pools=gpu_pools(default_cluster()))
    big = [t for t in tasks if t.namespace == "big"]
    small = [t for t in tasks if t.namespace == "small"]
    assert big and small
    assert {t.gpu_milli for t in big} <= {32_000, 64_000}
    assert {t.priority for t in small} == {0}
    assert all(t.duration == 3600 for t in big)  # median = mean: no spread
    assert all(t.name.startswith(f"{t.namespace}-") for t in tasks)
    assert all(0 <= t.arrival < 4 * 3600 for t in tasks)
    assert [t.arrival for t in tasks] == sorted(t.arrival for t in tasks)
    # A Poisson stream of 20 an hour over 4 hours: about 80.
    assert 50 < len(small) < 110


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("hours: 4", "hours: 0"), "t.yaml: field 'hours' must be a number > 0, got 0"),
        (("name: small", "name: Small"), "t.yaml: team #1: field 'name' must be a namespace"),
        (("{1: 9, 2: 1}", "{1: -9}"), "team 'small': field 'gpus': the weight of 1 must be >= 0"),
        (("{1: 9, 2: 1}", "{0: 1}"), "team 'small': field 'gpus': 0 must be a whole number"),
        (("{1: 9, 2: 1}", "{1: 0}"), "team 'small': field 'gpus': at least one weight"),
        (("priorities: {0: 1},", "priority: 1,"), "team 'small': unknown field 'priority'"),
        (("duration_mean: 400", "duration_mean: 50"), "'duration_mean' (50) must be at least"),
        (("arrivals_per_hour: 20", "arrivals_per_hour: 1000000"), "at most 100,000 per team"),
        (("name: big", "name: small"), "t.yaml: team 'small' is repeated"),
    ],
)
def test_a_bad_team_file_is_refused_naming_the_team_and_field(
    change: tuple[str, str], message: str
) -> None:
    with pytest.raises(TeamsError) as error:
        parse_teams(TEAMS.replace(*change), "t.yaml")
    assert message in str(error.value)


def test_the_bundled_teams_have_big_gangs() -> None:
    teams = parse_teams(_bundled("teams-3.yaml"))
    assert [team.name for team in teams.teams] == ["research", "production", "foundation"]
    sizes = {size for team in teams.teams for size, _ in team.gpus}
    assert {32, 64} <= sizes
