"""What `gang-scheduler simulate` shows of a set of openb replays: a table beside the
paper's figures, the JSON object scripts read, and the allocation-vs-load plot; and of
time-based replays of learning tasks (part 2, at the end): tables, JSON and a plot of
utilization and queue length over time.

The JSON object is fixed by issue 3 (scripts depend on it):
`{"results": [{"policy", "seed", "allocation_pct": {"100": x, "130": y},
"failed_pods", "seconds"}, ...]}`, one entry per (policy, seed) in run order. Fields may
be added, never changed: issue 14 added `failed_by_size`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.table import Table

from scheduler.sim.cluster_spec import RACK_LABEL
from scheduler.sim.replay import REPORTED_PERCENTS, OpenbResult
from scheduler.sim.sizes import SizeFailures, size_order
from scheduler.sim.steady import utilization_mean_steady, warmup_end
from scheduler.sim.timeline import GANG_BUCKETS, TimelineResult
from scheduler.sim.whole_room import WholeNodeFailures

# The paper's results (mean of 10 seeds, GPU allocation %), from the openb README:
# trace -> policy -> arrived % -> allocation %.
PAPER_FIGURES: Mapping[str, Mapping[str, Mapping[int, float]]] = {
    "default": {
        "random": {100: 86.30, 130: 87.47},
        "dotprod": {100: 90.62, 130: 90.85},
        "clustering": {100: 91.65, 130: 91.88},
        "packing": {100: 91.78, 130: 92.00},
        "bestfit": {100: 92.86, 130: 93.08},
        "fgd": {100: 95.23, 130: 95.39},
    },
    "gpushare40": {
        "bestfit": {130: 91.69},
        "fgd": {130: 94.15},
    },
    "multigpu50": {
        "bestfit": {130: 95.74},
        "packing": {130: 96.18},
        "fgd": {130: 97.18},
    },
    "gpuspec33": {
        "bestfit": {130: 93.09},
        "packing": {130: 93.22},
        "fgd": {130: 94.55},
    },
}


# The right panel of the plot starts here (arrived %), where the policies part.
ZOOM_FROM_PERCENT = 80


@dataclass(frozen=True)
class PolicyRun:
    """One replay: a policy under one seed."""

    policy: str
    seed: int
    result: OpenbResult


def paper_figure(trace: str | None, policy: str, percent: int) -> float | None:
    if trace is None:
        return None
    return PAPER_FIGURES.get(trace, {}).get(policy, {}).get(percent)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return fmean(present) if present else None


def _by_policy(runs: Sequence[PolicyRun]) -> dict[str, list[PolicyRun]]:
    """Runs grouped by policy, policies in the order they first ran."""
    groups: dict[str, list[PolicyRun]] = {}
    for run in runs:
        groups.setdefault(run.policy, []).append(run)
    return groups


# --- JSON -----------------------------------------------------------------------------------
def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def results_json(runs: Sequence[PolicyRun]) -> dict[str, Any]:
    """The object `simulate --json` prints."""
    return {
        "results": [
            {
                "policy": run.policy,
                "seed": run.seed,
                "allocation_pct": {
                    str(percent): _rounded(run.result.allocation_pct.get(percent), 4)
                    for percent in REPORTED_PERCENTS
                },
                "failed_pods": run.result.failed_pods,
                "seconds": round(run.result.seconds, 3),
                # Added by issue 14 (the fields above stay as they were).
                "failed_by_size": {
                    name: {
                        "arrived_before_100": entry.arrived_before,
                        "failed_before_100": entry.failed_before,
                        "arrived_after_100": entry.arrived_after,
                        "failed_after_100": entry.failed_after,
                    }
                    for name, entry in run.result.failures_by_size.items()
                },
                # Added by issue 14's whole-node reserve: the largest whole-GPU pods
                # failed before 100%, and those that failed with room scattered
                # (scheduler.sim.whole_room); null when no pod asks a whole GPU.
                "whole_node_failures": _whole_json(run.result.whole_node_failures),
            }
            for run in runs
        ]
    }


def _whole_json(entry: WholeNodeFailures | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "size": entry.size,
        "failed_before_100": entry.failed_before,
        "failed_before_100_with_room": entry.with_room_before,
    }


# --- table ----------------------------------------------------------------------------------
def describe_seeds(seeds: Sequence[int]) -> str:
    """ "42" or "42..51" for a run of consecutive seeds, else "1, 5, 9"."""
    ordered = sorted(set(seeds))
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}..{ordered[-1]}"
    return ", ".join(str(seed) for seed in ordered)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def results_table(runs: Sequence[PolicyRun], trace: str | None) -> Table:
    """One row per policy (the mean over its seeds when there are several), with the
    paper's figure beside each value the README has one for."""
    groups = _by_policy(runs)
    with_paper = any(
        paper_figure(trace, policy, percent) is not None
        for policy in groups
        for percent in REPORTED_PERCENTS
    )
    several = any(len(group) > 1 for group in groups.values())
    title = f"openb trace {trace!r}" if trace else "openb-format trace"
    table = Table(
        title=f"{title}: GPU allocation % at arrived load"
        + (" (mean over seeds)" if several else ""),
    )
    table.add_column("policy")
    table.add_column("seeds" if several else "seed", justify="right")
    for percent in REPORTED_PERCENTS:
        table.add_column(f"GPU alloc % @{percent}%", justify="right")
        if with_paper:
            table.add_column("paper", justify="right", style="dim")
    table.add_column("failed pods", justify="right")
    table.add_column("seconds", justify="right")
    for policy, group in groups.items():
        cells = [policy, describe_seeds([run.seed for run in group])]
        for percent in REPORTED_PERCENTS:
            cells.append(_cell(_mean(run.result.allocation_pct.get(percent) for run in group)))
            if with_paper:
                cells.append(_cell(paper_figure(trace, policy, percent)))
        failed = fmean(run.result.failed_pods for run in group)
        cells.append(f"{failed:.0f}" if len(group) == 1 else f"{failed:.1f}")
        cells.append(f"{fmean(run.result.seconds for run in group):.1f}")
        table.add_row(*cells)
    if several:
        table.caption = "seconds: mean wall time of one replay"
    return table


def size_failures(runs: Sequence[PolicyRun]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per policy, per size class (ascending), the mean over its seeds of the pods
    failed before and after 100% arrived load."""
    table: dict[str, dict[str, tuple[float, float]]] = {}
    for policy, group in _by_policy(runs).items():
        names = sorted(
            {name for run in group for name in run.result.failures_by_size}, key=size_order
        )
        row: dict[str, tuple[float, float]] = {}
        for name in names:
            entries = [run.result.failures_by_size.get(name, SizeFailures()) for run in group]
            row[name] = (
                fmean(entry.failed_before for entry in entries),
                fmean(entry.failed_after for entry in entries),
            )
        table[policy] = row
    return table


def _arrived(entry: SizeFailures | None) -> int:
    return 0 if entry is None else entry.arrived_before + entry.arrived_after


def _count(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def failures_table(runs: Sequence[PolicyRun]) -> Table:
    """Failed pods per size class, before / after 100% arrived load: what each policy
    drops to reach its allocation (a policy that drops whole-node pods early shows it)."""
    failures = size_failures(runs)
    names = sorted({name for row in failures.values() for name in row}, key=size_order)
    several = any(len(group) > 1 for group in _by_policy(runs).values())
    table = Table(
        title="failed pods by size: before / after 100% arrived load"
        + (" (mean over seeds)" if several else "")
    )
    table.add_column("policy")
    for name in names:
        table.add_column(name, justify="right")
    for policy, row in failures.items():
        cells = [policy]
        for name in names:
            before, after = row.get(name, (0.0, 0.0))
            cells.append(f"{_count(before)} / {_count(after)}")
        table.add_row(*cells)
    # Every policy replays the same arrival orders: the first one's counts stand for all.
    first = next(iter(_by_policy(runs).values()), [])
    arrived = {
        name: fmean(_arrived(run.result.failures_by_size.get(name)) for run in first)
        for name in names
    }
    table.caption = "pods arrived per size: " + ", ".join(
        f"{name} {_count(count)}" for name, count in arrived.items()
    )
    scattered: list[str] = []
    size = ""
    for policy, group in _by_policy(runs).items():
        wholes = [run.result.whole_node_failures for run in group]
        counts = [entry.with_room_before for entry in wholes if entry is not None]
        if counts and len(counts) == len(wholes):
            size = next(entry.size for entry in wholes if entry is not None)
            scattered.append(f"{policy} {_count(fmean(counts))}")
    if scattered:
        table.caption += (
            f"; {size} failed before 100% with room scattered on nodes that could hold "
            "them: " + ", ".join(scattered)
        )
    return table


# --- plot -----------------------------------------------------------------------------------
def mean_curves(runs: Sequence[PolicyRun]) -> dict[str, list[tuple[int, float]]]:
    """Per policy, (arrived %, allocation %) averaged over its seeds at each whole %."""
    curves: dict[str, list[tuple[int, float]]] = {}
    for policy, group in _by_policy(runs).items():
        points: dict[int, list[float]] = {}
        for run in group:
            for percent, value in run.result.readings.curve():
                points.setdefault(percent, []).append(value)
        curves[policy] = [(percent, fmean(values)) for percent, values in sorted(points.items())]
    return curves


class PlotUnavailable(ValueError):
    """Plots need matplotlib, the `plot` extra."""


def _pyplot() -> Any:
    """matplotlib's pyplot drawing to files only; PlotUnavailable, with how to get it,
    where matplotlib is not installed (the image ships without it)."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("plots need matplotlib: pip install 'gang-scheduler[plot]'") from None
    matplotlib.use("Agg")  # no display: write files only
    from matplotlib import pyplot

    return pyplot


def plot_allocation(runs: Sequence[PolicyRun], path: Path, title: str) -> None:
    """GPU allocation % against arrived GPU load %, one line per policy (mean over
    seeds), as the paper's figure draws it; written as an image to `path`."""
    pyplot = _pyplot()

    # Left: the whole replay; middle: the end, where the policies part (a few points);
    # right: the pods each policy failed, by size, before and after 100% arrived.
    figure, (whole, end, sizes) = pyplot.subplots(
        1, 3, figsize=(18, 5), gridspec_kw={"width_ratios": [1, 1, 1]}
    )
    try:
        curves = mean_curves(runs)
        top = max((percent for curve in curves.values() for percent, _ in curve), default=100)
        start = max(0, min(ZOOM_FROM_PERCENT, top - 10))
        for axes, first in ((whole, 0), (end, start)):
            ideal = list(range(first, top + 1))
            axes.plot(
                ideal,
                [min(x, 100) for x in ideal],
                linestyle=":",
                color="grey",
                label="every arrived GPU allocated",
            )
            for policy, curve in curves.items():
                shown = [(x, y) for x, y in curve if x >= first]
                axes.plot([x for x, _ in shown], [y for _, y in shown], label=policy)
            axes.set_xlabel("arrived GPU load (% of cluster GPU)")
            axes.set_ylabel("GPU allocation (%)")
            axes.grid(True, alpha=0.3)
        end.set_title(f"from {start}% arrived")
        whole.legend(loc="lower right")
        _plot_size_failures(sizes, size_failures(runs))
        figure.suptitle(title)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    finally:
        pyplot.close(figure)


def _plot_size_failures(
    axes: Any, failures: Mapping[str, Mapping[str, tuple[float, float]]]
) -> None:
    """Grouped bars: per size class, per policy, failed pods before 100% arrived load
    (solid) with those after stacked on top (hatched)."""
    names = sorted({name for row in failures.values() for name in row}, key=size_order)
    width = 0.8 / max(1, len(failures))
    for number, (policy, row) in enumerate(failures.items()):
        xs = [index + number * width for index in range(len(names))]
        before = [row.get(name, (0.0, 0.0))[0] for name in names]
        after = [row.get(name, (0.0, 0.0))[1] for name in names]
        bars = axes.bar(xs, before, width, label=f"{policy} (before 100%)")
        axes.bar(
            xs,
            after,
            width,
            bottom=before,
            color=bars.patches[0].get_facecolor() if bars.patches else None,
            alpha=0.45,
            hatch="//",
            label=f"{policy} (after)",
        )
    axes.set_xticks([index + 0.4 - width / 2 for index in range(len(names))], names)
    axes.set_xlabel("pod size")
    # Shares fail by the thousand, whole-node pods by the dozen: a log scale shows both.
    axes.set_yscale("symlog", linthresh=1)
    axes.set_ylabel("failed pods (mean over seeds, log scale)")
    axes.set_title("failed pods by size")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize="small")


# --- the time-based replay (part 2) -----------------------------------------------------------
# `simulate --workload/--generate --json` prints
# `{"results": [{"policy", "seed", "utilization_mean", "queueing_delay_s": {"1": {"p50",
# "p95", "p99"}, "2-4": ..., "5-8": ..., "9-16": ..., "17-64": ...}, "jct_s": {"p50", "p95"},
# "largest_gang_wait_s", "mean_link_score", "partial_gangs", "seconds", ...}, ...]}`,
# one entry per (policy, seed) in run order; a figure with no task to measure is null.


@dataclass(frozen=True)
class TimelineRun:
    """One time-based replay: a policy on one workload (`seed`: the generator's seed;
    None for a workload file)."""

    policy: str
    seed: int | None
    result: TimelineResult


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def timeline_entry(run: TimelineRun) -> dict[str, Any]:
    result = run.result
    delays = result.queueing_delay()
    jct = result.completion_times()
    entry: dict[str, Any] = {
        "policy": run.policy,
        "seed": run.seed,
        "utilization_mean": round(result.utilization_mean, 4),
        "queueing_delay_s": {
            label: {
                "p50": _seconds(p.p50 if p else None),
                "p95": _seconds(p.p95 if p else None),
                "p99": _seconds(p.p99 if p else None),
            }
            for label, p in delays.items()
        },
        "jct_s": {
            "p50": _seconds(jct[0] if jct else None),
            "p95": _seconds(jct[1] if jct else None),
        },
        "largest_gang_wait_s": _seconds(result.largest_gang_wait),
        "mean_link_score": _rounded(result.mean_link_score, 2),
        "partial_gangs": result.partial_gangs,
        "seconds": round(result.seconds, 3),
        "utilization_mean_run": round(result.utilization_mean_run, 4),
        "largest_gang_pods": result.largest_gang,
        "tasks_finished": result.finished,
        "tasks_unfinished": result.unfinished,
        # Added by issue 14: the mean without the warm-up, and when the warm-up ended.
        "utilization_mean_steady": round(utilization_mean_steady(result), 4),
        "warmup_end_s": _seconds(warmup_end(result)),
    }
    # Added by issue 30, only for runs that ask it (other runs print as before).
    if result.domain_choice is not None:
        entry["domain_choice"] = result.domain_choice
    if result.required_topology:
        entry["topology"] = topology_entry(result)
    return entry


def topology_entry(result: TimelineResult) -> dict[str, Any]:
    """The required-topology figures of a run (docs/simulator.md, "Required topology")."""
    waits = result.required_waits()
    counts: dict[str, int] = {}
    for outcome in result.outcomes:
        topology = outcome.task.topology
        if topology is not None and topology.required_key is not None:
            counts[topology.required_key] = counts.get(topology.required_key, 0) + 1
    return {
        "stranded_mean": round(result.stranded_mean, 4),
        "required_tasks": dict(sorted(counts.items())),
        "required_wait_s": {
            key: None
            if p is None
            else {"p50": _seconds(p.p50), "p95": _seconds(p.p95), "p99": _seconds(p.p99)}
            for key, p in waits.items()
        },
    }


def timeline_json(runs: Sequence[TimelineRun]) -> dict[str, Any]:
    """The object `simulate --workload/--generate --json` prints."""
    return {"results": [timeline_entry(run) for run in runs]}


def _duration(value: float | None) -> str:
    """Seconds as a short human reading: 45s, 1.6m, 12m, 3.5h, 2.1d."""
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.0f}s"
    if value < 600:
        return f"{value / 60:.1f}m"
    if value < 3600:
        return f"{value / 60:.0f}m"
    if value < 86400:
        return f"{value / 3600:.1f}h"
    return f"{value / 86400:.1f}d"


def _policy_label(run: TimelineRun) -> str:
    choice = run.result.domain_choice
    return run.policy if choice is None else f"{run.policy}, {choice}"


def _run_label(run: TimelineRun) -> str:
    label = _policy_label(run)
    return label if run.seed is None else f"{label} (seed {run.seed})"


def timeline_tables(runs: Sequence[TimelineRun], title: str) -> list[Table]:
    """A summary row per run, then the queueing delay per gang size (p50 / p95 / p99)."""
    summary = Table(title=f"{title}: learning tasks over time")
    for column, justify in (
        ("policy", "left"),
        ("seed", "right"),
        ("GPU util %", "right"),
        ("steady %", "right"),
        ("JCT p50", "right"),
        ("JCT p95", "right"),
        ("largest gang wait", "right"),
        ("mean GPU link score", "right"),
        ("partial gangs", "right"),
        ("finished", "right"),
        ("unfinished", "right"),
        ("seconds", "right"),
    ):
        summary.add_column(column, justify=justify)  # type: ignore[arg-type]
    for run in runs:
        result = run.result
        jct = result.completion_times()
        link = result.mean_link_score
        summary.add_row(
            _policy_label(run),
            "-" if run.seed is None else str(run.seed),
            f"{100 * result.utilization_mean:.1f}",
            f"{100 * utilization_mean_steady(result):.1f}",
            _duration(jct[0] if jct else None),
            _duration(jct[1] if jct else None),
            f"{_duration(result.largest_gang_wait)} ({result.largest_gang} pods)",
            "-" if link is None else f"{link:.0f}",
            str(result.partial_gangs),
            str(result.finished),
            str(result.unfinished),
            f"{result.seconds:.1f}",
        )
    summary.caption = (
        "GPU util: time-weighted mean of allocated/total GPU while tasks arrive; JCT: "
        "arrival to finish; link score: per multi-GPU pod, mean pair score of its GPUs "
        "(NVLink 100 per link, PIX 50, SYS 10)"
    )
    delays = Table(title="queueing delay (arrival to start) by gang size: p50 / p95 / p99")
    delays.add_column("policy")
    for label, _, _ in GANG_BUCKETS:
        delays.add_column(f"{label} pod{'s' if label != '1' else ''}", justify="right")
    for run in runs:
        cells = [_run_label(run)]
        for percentiles in run.result.queueing_delay().values():
            if percentiles is None:
                cells.append("-")
            else:
                cells.append(
                    " / ".join(
                        _duration(v) for v in (percentiles.p50, percentiles.p95, percentiles.p99)
                    )
                )
        delays.add_row(*cells)
    tables = [summary, delays]
    if any(run.result.required_topology for run in runs):
        tables.append(topology_table(runs))
    return tables


def topology_table(runs: Sequence[TimelineRun]) -> Table:
    """Per run: stranded gangs, the waits of gangs per required level, GPU util."""
    keys = sorted(
        {key for run in runs for key in run.result.required_waits()},
        key=lambda k: (k != RACK_LABEL, k),
    )
    table = Table(title="required topology (issue 30)")
    table.add_column("policy")
    table.add_column("seed", justify="right")
    table.add_column("stranded (mean gangs)", justify="right")
    for key in keys:
        table.add_column(f"wait p50 / p95, {key.rpartition('/')[2]}-required", justify="right")
    table.add_column("GPU util %", justify="right")
    for run in runs:
        result = run.result
        waits = result.required_waits()
        cells = [_policy_label(run), "-" if run.seed is None else str(run.seed)]
        cells.append(f"{result.stranded_mean:.3f}")
        for key in keys:
            p = waits.get(key)
            cells.append("-" if p is None else f"{_duration(p.p50)} / {_duration(p.p95)}")
        cells.append(f"{100 * result.utilization_mean:.1f}")
        table.add_row(*cells)
    table.caption = (
        "stranded: time-weighted mean, over the arrival window, of the gangs waiting for one "
        "domain of their required level while the free GPUs of the whole cluster could hold "
        "them but those of no such domain could"
    )
    return table


def arrival_window(result: TimelineResult) -> tuple[float, float]:
    """First and last arrival; the whole run when every task arrives at once."""
    arrivals = [outcome.task.arrival for outcome in result.outcomes]
    first, last = min(arrivals, default=0.0), max(arrivals, default=0.0)
    return (first, last) if last > first else (first, max(result.end_time, first))


def plot_timeline(runs: Sequence[TimelineRun], path: Path, title: str) -> None:
    """GPU utilization % and tasks waiting against time (hours), one line per run: on
    the left while tasks arrive (where the offered load is the workload's), on the right
    the whole run (the drain of the longest tasks included)."""
    pyplot = _pyplot()

    figure, axes = pyplot.subplots(2, 2, figsize=(14, 7), sharey="row")
    try:
        window_end = max((arrival_window(run.result)[1] for run in runs), default=0.0)
        for column, until in ((0, window_end), (1, None)):
            usage, queue = axes[0][column], axes[1][column]
            for run in runs:
                result = run.result
                points = [
                    (moment, milli, waiting)
                    for moment, milli, waiting in zip(
                        result.times, result.allocated_milli, result.queue_length, strict=True
                    )
                    if until is None or moment <= until
                ]
                hours = [moment / 3600 for moment, _, _ in points]
                usage.plot(
                    hours,
                    [100 * milli / result.total_gpu_milli for _, milli, _ in points],
                    drawstyle="steps-post",
                    label=_run_label(run),
                    linewidth=1,
                )
                queue.plot(
                    hours,
                    [waiting for _, _, waiting in points],
                    drawstyle="steps-post",
                    label=_run_label(run),
                    linewidth=1,
                )
            if until is None:
                # A few long tasks can run for days after the rest: on a linear axis
                # they squeeze all the work into the first hours. A log axis (linear
                # below 6 minutes) shows minutes and days alike.
                usage.set_title("whole run (time on a log scale)")
                for each in (usage, queue):
                    each.set_xscale("symlog", linthresh=0.1)
            else:
                usage.set_title("while tasks arrive")
            usage.set_ylim(0, 105)
            queue.set_xlabel("time (hours)")
            for each in (usage, queue):
                each.grid(True, alpha=0.3)
        axes[0][0].set_ylabel("GPU allocated (%)")
        axes[1][0].set_ylabel("tasks waiting")
        axes[0][1].legend(loc="upper right")
        figure.suptitle(title)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    finally:
        pyplot.close(figure)
