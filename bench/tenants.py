"""Tenants in the simulator: the bundled three-team workload on the bundled 64-node
cluster under every sharing mode (no quotas, quotas without borrowing, borrowing
without and with reclaim, and reclaim with the starvation guard); prints the Markdown
tables of docs/benchmarks.md ("Simulator: teams sharing the cluster").

    .venv/bin/python bench/tenants.py                                  # tables
    .venv/bin/python bench/tenants.py --json out.json --plot teams.png
    .venv/bin/python bench/tenants.py --seed 43 --mode borrowing --mode reclaim

A mode whose settings this build does not know (reclaim and the guard come with another
branch) runs without them and its row is marked `*`: rerun this command after the merge.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.sim.cluster_spec import default_cluster, gpu_pools
from scheduler.sim.openb import cluster_size
from scheduler.sim.teams import generate_teams, parse_teams
from scheduler.sim.tenant_report import (
    plot_tenants,
    team_figures,
    tenants_json,
    tenants_markdown,
)
from scheduler.sim.tenants import MODE_NAMES, mode_named, parse_quotas, run_mode


def bundled(filename: str) -> str:
    return resources.files("scheduler.sim").joinpath("data", filename).read_text("utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policy", default="binpack", choices=("binpack", "spread", "fgd"))
    parser.add_argument("--mode", action="append", choices=MODE_NAMES, help="default: all")
    parser.add_argument("--json", metavar="PATH", help="also write the JSON report here")
    parser.add_argument("--plot", metavar="PATH.png", help="also write the plot here")
    args = parser.parse_args()
    nodes = default_cluster()
    teams = parse_teams(bundled("teams-3.yaml"), "teams-3.yaml")
    quotas = parse_quotas(bundled("quotas-3.yaml"), "quotas-3.yaml")
    gpus = cluster_size(nodes).total_gpu_milli // 1000
    tasks = generate_teams(teams, args.seed, gpus, pools=gpu_pools(nodes))
    started = time.perf_counter()
    figures = []
    for name in args.mode or MODE_NAMES:
        run = run_mode(nodes, tasks, quotas, mode_named(name), policy=args.policy, seed=args.seed)
        figures.append(team_figures(run, quotas))
        print(f"{name}: {run.result.seconds:.1f} s", file=sys.stderr)
    title = f"teams-3.yaml, seed {args.seed}, {args.policy}, quotas-3.yaml, {gpus} GPUs"
    if args.json:
        Path(args.json).write_text(json.dumps(tenants_json(figures), indent=1) + "\n")
    if args.plot:
        plot_tenants(figures, Path(args.plot), title)
    per_team: dict[str, int] = {}
    for task in tasks:
        per_team[task.namespace] = per_team.get(task.namespace, 0) + 1
    counts = ", ".join(f"{team} {count}" for team, count in per_team.items())
    print(f"{title}: {len(tasks)} tasks ({counts}); {time.perf_counter() - started:.0f} s\n")
    print(tenants_markdown(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
