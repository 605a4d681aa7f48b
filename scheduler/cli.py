"""The `gang-scheduler` command."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cache.pod import pod_from_api
from scheduler.demo import run_demo
from scheduler.sim import profiles as openb_policies
from scheduler.sim.openb import (
    DEFAULT_LOAD,
    NODE_FILE,
    TRACES,
    OpenbFormatError,
    OpenbPod,
    arrival_order,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.replay import replay_openb
from scheduler.sim.report import PolicyRun, plot_allocation, results_json, results_table

DEFAULT_SEED = 42


def _demo(args: argparse.Namespace) -> int:
    report = run_demo()
    console = Console(width=max(Console().width, 120))
    placed = Table(title="Placed learning tasks (all members bound, or none)")
    for column in ("gang", "pod", "node", "GPU devices (index:milli)", "worst GPU link"):
        placed.add_column(column)
    for row in report.placed:
        placed.add_row(row.gang, row.pod, row.node, row.devices, row.links)
    console.print(placed)
    waiting = Table(title="Waiting (holding no resources)")
    waiting.add_column("gang")
    waiting.add_column("why", overflow="fold")
    for key, message in report.waiting:
        waiting.add_row(key, message)
    console.print(waiting)
    return 0


class _UsageError(Exception):
    """A mistake in what the user asked for: one line on stderr, exit code 2."""


def _read_bundled(filename: str) -> str:
    return resources.files("scheduler.sim").joinpath("data", "openb", filename).read_text("utf-8")


def _load_trace(args: argparse.Namespace) -> tuple[list[dict[str, object]], list[OpenbPod]]:
    if args.trace not in TRACES:
        raise _UsageError(f"unknown trace {args.trace!r}; known: {', '.join(TRACES)}")
    try:
        nodes = load_nodes(Path(args.nodes) if args.nodes else _read_bundled(NODE_FILE))
        pods = load_pods(Path(args.pods) if args.pods else _read_bundled(TRACES[args.trace]))
    except OSError as error:
        raise _UsageError(
            f"cannot read {error.filename or 'the trace'}: {error.strerror}"
        ) from None
    except (OpenbFormatError, UnicodeDecodeError) as error:
        raise _UsageError(str(error)) from None
    if not nodes:
        raise _UsageError("the node list has no nodes")
    return nodes, pods


def _simulate(args: argparse.Namespace) -> int:
    try:
        return _run_simulation(args)
    except _UsageError as error:
        print(f"gang-scheduler simulate: error: {error}", file=sys.stderr)
        return 2


def _run_simulation(args: argparse.Namespace) -> int:
    if not (args.load > 0 and math.isfinite(args.load)):
        raise _UsageError(f"--load must be a number > 0, got {args.load}")
    if args.plot and not Path(args.plot).parent.is_dir():
        # Found out now, not after minutes of replays.
        raise _UsageError(f"cannot write the plot {args.plot}: no such directory")
    nodes, pods = _load_trace(args)
    size = cluster_size(nodes)
    if not size.total_gpu_milli:
        raise _UsageError("the node list has no GPU")
    # Module attributes, read at call time, so that tests can put stand-ins there.
    catalogue = openb_policies
    policies: list[str] = list(
        dict.fromkeys(args.policy or ["bestfit", "fgd", catalogue.BEST_POLICY])
    )
    unknown = [name for name in policies if name not in catalogue.OPENB_POLICIES]
    if unknown:
        raise _UsageError(
            f"unknown policy {unknown[0]!r}; known: {', '.join(catalogue.OPENB_POLICIES)}"
        )
    seeds: list[int] = list(dict.fromkeys(args.seed or [DEFAULT_SEED]))
    # FGD's target workload: the trace's original pods, as the paper takes it.
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    orders = {seed: arrival_order(pods, size.total_gpu_milli, seed, args.load) for seed in seeds}
    trace = None if args.pods else args.trace

    runs: list[PolicyRun] = []
    console = Console(stderr=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    total = len(policies) * sum(len(order) for order in orders.values())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("simulating", total=total)
        done_before = 0
        for policy in policies:
            for seed in seeds:
                profile = catalogue.openb_profile(
                    policy,
                    seed=seed,
                    max_cpu_milli=size.max_cpu_milli,
                    max_gpu_milli=size.max_gpu_milli,
                    history=history,
                )
                progress.update(task, description=f"{policy} seed {seed}")
                base = done_before

                def advance(done: int, _count: int, base: int = base) -> None:
                    progress.update(task, completed=base + done)

                result = replay_openb(nodes, orders[seed], profile, advance)
                done_before += len(orders[seed])
                runs.append(PolicyRun(policy, seed, result))

    if args.plot:
        title = f"openb {trace or Path(args.pods).name}: GPU allocation vs arrived load"
        try:
            plot_allocation(runs, Path(args.plot), title)
        except (OSError, ValueError) as error:
            raise _UsageError(f"cannot write the plot {args.plot}: {error}") from None
    if args.json:
        print(json.dumps(results_json(runs)))
    else:
        out = Console(width=max(Console().width, 120))
        out.print(results_table(runs, trace))
        if args.plot:
            out.print(f"plot written to {args.plot}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gang-scheduler",
        description="A Kubernetes scheduler for learning tasks: all-or-nothing gangs, "
        "fractional GPUs, GPU topology.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="schedule a built-in demo cluster and learning tasks; print placements"
    )
    demo.set_defaults(handler=_demo)
    simulate = commands.add_parser(
        "simulate",
        help="replay the openb GPU cluster trace through the scheduling core (FGD paper "
        "protocol); report GPU allocation per policy",
        description="Replay an openb-format trace as the FGD paper (USENIX ATC'23) does: "
        "every pod tried once in a seeded arrival order with clones up to --load x the "
        "cluster's GPUs; report GPU allocation at 100% and 130% arrived load. "
        "Defaults: the bundled node list and default trace, policies bestfit, fgd and "
        "this project's best, seed 42. See docs/simulator.md.",
    )
    simulate.add_argument("--nodes", metavar="PATH", help="node CSV in the openb format")
    simulate.add_argument(
        "--pods", metavar="PATH", help="pod CSV in the openb format (overrides --trace)"
    )
    simulate.add_argument(
        "--trace",
        metavar="NAME",
        default="default",
        help=f"bundled pod list: {', '.join(TRACES)} (default: default)",
    )
    simulate.add_argument(
        "--policy",
        metavar="NAME",
        action="append",
        help="policy to run; repeatable (default: bestfit, fgd and the project's best)",
    )
    simulate.add_argument(
        "--seed",
        metavar="N",
        type=int,
        action="append",
        help=f"arrival-order seed; repeatable (default: {DEFAULT_SEED}; the paper: 42..51)",
    )
    simulate.add_argument(
        "--load",
        type=float,
        default=DEFAULT_LOAD,
        help=f"arrived GPU load the clones fill up to, x cluster GPU (default: {DEFAULT_LOAD})",
    )
    simulate.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout instead of a table"
    )
    simulate.add_argument(
        "--plot", metavar="PATH.png", help="write GPU allocation against arrived load here"
    )
    simulate.set_defaults(handler=_simulate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
