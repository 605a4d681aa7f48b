"""bench/topology_choice.py on a short workload: every choice places every gang of the
same workload, and the figures are those of a run (utilisation a fraction)."""

from __future__ import annotations

from bench.topology_choice import CHOICES, run


def test_every_choice_runs_the_same_workload_to_the_end() -> None:
    results = [run(choice, gangs=40, seed=7) for choice in CHOICES]
    placed = {r["required_placed"] for r in results}
    assert len(placed) == 1 and placed.pop() > 0
    assert all(0.0 < r["utilisation"] <= 1.0 for r in results)
