"""Policies against FGD on the four bundled openb traces and the generated development
set, over several seeds, through `gang-scheduler simulate --json`.

    .venv/bin/python bench/versus_fgd.py --policy fgd-complete-reserve   # 10 seeds, 11 traces
    .venv/bin/python bench/versus_fgd.py --policy fgd-reserve --seeds 42,43 --traces default,cpu25

Prints, per trace and policy: the mean GPU allocation % at 100% and 130% arrived load,
the difference with FGD and the seeds above FGD, the 8-GPU pods failed while the arrived
load was at most 100% (mean per seed), and whether issue 32's floor holds (the mean at
each load no more than FLOOR_NOISE below FGD's); then the failed pods by size before /
after 100% arrived load.
The generated traces are written by bench/trace_families.py into a temporary directory
(or `--families DIR`). `--save DIR` keeps every `--json` result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import fmean as mean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trace_families import DEVELOPMENT_SET  # bench/trace_families.py: this script's directory

from scheduler.sim.defaults import TRACES
from scheduler.sim.sizes import size_order

BUNDLED = tuple(TRACES)
GENERATED = DEVELOPMENT_SET
# Issue 32's floor: a policy's 10-seed mean may fall this far below FGD's and still
# count as "not below FGD". FGD's per-seed spread at 130% on cpu25 is 0.23 points
# (docs/benchmarks.md), so a 10-seed mean moves by about 0.07: rounded up.
FLOOR_NOISE = 0.1

Rows = dict[int, dict[str, object]]


def simulate(trace: str, families: Path, policy: str, seeds: list[int], jobs: int) -> Rows:
    command = [str(Path(sys.executable).parent / "gang-scheduler"), "simulate"]
    if trace in BUNDLED:
        command += ["--trace", trace]
    else:
        command += ["--pods", str(families / f"{trace}.csv")]
    command += ["--policy", policy, "--json", "--jobs", str(jobs)]
    for seed in seeds:
        command += ["--seed", str(seed)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return {row["seed"]: row for row in json.loads(out)["results"]}


def allocation(row: dict[str, object], load: str) -> float:
    value = row["allocation_pct"]
    assert isinstance(value, dict)
    return float(value[load])


def failed(row: dict[str, object], size: str, when: str) -> int:
    by_size = row["failed_by_size"]
    assert isinstance(by_size, dict)
    return int(by_size.get(size, {}).get(when, 0))


def sizes_of(rows: list[dict[str, object]]) -> list[str]:
    names = {name for row in rows for name in row["failed_by_size"]}  # type: ignore[attr-defined]
    return sorted(names, key=size_order)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", required=True, help="repeatable")
    parser.add_argument("--seeds", default="42,43,44,45,46,47,48,49,50,51")
    parser.add_argument("--traces", default=",".join(BUNDLED + GENERATED))
    parser.add_argument("--families", type=Path, help="bench/trace_families.py's --out")
    parser.add_argument("--jobs", type=int, default=1, help="simulate --jobs")
    parser.add_argument("--save", type=Path, help="directory to keep the --json results in")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    traces = args.traces.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        families = args.families or Path(scratch)
        missing = [t for t in traces if t not in BUNDLED and not (families / f"{t}.csv").exists()]
        if missing:
            script = Path(__file__).resolve().parent / "trace_families.py"
            subprocess.run(
                [sys.executable, str(script), "--out", str(families), *missing],
                check=True,
                capture_output=True,
            )
        results: dict[tuple[str, str], Rows] = {}
        for trace in traces:
            for policy in ("fgd", *args.policy):
                rows = simulate(trace, families, policy, seeds, args.jobs)
                results[trace, policy] = rows
                if args.save is not None:
                    args.save.mkdir(parents=True, exist_ok=True)
                    (args.save / f"{trace}-{policy}.json").write_text(json.dumps(rows))
    every_row = [row for rows in results.values() for row in rows.values()]
    sizes = sizes_of(every_row)
    # The largest whole-GPU request (8 GPUs on the openb traces): issue 14's whole nodes.
    whole_node = sizes[-1]
    print(f"seeds {seeds}")
    print("| trace | policy | @100 | d100 | won100 | @130 | d130 | won130 | 8GPU<100 | floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    met = dict.fromkeys(args.policy, True)
    for trace in traces:
        base = results[trace, "fgd"]
        b100, b130 = (mean([allocation(base[s], load) for s in seeds]) for load in ("100", "130"))
        b8 = mean([failed(base[s], whole_node, "failed_before_100") for s in seeds])
        print(f"| {trace} | fgd | {b100:.2f} | | | {b130:.2f} | | | {b8:.1f} | |")
        for policy in args.policy:
            rows = results[trace, policy]
            p100, p130 = (
                mean([allocation(rows[s], load) for s in seeds]) for load in ("100", "130")
            )
            p8 = mean([failed(rows[s], whole_node, "failed_before_100") for s in seeds])
            won = [
                sum(allocation(rows[s], load) > allocation(base[s], load) for s in seeds)
                for load in ("100", "130")
            ]
            ok = p100 >= b100 - FLOOR_NOISE and p130 >= b130 - FLOOR_NOISE
            met[policy] = met[policy] and ok
            print(
                f"| {trace} | {policy} | {p100:.2f} | {p100 - b100:+.2f} | {won[0]}/{len(seeds)} "
                f"| {p130:.2f} | {p130 - b130:+.2f} | {won[1]}/{len(seeds)} | {p8:.1f} "
                f"| {'OK' if ok else 'FAIL'} |"
            )
    print()
    print("Failed pods by size, before / after 100% arrived load, mean per seed:")
    print()
    print("| trace | policy | " + " | ".join(sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for trace in traces:
        for policy in ("fgd", *args.policy):
            rows = results[trace, policy]
            cells = [
                f"{mean([failed(rows[s], size, 'failed_before_100') for s in seeds]):.1f} / "
                f"{mean([failed(rows[s], size, 'failed_after_100') for s in seeds]):.1f}"
                for size in sizes
            ]
            print(f"| {trace} | {policy} | " + " | ".join(cells) + " |")
    print()
    for policy, ok in met.items():
        print(f"{policy}: {'not below FGD on any trace' if ok else 'below FGD on some trace'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
