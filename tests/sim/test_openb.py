"""The openb trace: loading, the paper's arrival order and readings, pod objects, and a
replay through the scheduling core on a cluster small enough to solve by hand."""

from __future__ import annotations

import random
import re
from importlib import resources

import pytest

from cache.gpu import PRODUCT_LABEL, GpuRequest
from cache.node import node_from_api
from cache.pod import pod_from_api
from policies.profile import Profile, build_profile
from scheduler.sim.openb import (
    NODE_FILE,
    TRACES,
    ClusterSize,
    OpenbFormatError,
    OpenbPod,
    Readings,
    arrival_order,
    cluster_size,
    load_nodes,
    load_pods,
    per_gpu_milli,
    pod_object,
    requested_gpu_milli,
    round_percent,
)
from scheduler.sim.replay import replay_openb

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
node-a,96000,393216,8,G2
node-b,32000,65536,0,
"""

PODS_CSV = (
    (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,"
        "qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    )
    + """pod-0,12000,16384,1,460,,LS,Running,0,12537496,0
pod-1,4000,8192,2,1000,V100M16|V100M32,LS,Running,1,2,1
pod-2,2000,4096,0,0,,BE,Running,1,2,1
"""
)

MULTIGPU_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
pod-0,12000,16384,1,1000
pod-1,6000,12288,4,1000
"""


def standin_profile() -> Profile:
    """Until scheduler.sim.profiles exists: a plain bin-packing profile over every node."""
    return build_profile("binpack", candidate_limit=0, network_weight=0)


def gpu_pod(name: str, milli: int, count: int = 1, cpu: int = 1000) -> OpenbPod:
    return OpenbPod(name, cpu, 1024, count, milli)


# --- loading --------------------------------------------------------------------------------
def test_nodes_become_api_objects_the_cache_reads() -> None:
    nodes = load_nodes(NODES_CSV)
    assert [n["metadata"]["name"] for n in nodes] == ["node-a", "node-b"]
    a, b = (node_from_api(n) for n in nodes)
    assert a.allocatable["cpu"] == 96000
    assert a.allocatable["memory"] == 393216 * 2**20
    assert a.allocatable["pods"] == 1000
    assert a.allocatable["nvidia.com/gpu"] == 8
    assert a.allocatable["nvidia.com/vgpu"] == 8000
    assert len(a.devices) == 8 and a.labels[PRODUCT_LABEL] == "G2"
    assert "nvidia.com/gpu" not in b.allocatable and PRODUCT_LABEL not in b.labels
    assert not b.devices
    assert cluster_size(nodes) == ClusterSize(8000, 96000, 8000, 128_000)


def test_pods_with_all_columns_and_with_the_five_of_multigpu50() -> None:
    assert load_pods(PODS_CSV) == [
        OpenbPod("pod-0", 12000, 16384, 1, 460, None),
        OpenbPod("pod-1", 4000, 8192, 2, 1000, frozenset({"V100M16", "V100M32"})),
        OpenbPod("pod-2", 2000, 4096, 0, 0, None),
    ]
    assert load_pods(MULTIGPU_CSV) == [
        OpenbPod("pod-0", 12000, 16384, 1, 1000),
        OpenbPod("pod-1", 6000, 12288, 4, 1000),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n", "missing column(s) gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1.5,1,0,0\n", ":2: cpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,-1,0\n", ":2: num_gpu"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0\n", ":2: expected 5 fields"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0,0,9\n", ":2: expected 5 fields"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,0,0\np,1,1,0,0\n", ":3: pod name"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,0\n", ":2: num_gpu is 1"),
    ],
)
def test_malformed_pod_rows_name_their_line(text: str, message: str) -> None:
    with pytest.raises(OpenbFormatError, match=f"^<text>.*{re.escape(message)}"):
        load_pods(text)


def test_malformed_node_row_is_refused() -> None:
    with pytest.raises(OpenbFormatError, match=r"<text>:3: gpu"):
        load_nodes("sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,1,T4\nn2,1,1,x,T4\n")


def test_bundled_files_are_package_data_and_match_the_readme() -> None:
    data = resources.files("scheduler.sim").joinpath("data", "openb")
    nodes = load_nodes(data.joinpath(NODE_FILE).read_text("utf-8"))
    assert len(nodes) == 1213
    assert cluster_size(nodes) == ClusterSize(6_212_000, 128_000, 8_000, 107_018_000)
    counts = {
        name: len(load_pods(data.joinpath(f).read_text("utf-8"))) for name, f in TRACES.items()
    }
    assert counts == {"default": 8152, "gpushare40": 8152, "multigpu50": 9061, "gpuspec33": 8152}


# --- the protocol ---------------------------------------------------------------------------
def test_gpu_milli_as_the_readme_defines_it() -> None:
    assert per_gpu_milli(gpu_pod("a", 460)) == requested_gpu_milli(gpu_pod("a", 460)) == 460
    assert per_gpu_milli(gpu_pod("b", 1500)) == 1000  # capped at one GPU
    assert per_gpu_milli(gpu_pod("c", 1000, count=4)) == 1000
    assert requested_gpu_milli(gpu_pod("c", 1000, count=4)) == 4000
    assert requested_gpu_milli(OpenbPod("d", 1000, 1, 0, 0)) == 0


def trace(count: int = 12) -> list[OpenbPod]:
    pods = [gpu_pod(f"p{i:02d}", milli=(i * 137) % 1000 + 1) for i in range(count)]
    return [*pods, OpenbPod("cpu-only", 500, 512, 0, 0)]


def test_originals_come_first_sorted_then_shuffled_with_the_seed() -> None:
    pods = trace()
    order = arrival_order(pods, total_gpu_milli=4000, seed=7)
    expected = sorted(pods, key=lambda p: p.name)
    random.Random(7).shuffle(expected)
    assert order[: len(pods)] == expected
    # The file's order does not matter, only the names.
    assert arrival_order(list(reversed(pods)), 4000, 7) == order
    assert arrival_order(pods, 4000, 7) == order
    assert arrival_order(pods, 4000, 8)[: len(pods)] != expected


def test_clones_stop_at_the_first_draw_that_would_pass_the_load() -> None:
    pods = trace()
    total, seed = 10_000, 3
    order = arrival_order(pods, total, seed, load=1.3)
    originals = sorted(pods, key=lambda p: p.name)
    clones = order[len(pods) :]
    assert clones and len({p.name for p in order}) == len(order)
    # Replay the random stream: the shuffle, then one uniform draw per clone.
    rng = random.Random(seed)
    rng.shuffle(list(originals))
    running = sum(requested_gpu_milli(p) for p in originals)
    for clone in clones:
        drawn = rng.choice(originals)
        assert clone.name.startswith(f"{drawn.name}-clone-")
        assert (clone.cpu_milli, clone.gpu_milli) == (drawn.cpu_milli, drawn.gpu_milli)
        running += requested_gpu_milli(drawn)
    assert running <= 1.3 * total
    assert running + requested_gpu_milli(rng.choice(originals)) > 1.3 * total


def test_load_bound_is_exact_decimal_and_reached_exactly() -> None:
    # 1.15 x 100 is 114.999... in floats; the bound is 115 and a total of 115 is within.
    pods = [gpu_pod(f"p{i}", 1) for i in range(5)]
    order = arrival_order(pods, total_gpu_milli=100, seed=1, load=1.15)
    assert sum(requested_gpu_milli(p) for p in order) == 115


def test_originals_already_past_the_load_get_no_clones() -> None:
    pods = [gpu_pod(f"p{i}", 1000) for i in range(3)]
    assert len(arrival_order(pods, total_gpu_milli=1000, seed=1)) == 3
    with pytest.raises(ValueError, match="load"):
        arrival_order(pods, 1000, 1, load=float("nan"))


def test_cpu_only_trace_gets_no_clones() -> None:
    pods = [OpenbPod(f"c{i}", 100, 1, 0, 0) for i in range(3)]
    assert len(arrival_order(pods, total_gpu_milli=1000, seed=1)) == 3


# --- readings -------------------------------------------------------------------------------
def test_percent_rounds_half_to_even() -> None:
    assert [round_percent(a, 1000) for a in (1005, 1015, 1295, 1305, 1304, 1306)] == [
        100,
        102,
        130,
        130,
        130,
        131,
    ]
    # Exact where floats are not: 100 x 1 / 3 is 33.33..., and 1/8 of 100 is 12.5 -> 12.
    assert round_percent(1, 3) == 33 and round_percent(1, 8) == 12


def test_value_at_is_the_mean_of_readings_rounding_to_it() -> None:
    readings = Readings(1000)
    for arrived, allocated in [(994, 900), (995, 910), (1000, 920), (1005, 930), (1006, 999)]:
        readings.record(arrived, allocated)
    # 99.5 -> 100 (even), 100.5 -> 100 (even), 100.6 -> 101, 99.4 -> 99.
    assert readings.value_at(100) == pytest.approx((91.0 + 92.0 + 93.0) / 3)
    assert readings.value_at(99) == pytest.approx(90.0)
    assert readings.value_at(130) is None
    assert [x for x, _ in readings.curve()] == [99, 100, 101]
    with pytest.raises(ValueError):
        Readings(0)


# --- pod objects ----------------------------------------------------------------------------
def test_pod_objects_ask_what_the_readme_says() -> None:
    share = pod_from_api(pod_object(gpu_pod("share", 470), 0))
    whole = pod_from_api(pod_object(gpu_pod("whole", 1000), 1))
    big = pod_from_api(pod_object(gpu_pod("big", 1000, count=4), 2))
    cpu = pod_from_api(pod_object(OpenbPod("cpu", 2500, 300, 0, 0), 3))
    assert share.requests["nvidia.com/vgpu"] == 470 and share.gpu == GpuRequest(1, 470)
    assert whole.requests["nvidia.com/gpu"] == 1 and whole.gpu == GpuRequest(1, 1000)
    assert big.requests["nvidia.com/gpu"] == 4 and big.gpu == GpuRequest(4, 1000)
    assert cpu.requests == {"cpu": 2500, "memory": 300 * 2**20}
    assert share.scheduler_name == "gang-scheduler" and not share.problems
    assert share.created < whole.created < big.created < cpu.created
    assert len({p.uid for p in (share, whole, big, cpu)}) == 4
    assert share.required_affinity is None


def test_gpu_spec_is_a_required_affinity_on_the_product_label() -> None:
    pod = OpenbPod("pinned", 1000, 1, 1, 300, frozenset({"V100M32", "T4"}))
    info = pod_from_api(pod_object(pod, 0))
    assert info.required_affinity is not None
    (term,) = info.required_affinity
    (requirement,) = term
    assert requirement.key == PRODUCT_LABEL and requirement.operator == "In"
    assert list(requirement.values) == ["T4", "V100M32"]


# --- replay ---------------------------------------------------------------------------------
TINY_NODES = """sn,cpu_milli,memory_mib,gpu,model
g2-box,8000,65536,2,G2
t4-box,4000,65536,1,T4
"""


def test_tiny_cluster_reaches_its_optimal_allocation() -> None:
    """3 GPUs: the T4-pinned 600 share can only go to the T4, the 2-GPU pod only to the
    G2 box, and the 400 share then exactly fills the T4: every GPU allocated, which is
    optimal. The CPU-only pod fits on CPU; the last share finds no GPU room and is
    dropped for good."""
    pods = [
        OpenbPod("t4-share", 1000, 1024, 1, 600, frozenset({"T4"})),
        gpu_pod("pair", 1000, count=2, cpu=4000),
        gpu_pod("fill", 400, cpu=1000),
        OpenbPod("cpu-only", 2000, 1024, 0, 0),
        gpu_pod("late", 100, cpu=100),
    ]
    result = replay_openb(load_nodes(TINY_NODES), pods, standin_profile())
    assert result.pods == 5 and result.failed_pods == 1
    readings = result.readings
    assert readings.total_gpu_milli == 3000
    assert readings.arrived == [600, 2600, 3000, 3000, 3100]
    assert readings.allocated == [600, 2600, 3000, 3000, 3000]
    assert result.allocation_pct == {100: 100.0, 130: None}
    assert result.seconds > 0


def test_cpu_runs_out_before_gpus() -> None:
    """The fit filter applies to CPU as the paper's simulator's does: a 1-GPU pod that
    needs more CPU than the node has left is dropped although a GPU is free."""
    nodes = load_nodes("sn,cpu_milli,memory_mib,gpu,model\nsmall,4000,65536,2,T4\n")
    pods = [gpu_pod("first", 1000, cpu=3000), gpu_pod("second", 1000, cpu=3000)]
    result = replay_openb(nodes, pods, standin_profile())
    assert result.failed_pods == 1
    assert result.readings.allocated == [1000, 1000]
    assert result.allocation_pct[100] == 50.0


def test_replay_is_deterministic_and_reports_progress() -> None:
    nodes = load_nodes(TINY_NODES)
    order = arrival_order(trace(40), total_gpu_milli=3000, seed=5)
    seen: list[tuple[int, int]] = []
    first = replay_openb(nodes, order, standin_profile(), lambda done, n: seen.append((done, n)))
    second = replay_openb(nodes, order, standin_profile())
    assert first.readings.allocated == second.readings.allocated
    assert first.failed_pods == second.failed_pods > 0
    assert seen[-1] == (len(order), len(order))
    assert max(first.readings.allocated) <= 3000
