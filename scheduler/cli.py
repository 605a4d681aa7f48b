"""The `gang-scheduler` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from scheduler.demo import run_demo


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
