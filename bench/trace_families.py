"""Write generated openb traces (scheduler/sim/families.py) as pod CSVs, to replay with
`gang-scheduler simulate --pods DIR/NAME.csv`.

    .venv/bin/python bench/trace_families.py --out /tmp/traces            # the set below
    .venv/bin/python bench/trace_families.py --out /tmp/traces multigpu30 cpu25
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.sim.defaults import TRACES
from scheduler.sim.families import FAMILIES, generate_csv, parse_member
from scheduler.sim.openb import bundled_file

# The members docs/benchmarks.md reports: the paper's four CPU-only parts (its cpu050,
# cpu100, cpu200, cpu250: no bundled trace is CPU-heavy), and one more of each bundled
# family, further from the default trace than the bundled one.
DEVELOPMENT_SET = ("cpu5", "cpu10", "cpu20", "cpu25", "gpushare80", "multigpu30", "gpuspec20")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write NAME.csv into")
    parser.add_argument("names", nargs="*", help=f"default: {' '.join(DEVELOPMENT_SET)}")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or DEVELOPMENT_SET:
        family, _ = parse_member(name)
        base = TRACES[FAMILIES[family].base]
        path = out / f"{name}.csv"
        member = generate_csv(name, bundled_file(base))
        path.write_text(member)
        print(f"{path}: {member.count(chr(10)) - 1} pods (base {base})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
