"""bench/planner.py --dra on a small cluster: both kinds of gang are placed and every
DRA plan passes the benchmark's own check (devices on the member's node, on one PCIe
root, none twice). Placement only; the timings are the benchmark's business."""

from __future__ import annotations

from bench.dra_gangs import run_dra


def test_small_dra_benchmark_places_every_gang_and_checks_each_plan() -> None:
    result = run_dra(nodes=40, gangs=3, seed=7)
    assert result["annotation"]["placed"] == 3
    assert result["dra"]["placed"] == 3


def test_the_plans_digest_names_the_decisions_of_the_seed() -> None:
    """Two runs of one seed decide alike (the digest two planner versions are compared
    by); another seed decides otherwise."""
    first = run_dra(nodes=40, gangs=3, seed=7)["plans_sha256"]
    assert run_dra(nodes=40, gangs=3, seed=7)["plans_sha256"] == first
    assert run_dra(nodes=40, gangs=3, seed=8)["plans_sha256"] != first
