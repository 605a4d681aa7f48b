"""Per-team figures of tenant replays: a table, JSON and one plot (docs/simulator.md,
"Tenants").

Per team (a namespace) and mode:
- GPU share: the GPU milli the team holds / the cluster's, time-weighted over the
  arrival window (first to last arrival, where the offered load is the workload's),
  against its entitlement, the GPU `min` of its ElasticQuota / the cluster's GPUs;
- time under entitlement: the part of the window in which the team had a task
  waiting that would have fit within its entitlement on top of what it held (a
  guarantee not honoured when it was asked for);
- queueing delay p50/p95 per priority (all time in the queue, requeues after
  preemption included), over the tasks that started;
- GPU-hours lost to preemption: GPUs held x time ran, of runs cut short;
- the largest gang's wait: among the team's tasks with the most GPUs, the longest time
  in the queue (to the end of the replay for one that never started).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from cache.resources import MILLI_PER_GPU
from scheduler.sim.report import _duration, _pyplot
from scheduler.sim.tenants import ModeRun, Quota
from scheduler.sim.timeline import TaskOutcome, TimelineResult, percentile, time_weighted_mean


@dataclass(frozen=True, slots=True)
class TeamFigures:
    team: str
    tasks: int
    unfinished: int
    entitlement: float | None  # share of the cluster's GPUs its quota's min guarantees
    entitled_milli: int | None
    share_mean: float
    under_entitlement: float | None  # part of the window, None without an entitlement
    # priority -> (p50, p95) of the queueing delay; None when no task of it started
    wait_by_priority: Mapping[int, tuple[float, float] | None]
    lost_gpu_hours: float
    preempted: int  # times a gang of the team was evicted
    largest_gang_gpus: float
    largest_gang_wait: float | None


@dataclass(frozen=True, slots=True)
class ModeFigures:
    run: ModeRun
    teams: tuple[TeamFigures, ...]

    @property
    def result(self) -> TimelineResult:
        return self.run.result


def arrival_window(result: TimelineResult) -> tuple[float, float]:
    arrivals = [outcome.task.arrival for outcome in result.outcomes]
    if not arrivals or max(arrivals) <= min(arrivals):
        return (result.times[0], result.end_time) if result.times else (0.0, 0.0)
    return min(arrivals), max(arrivals)


def window_samples(
    times: Sequence[float], values: Sequence[float], first: float, last: float
) -> tuple[list[float], list[float]]:
    """The step function's samples from `first` to `last`, the value in force at
    `first` included and held until `last`."""
    kept_times: list[float] = []
    kept: list[float] = []
    before: float | None = None
    for moment, value in zip(times, values, strict=True):
        if moment < first:
            before = value
            continue
        if moment > last:
            break
        if not kept_times and moment > first and before is not None:
            kept_times.append(first)
            kept.append(before)
        kept_times.append(moment)
        kept.append(value)
    if kept_times and kept_times[-1] < last:
        kept_times.append(last)
        kept.append(kept[-1])
    return kept_times, kept


def team_figures(run: ModeRun, quotas: Sequence[Quota]) -> ModeFigures:
    result = run.result
    total = result.total_gpu_milli
    minimum = {q.namespace: q.min_gpu_milli for q in quotas if q.min_gpu_milli is not None}
    names = list(dict.fromkeys(o.task.namespace for o in result.outcomes))
    first, last = arrival_window(result)
    teams = []
    for team in names:
        outcomes = [o for o in result.outcomes if o.task.namespace == team]
        held = [sample.get(team, 0) / total for sample in result.allocated_by_namespace]
        times, shares = window_samples(result.times, held, first, last)
        entitled = minimum.get(team)
        under: float | None = None
        if entitled is not None:
            deprived = [
                1.0 if _deprived(waiting.get(team), holding.get(team, 0), entitled) else 0.0
                for waiting, holding in zip(
                    result.smallest_waiting_by_namespace, result.allocated_by_namespace, strict=True
                )
            ]
            under = time_weighted_mean(*window_samples(result.times, deprived, first, last))
        largest = max(o.task.gpu_milli for o in outcomes)
        waits = [_time_queued(o, result.end_time) for o in outcomes if o.task.gpu_milli == largest]
        teams.append(
            TeamFigures(
                team=team,
                tasks=len(outcomes),
                unfinished=sum(1 for o in outcomes if o.finish is None),
                entitlement=None if entitled is None else entitled / total,
                entitled_milli=entitled,
                share_mean=time_weighted_mean(times, shares),
                under_entitlement=under,
                wait_by_priority=_waits(outcomes),
                lost_gpu_hours=sum(o.lost_gpu_hours for o in outcomes),
                preempted=sum(o.preemptions for o in outcomes),
                largest_gang_gpus=largest / MILLI_PER_GPU,
                largest_gang_wait=max(waits) if waits else None,
            )
        )
    return ModeFigures(run, tuple(teams))


def _deprived(smallest_waiting: int | None, held: int, entitled: int) -> bool:
    """A task of the team waits that its guarantee has room for."""
    return smallest_waiting is not None and held + smallest_waiting <= entitled


def _time_queued(outcome: TaskOutcome, end: float) -> float:
    """All the task's time in the queue; one still waiting has waited until `end`."""
    pending = end - outcome.queued_since if outcome.queued_since is not None else 0.0
    return outcome.waited + pending


def _waits(outcomes: Sequence[TaskOutcome]) -> dict[int, tuple[float, float] | None]:
    by_priority: dict[int, list[float]] = {}
    for outcome in outcomes:
        values = by_priority.setdefault(outcome.task.priority, [])
        if outcome.queueing_delay is not None:
            values.append(outcome.queueing_delay)
    return {
        priority: (percentile(values, 50), percentile(values, 95)) if values else None
        for priority, values in sorted(by_priority.items())
    }


# --- JSON --------------------------------------------------------------------------------
def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def tenants_json(modes: Sequence[ModeFigures]) -> dict[str, Any]:
    out = []
    for figures in modes:
        run, result = figures.run, figures.result
        out.append(
            {
                "mode": run.mode.name,
                "title": run.mode.title,
                "policy": run.policy,
                "seed": run.seed,
                "settings": run.mode.settings,
                "unsupported_settings": list(run.unsupported),
                "utilization_mean": round(result.utilization_mean, 4),
                "preemptions": result.preemptions,
                "evicted_gangs": result.evicted_gangs,
                "lost_gpu_hours": round(result.lost_gpu_hours, 2),
                "partial_gangs": result.partial_gangs,
                "tasks_unfinished": result.unfinished,
                "seconds": round(result.seconds, 2),
                "teams": {
                    team.team: {
                        "tasks": team.tasks,
                        "unfinished": team.unfinished,
                        "entitlement": _r(team.entitlement, 4),
                        "share_mean": round(team.share_mean, 4),
                        "under_entitlement": _r(team.under_entitlement, 4),
                        "wait_s_by_priority": {
                            str(priority): None if w is None else {"p50": _r(w[0]), "p95": _r(w[1])}
                            for priority, w in team.wait_by_priority.items()
                        },
                        "lost_gpu_hours": round(team.lost_gpu_hours, 2),
                        "preempted": team.preempted,
                        "largest_gang_gpus": team.largest_gang_gpus,
                        "largest_gang_wait_s": _r(team.largest_gang_wait),
                    }
                    for team in figures.teams
                },
            }
        )
    return {"modes": out}


# --- the table ---------------------------------------------------------------------------
COLUMNS = (
    "mode",
    "team",
    "GPU share (entitled)",
    "under entitlement",
    "wait p50 / p95 by priority",
    "GPU-h lost",
    "largest gang's wait",
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _rows(modes: Sequence[ModeFigures]) -> list[list[str]]:
    rows = []
    for figures in modes:
        run = figures.run
        label = run.mode.name + (" *" if run.unsupported else "")
        for position, team in enumerate(figures.teams):
            waits = ", ".join(
                f"{priority}: " + ("-" if w is None else f"{_duration(w[0])} / {_duration(w[1])}")
                for priority, w in team.wait_by_priority.items()
            )
            rows.append(
                [
                    label if position == 0 else "",
                    team.team,
                    f"{_pct(team.share_mean)} ({_pct(team.entitlement)})",
                    _pct(team.under_entitlement),
                    waits,
                    f"{team.lost_gpu_hours:.0f}",
                    f"{_duration(team.largest_gang_wait)} ({team.largest_gang_gpus:g} GPU)",
                ]
            )
    return rows


def _footnote(modes: Sequence[ModeFigures]) -> str | None:
    missing = sorted({path for f in modes for path in f.run.unsupported})
    if not missing:
        return None
    return (
        f"* ran without {', '.join(missing)}: this build does not know the setting, so "
        "the row shows it off; rerun after merging the branch that adds it"
    )


def tenants_table(modes: Sequence[ModeFigures], title: str) -> Table:
    table = Table(title=title, caption=_footnote(modes))
    for column in COLUMNS:
        table.add_column(column)
    for row in _rows(modes):
        table.add_row(*row)
    return table


def tenants_markdown(modes: Sequence[ModeFigures]) -> str:
    """The table as Markdown (for docs/benchmarks.md), with each mode's cluster-wide
    figures in a second table."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(modes)]
    lines += [
        "",
        "| mode | GPU util % | preemptions (gangs evicted) | GPU-h lost | partial gangs "
        "| unfinished | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for figures in modes:
        result = figures.result
        lines.append(
            f"| {figures.run.mode.name} | {100 * result.utilization_mean:.1f} | "
            f"{result.preemptions} ({result.evicted_gangs}) | {result.lost_gpu_hours:.0f} | "
            f"{result.partial_gangs} | {result.unfinished} | {result.seconds:.1f} |"
        )
    note = _footnote(modes)
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


# --- the plot ----------------------------------------------------------------------------
def plot_tenants(modes: Sequence[ModeFigures], path: Path, title: str) -> None:
    """One panel per mode: each team's GPU share (%) over the arrival window, a dashed
    line at its entitlement."""
    pyplot = _pyplot()
    figure, axes = pyplot.subplots(
        len(modes), 1, figsize=(12, 2.6 * len(modes) + 0.8), sharex=True, squeeze=False
    )
    try:
        colours = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
        for row, figures in enumerate(modes):
            axis = axes[row][0]
            result = figures.result
            first, last = arrival_window(result)
            for index, team in enumerate(figures.teams):
                colour = colours[index % len(colours)]
                held = [
                    s.get(team.team, 0) / result.total_gpu_milli
                    for s in result.allocated_by_namespace
                ]
                times, shares = window_samples(result.times, held, first, last)
                axis.plot(
                    [t / 3600 for t in times],
                    [100 * s for s in shares],
                    drawstyle="steps-post",
                    color=colour,
                    linewidth=1,
                    label=team.team,
                )
                if team.entitlement is not None:
                    axis.axhline(100 * team.entitlement, color=colour, linestyle="--", linewidth=1)
            star = " (* ran without: " + ", ".join(figures.run.unsupported) + ")"
            axis.set_title(figures.run.mode.title + (star if figures.run.unsupported else ""))
            axis.set_ylabel("GPU share (%)")
            axis.set_ylim(0, 100)
            axis.grid(True, alpha=0.3)
        axes[0][0].legend(loc="upper right")
        axes[-1][0].set_xlabel("time (hours; dashed: entitlement, the quota's min)")
        figure.suptitle(title)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        pyplot.close(figure)
