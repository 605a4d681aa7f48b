"""The replay's pod records (PodRecords: parsed once per trace shape, copied per arrival)
against the slow path they stand for: the cache parsing each pod object, and a replay
that feeds the core every pod object as a watch event."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import EventType
from cache.pod import GangKeys, pod_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from scheduler.sim.openb import (
    OpenbPod,
    PodRecords,
    arrival_order,
    deleted_pod_object,
    load_nodes,
    pod_object,
)
from scheduler.sim.replay import cluster_gpu_milli, replay_openb

MODELS = ("T4", "P100", "V100M16", "V100M32", "A10")

openb_pods = st.builds(
    OpenbPod,
    name=st.sampled_from(["", "pod-1", "openb-pod-0042", "x-clone-7", "n" * 60]),
    cpu_milli=st.integers(0, 128_000),
    memory_mib=st.integers(0, 800_000),
    num_gpu=st.integers(0, 8),
    gpu_milli=st.integers(0, 1000),
    gpu_spec=st.none() | st.frozensets(st.sampled_from(MODELS), min_size=1),
)


@settings(max_examples=300, deadline=None)
@given(
    first=openb_pods,
    name=st.sampled_from(["", "pod-2", "a-clone-12x"]),
    first_uid=st.integers(0, 2_000_000),
    uid=st.integers(0, 2_000_000),
    scheduler_name=st.sampled_from(["gang-scheduler", "other"]),
    share_milli=st.sampled_from([1, 10]),
)
def test_a_record_equals_the_parse_of_its_pod_object(
    first: OpenbPod, name: str, first_uid: int, uid: int, scheduler_name: str, share_milli: int
) -> None:
    """A record copied from the parse of another pod of the same shape (another name,
    uid and creation time) equals the parse of its own object, field for field."""
    records = PodRecords(scheduler_name, share_milli, GangKeys())
    second = OpenbPod(
        name, first.cpu_milli, first.memory_mib, first.num_gpu, first.gpu_milli, first.gpu_spec
    )
    made = records.record(first, first_uid)
    copied = records.record(second, uid)
    assert made == pod_from_api(
        pod_object(first, first_uid, scheduler_name), share_milli, GangKeys()
    )
    assert copied == pod_from_api(pod_object(second, uid, scheduler_name), share_milli)
    # Each arrival has its own record: binding one (the cache sets its node) must not
    # bind the other.
    assert copied is not made
    copied.node_name = "node-a"
    assert made.node_name == ""


def test_the_deletion_object_names_the_record() -> None:
    record = PodRecords().record(OpenbPod("p", 1000, 1024, 1, 500), 7)
    assert deleted_pod_object(record) == {
        "metadata": {"uid": "openb-7", "namespace": "openb", "name": "p", "resourceVersion": "1"}
    }


NODES = load_nodes(
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "g2,96000,393216,8,G2\n"
    "t4,32000,131072,2,T4\n"
    "v100,64000,262144,4,V100M16\n"
    "cpu,32000,65536,0,\n"
)


def replay_through_watch_events(pods: list[OpenbPod]) -> tuple[list[int], int, list[str]]:
    """The replay as it was before PodRecords: every pod object fed to the core as an
    ADDED watch event, and the whole object as its DELETED event."""
    core = SchedulingCore(build_profile("binpack", candidate_limit=0), explain_failures=False)
    for node in NODES:
        core.apply_node(EventType.ADDED, node, 0.0)
    allocated, failed = 0, 0
    readings: list[int] = []
    placed_on: list[str] = []
    for position, pod in enumerate(pods):
        obj = pod_object(pod, position)
        core.apply_pod(EventType.ADDED, obj, float(position))
        attempt = core.schedule_next(float(position))
        assert attempt is not None
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)
                allocated += sum(milli for _, milli in placement.shares)
                placed_on.append(placement.node)
        else:
            failed += 1
            core.apply_pod(EventType.DELETED, obj, float(position))
        readings.append(allocated)
    return readings, failed, placed_on


def trace_pods(count: int) -> list[OpenbPod]:
    shapes = [
        OpenbPod("share", 4000, 8192, 1, 460),
        OpenbPod("pinned", 8000, 16384, 1, 1000, frozenset({"T4", "V100M16"})),
        OpenbPod("pair", 16000, 32768, 2, 1000),
        OpenbPod("cpu", 6000, 8192, 0, 0),
        OpenbPod("whole", 32000, 65536, 4, 1000),
    ]
    return [
        OpenbPod(f"p{index}", s.cpu_milli, s.memory_mib, s.num_gpu, s.gpu_milli, s.gpu_spec)
        for index, s in enumerate(shapes[index % len(shapes)] for index in range(count))
    ]


def test_the_replay_places_as_the_replay_of_watch_events() -> None:
    """The same placements, readings and failures as feeding the core every pod object;
    the order repeats shapes, so most records are copies, and pods fail and are deleted."""
    order = arrival_order(trace_pods(30), total_gpu_milli=14_000, seed=3, load=1.3)
    readings, failed, _ = replay_through_watch_events(order)
    result = replay_openb(NODES, order, build_profile("binpack", candidate_limit=0))
    assert failed > 0
    assert result.readings.allocated == readings
    assert result.failed_pods == failed


def test_a_parsed_pod_leaves_the_core_as_its_watch_event_does() -> None:
    """`add_parsed_pod` and `apply_pod(ADDED)` of the same pod: the same record in the
    cache, the same gang, and the same plan."""
    pod = OpenbPod("p", 8000, 16384, 2, 1000)
    cores = []
    for parsed in (False, True):
        core = SchedulingCore(build_profile("binpack", candidate_limit=0))
        for node in NODES:
            core.apply_node(EventType.ADDED, node, 0.0)
        if parsed:
            core.add_parsed_pod(PodRecords().record(pod, 3), 3.0)
        else:
            core.apply_pod(EventType.ADDED, pod_object(pod, 3), 3.0)
        cores.append(core)
    slow, fast = cores
    assert cluster_gpu_milli(slow) == cluster_gpu_milli(fast)
    assert slow.cache.pod("openb-3") == fast.cache.pod("openb-3")
    slow_attempt, fast_attempt = slow.schedule_next(3.0), fast.schedule_next(3.0)
    assert slow_attempt is not None and fast_attempt is not None
    assert slow_attempt.gang.key == fast_attempt.gang.key == "openb/pod:p"
    assert slow_attempt.result == fast_attempt.result
