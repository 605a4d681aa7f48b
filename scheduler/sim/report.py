"""What `gang-scheduler simulate` shows of a set of openb replays: a table beside the
paper's figures, the JSON object scripts read, and the allocation-vs-load plot.

The JSON object is fixed by issue 3 (scripts depend on it):
`{"results": [{"policy", "seed", "allocation_pct": {"100": x, "130": y},
"failed_pods", "seconds"}, ...]}`, one entry per (policy, seed) in run order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.table import Table

from scheduler.sim.replay import REPORTED_PERCENTS, OpenbResult

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
            }
            for run in runs
        ]
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


def plot_allocation(runs: Sequence[PolicyRun], path: Path, title: str) -> None:
    """GPU allocation % against arrived GPU load %, one line per policy (mean over
    seeds), as the paper's figure draws it; written as an image to `path`."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write files only
    from matplotlib import pyplot

    # Left: the whole replay; right: the end, where the policies part (a few points).
    figure, (whole, end) = pyplot.subplots(1, 2, figsize=(12, 5))
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
        figure.suptitle(title)
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    finally:
        pyplot.close(figure)
