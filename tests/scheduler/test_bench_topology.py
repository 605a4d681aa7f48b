"""bench/planner.py --topology on a small cluster: every gang is placed and every plan of
a rack-required, clique-sliced gang passes the benchmark's own check (one rack, each 8
consecutive members in one clique). Placement only; the timings are the benchmark's."""

from __future__ import annotations

from bench.topology_gangs import run_topology


def test_small_topology_benchmark_places_every_gang_and_checks_each_plan() -> None:
    result = run_topology(nodes=120, gangs=3, seed=7, tune_gc=False)
    assert result["plain of 8"]["placed"] == 3
    assert result["rack + clique slices of 64"]["placed"] == 3
