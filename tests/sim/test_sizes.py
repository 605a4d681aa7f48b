"""Failed pods by size, before and after 100% arrived load (scheduler.sim.sizes), in
the replay's result, the JSON object and the table."""

from __future__ import annotations

from rich.console import Console

from policies.profile import build_profile
from scheduler.sim.openb import OpenbPod, load_nodes
from scheduler.sim.replay import replay_openb
from scheduler.sim.report import PolicyRun, failures_table, results_json, size_failures
from scheduler.sim.sizes import SizeFailures, size_class, size_order

NODES = """sn,cpu_milli,memory_mib,gpu,model
box-a,32000,65536,4,G2
box-b,32000,65536,4,G2
"""


def pod(name: str, gpus: int, milli: int = 1000) -> OpenbPod:
    return OpenbPod(name, 1000, 1024, gpus, milli if gpus else 0)


def test_size_classes_and_their_order() -> None:
    pods = [pod("w8", 8), pod("c", 0), pod("w1", 1), pod("s", 1, 300), pod("w2", 2)]
    names = [size_class(p) for p in pods]
    assert names == ["8 GPU", "cpu-only", "1 GPU", "<1 GPU", "2 GPU"]
    assert sorted(names, key=size_order) == ["cpu-only", "<1 GPU", "1 GPU", "2 GPU", "8 GPU"]


def test_failures_split_at_100_percent_arrived() -> None:
    # 8 GPUs on two boxes of 4. Bin-packing puts the share of 500, the 2-GPU pod and
    # the share of 600 on one box, the share of 700 on the other: at 7.8 GPUs arrived
    # no box has 4 whole GPUs, so the 4-GPU pod fails before 100%. After 100%, a 1-GPU
    # pod fits and the second 4-GPU pod fails.
    pods = [
        pod("share-500", 1, 500),
        pod("two", 2),
        pod("share-600", 1, 600),
        pod("share-700", 1, 700),
        pod("four-a", 4),
        pod("cpu", 0),
        pod("one", 1),
        pod("four-b", 4),
    ]
    profile = build_profile("binpack", candidate_limit=0, network_weight=0)
    result = replay_openb(load_nodes(NODES), pods, profile)
    assert result.readings.arrived == [500, 2500, 3100, 3800, 7800, 7800, 8800, 12800]
    assert result.readings.allocated == [500, 2500, 3100, 3800, 3800, 3800, 4800, 4800]
    assert result.failed_pods == 2
    assert result.failures_by_size == {
        "cpu-only": SizeFailures(1, 0, 0, 0),
        "<1 GPU": SizeFailures(3, 0, 0, 0),
        "1 GPU": SizeFailures(0, 0, 1, 0),
        "2 GPU": SizeFailures(1, 0, 0, 0),
        "4 GPU": SizeFailures(1, 1, 1, 1),
    }
    assert list(result.failures_by_size) == ["cpu-only", "<1 GPU", "1 GPU", "2 GPU", "4 GPU"]
    runs = [PolicyRun("binpack", 1, result), PolicyRun("binpack", 2, result)]
    assert size_failures(runs)["binpack"]["4 GPU"] == (1.0, 1.0)
    entry = results_json(runs)["results"][0]["failed_by_size"]["4 GPU"]
    assert entry == {
        "arrived_before_100": 1,
        "failed_before_100": 1,
        "arrived_after_100": 1,
        "failed_after_100": 1,
    }
    console = Console(width=160, record=True)
    console.print(failures_table(runs))
    text = " ".join(console.export_text().split())  # the title and caption wrap
    assert "failed pods by size: before / after 100% arrived load (mean over seeds)" in text
    assert "1 / 1" in text and "pods arrived per size: cpu-only 1, <1 GPU 3" in text
    assert "4 GPU 2" in text
