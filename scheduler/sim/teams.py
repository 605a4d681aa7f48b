"""Multi-team workloads for the time-based replay: a team file, and a seeded generator.

A team is a namespace whose tasks arrive as a Poisson process over the arrival window,
each task drawn from the team's own mix of GPUs per task (big 32- and 64-GPU gangs
included), priorities and durations. The file (YAML; docs/simulator.md, "Tenants"):

    hours: 12                       # the arrival window, for every team
    teams:
      - name: research              # the namespace (its ElasticQuota governs it)
        arrivals_per_hour: 24       # Poisson arrival rate
        gpus: {1: 60, 2: 12, 4: 12, 8: 10, 16: 3.5, 32: 1.5, 64: 1}   # weights
        priorities: {0: 41.7, 100: 57.0, 1000: 1.3}                      # weights
        duration_median: 206        # seconds; log-normal with this median and mean
        duration_mean: 6652

How a task of a team is drawn (the single-team generator's rules, scheduler/sim/
workload.py, applied to the team's own GPU mix): how its GPUs split over pods,
parameter-server pods, shares of one GPU for 1-GPU tasks (the openb trace's shares)
and pinning to GPU models. Each team draws from its own stream, `random.Random` seeded
with "<seed>/<team name>", so the same seed gives the same tasks, and adding a team
changes no other team's tasks.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.process.yamltext import YamlSyntaxError, load_yaml
from scheduler.sim.workload import (
    GPU_TYPE_SHARE,
    MAX_PODS_PER_TASK,
    MAX_SECONDS,
    GpuPool,
    Task,
    _draw_roles,
    _pin_models,
    refuse_unknown,
)

_TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")
_TOP_FIELDS = ("hours", "teams")
_TEAM_FIELDS = (
    "name",
    "arrivals_per_hour",
    "gpus",
    "priorities",
    "duration_median",
    "duration_mean",
)
# Tasks of one team in one replay at most: a typo in a rate must not run for hours.
MAX_TASKS_PER_TEAM = 100_000


class TeamsError(ValueError):
    """A team file that cannot be used: the message names the file, the team and the
    field."""


@dataclass(frozen=True, slots=True)
class Team:
    name: str
    arrivals_per_hour: float
    gpus: tuple[tuple[int, float], ...]  # GPUs per task -> weight
    priorities: tuple[tuple[int, float], ...]  # priority -> weight
    duration_median: float
    duration_mean: float

    @property
    def duration_sigma(self) -> float:
        """The log-normal sigma whose mean / median ratio is the team's."""
        return math.sqrt(2.0 * math.log(self.duration_mean / self.duration_median))


@dataclass(frozen=True, slots=True)
class Teams:
    hours: float
    teams: tuple[Team, ...]


def load_teams(path: Path) -> Teams:
    """Teams from a file; OSError when it cannot be read, TeamsError when its content
    is not a team file."""
    return parse_teams(path.read_text(encoding="utf-8"), str(path))


def parse_teams(text: str, source: str = "<teams>") -> Teams:
    try:
        data = load_yaml(text)
    except YamlSyntaxError as error:
        raise TeamsError(f"{source}: {error}") from None
    if not isinstance(data, dict):
        raise TeamsError(f"{source}: expected a mapping with fields {', '.join(_TOP_FIELDS)}")
    refuse_unknown(data, _TOP_FIELDS, source, TeamsError)
    hours = _positive(data, "hours", source)
    raw_teams = data.get("teams")
    if not isinstance(raw_teams, list) or not raw_teams:
        raise TeamsError(f"{source}: field 'teams' must be a non-empty list of teams")
    teams: list[Team] = []
    for position, raw in enumerate(raw_teams, start=1):
        team = _parse_team(raw, f"{source}: team #{position}")
        if any(other.name == team.name for other in teams):
            raise TeamsError(f"{source}: team {team.name!r} is repeated")
        expected = team.arrivals_per_hour * hours
        if expected > MAX_TASKS_PER_TEAM:
            raise TeamsError(
                f"{source}: team {team.name!r}: {team.arrivals_per_hour:g} arrivals per hour "
                f"over {hours:g} hours is about {expected:,.0f} tasks; at most "
                f"{MAX_TASKS_PER_TEAM:,} per team"
            )
        teams.append(team)
    return Teams(hours, tuple(teams))


def _parse_team(raw: object, where: str) -> Team:
    if not isinstance(raw, dict):
        raise TeamsError(f"{where}: expected a mapping with fields {', '.join(_TEAM_FIELDS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _TEAM_NAME.match(name):
        raise TeamsError(
            f"{where}: field 'name' must be a namespace name (1-52 lower-case letters, "
            f"digits or '-'), got {name!r}"
        )
    where = f"{where.rsplit(': ', 1)[0]}: team {name!r}"
    refuse_unknown(raw, _TEAM_FIELDS, where, TeamsError)
    rate = _positive(raw, "arrivals_per_hour", where)
    gpus = _weights(raw, "gpus", where, minimum=1, maximum=MAX_PODS_PER_TASK * 8)
    priorities = _weights(raw, "priorities", where, minimum=-(2**31), maximum=2**31 - 1)
    median = _positive(raw, "duration_median", where)
    mean = _positive(raw, "duration_mean", where)
    if mean < median:
        raise TeamsError(
            f"{where}: field 'duration_mean' ({mean:g}) must be at least 'duration_median' "
            f"({median:g}): a log-normal's mean is never below its median"
        )
    return Team(name, rate, gpus, priorities, median, mean)


def _positive(raw: Mapping[object, object], field: str, where: str) -> float:
    value = raw.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TeamsError(f"{where}: field {field!r} must be a number > 0, got {value!r}")
    if value <= 0:
        raise TeamsError(f"{where}: field {field!r} must be a number > 0, got {value!r}")
    return float(value)


def _weights(
    raw: Mapping[object, object], field: str, where: str, *, minimum: int, maximum: int
) -> tuple[tuple[int, float], ...]:
    table = raw.get(field)
    if not isinstance(table, dict) or not table:
        raise TeamsError(
            f"{where}: field {field!r} must map whole numbers to weights, e.g. {{1: 60, 8: 40}}"
        )
    out: list[tuple[int, float]] = []
    for key, weight in table.items():
        if isinstance(key, bool) or not isinstance(key, int) or not minimum <= key <= maximum:
            raise TeamsError(
                f"{where}: field {field!r}: {key!r} must be a whole number in "
                f"[{minimum}, {maximum}]"
            )
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise TeamsError(f"{where}: field {field!r}: the weight of {key} must be >= 0")
        out.append((key, float(weight)))
    if not any(weight > 0 for _, weight in out):
        raise TeamsError(f"{where}: field {field!r}: at least one weight must be > 0")
    return tuple(sorted(out))


# --- the generator -------------------------------------------------------------------------
def generate_teams(
    teams: Teams,
    seed: int,
    cluster_gpus: int,
    *,
    pools: Sequence[GpuPool] = (),
    gpu_type_share: float = GPU_TYPE_SHARE,
) -> list[Task]:
    """Every team's tasks, in arrival order (ties: team order). Task names are
    `<team>-<n>`; each task's namespace is its team."""
    if cluster_gpus < 1:
        raise ValueError(f"the cluster has no GPU ({cluster_gpus})")
    per_node = max((pool.per_node for pool in pools), default=8)
    window = teams.hours * 3600.0
    tasks: list[Task] = []
    for team in teams.teams:
        rng = random.Random(f"{seed}/{team.name}")
        rate = team.arrivals_per_hour / 3600.0
        moment = rng.expovariate(rate)
        drawn: list[Task] = []
        while moment < window:
            roles = _draw_roles(rng, cluster_gpus, per_node, MAX_PODS_PER_TASK, team.gpus)
            roles = _pin_models(rng, roles, pools, gpu_type_share)
            seconds = team.duration_median * math.exp(rng.gauss(0.0, team.duration_sigma))
            duration = float(min(MAX_SECONDS, max(1, round(seconds))))
            priority = rng.choices(
                [p for p, _ in team.priorities], weights=[w for _, w in team.priorities]
            )[0]
            name = f"{team.name}-{len(drawn):04d}"
            drawn.append(
                Task(name, round(moment, 3), duration, roles, priority, namespace=team.name)
            )
            moment += rng.expovariate(rate)
        tasks.extend(drawn)
    order = {team.name: i for i, team in enumerate(teams.teams)}
    tasks.sort(key=lambda task: (task.arrival, order[task.namespace]))
    return tasks
