"""The reserve of whole nodes learnt from the pods seen (policies/whole_node_reserve.py
LearnedWholeNodeReserve), and the Kubernetes policy that keeps it
(`fgd-complete-reserve`, policies/profile.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.gpu import PRODUCT_LABEL
from cache.pod import PodInfo, pod_from_api
from cache.snapshot import Snapshot
from policies.profile import RESERVING_POLICIES, build_profile
from policies.scores.fragmentation import OnlineWorkload, Relearnt, TargetWorkload, WorkloadShape
from policies.whole_node_reserve import LearnedWholeNodeReserve, WholeNodeReserve
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from scheduler.sim.openb import OpenbPod, pod_object
from tests.factories import make_pod, node_obj, pod_obj
from tests.scheduler.test_core_isolation import run_until_idle

ADDED, DELETED = EventType.ADDED, EventType.DELETED
BIG = [node_obj("big1", gpus=8, cpu="96"), node_obj("big2", gpus=8, cpu="96")]
SMALL = node_obj("small", gpus=2, cpu="16")


def test_classes_from_shape_counts_are_those_of_the_most_whole_gpus() -> None:
    counts = {
        WorkloadShape(4000, 500, 1): 1,
        WorkloadShape(64_000, 1000, 8): 2,
        WorkloadShape(120_000, 1000, 8, frozenset({"G3"})): 1,
        WorkloadShape(2000): 1,
    }
    reserve = WholeNodeReserve.from_shape_counts(counts)
    classes = [(r.gpus, r.cpu_milli, r.memory, r.models, r.share) for r in reserve.requests]
    assert classes == [(8, 64_000, 0, None, 0.4), (8, 120_000, 0, frozenset({"G3"}), 0.2)]
    assert reserve.mean_gpu_milli == pytest.approx((500 + 3 * 8000) / 5)
    # Shares instead of counts (a fixed workload's): the same reserve.
    scaled = WholeNodeReserve.from_shape_counts({s: c / 5 for s, c in counts.items()})
    assert scaled.requests == reserve.requests
    assert scaled.mean_gpu_milli == pytest.approx(reserve.mean_gpu_milli)
    # No pod asks a whole GPU (a 500 share is not one): no class.
    assert WholeNodeReserve.from_shape_counts({WorkloadShape(4000, 500, 1): 3}).requests == ()
    assert WholeNodeReserve.from_shape_counts({}).requests == ()


_OPENB_PODS = st.lists(
    st.builds(
        lambda cpu, memory, gpus, milli: OpenbPod(
            "p", cpu, memory, gpus, milli if gpus == 1 else 1000
        ),
        st.sampled_from([0, 4000, 64_000, 120_000]),
        st.sampled_from([0, 1024, 200 * 1024]),
        st.sampled_from([0, 1, 2, 8]),
        st.sampled_from([250, 500, 1000]),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_OPENB_PODS)
def test_learnt_from_the_pods_seen_it_is_the_reserve_of_that_history(
    pods: list[OpenbPod],
) -> None:
    """The online counts give what the history gives, the memory of each class too."""
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    workload = OnlineWorkload()
    for pod in history:
        workload.observe(pod)
    learnt = LearnedWholeNodeReserve(workload, "no-stranding", 2.0).current()
    expected = WholeNodeReserve.from_pods(history, "no-stranding", 2.0)
    assert learnt.requests == pytest.approx(expected.requests)
    assert learnt.mean_gpu_milli == pytest.approx(expected.mean_gpu_milli)
    assert (learnt.last_resort, learnt.margin) == ("no-stranding", 2.0)


def _eight_gpu(name: str) -> PodInfo:
    return make_pod(name, gpus=8, cpu="64")


def test_the_learnt_reserve_is_rebuilt_as_the_pods_seen_grow() -> None:
    workload = OnlineWorkload()
    source = LearnedWholeNodeReserve(workload, growth=0.5)
    assert source.current().requests == ()  # nothing seen: nothing kept
    workload.observe(_eight_gpu("w0"))
    first = source.current()
    assert [r.gpus for r in first.requests] == [8]
    assert source.current() is first  # nothing new seen: the same reserve
    for i in range(10):
        workload.observe(make_pod(f"s{i}", gpus=1))
    # Past half as many pods again: rebuilt, the 8-GPU class now a smaller share.
    rebuilt = source.current()
    assert rebuilt is not first
    assert rebuilt.requests[0].share == pytest.approx(1 / 11)
    workload.observe(make_pod("one-more", gpus=1))
    assert source.current() is rebuilt  # 1 more of 11 is below the growth


def _planned_node(planner: Planner, cache: ClusterCache, snapshot: Snapshot | None = None) -> str:
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs
    (gang,) = gangs.values()
    result = planner.plan(gang, snapshot or cache.snapshot())
    assert isinstance(result, Plan)
    return result.placements[0].node


def test_the_planner_applies_the_reserve_as_rebuilt() -> None:
    """One planner, one snapshot: the reserve's summary of the cluster follows the
    reserve when it is rebuilt, instead of keeping the one it made for the old."""
    workload = OnlineWorkload()
    # Spreading prefers the idle big nodes, unless the reserve says no.
    profile = dataclasses.replace(
        build_profile("spread", topology_keys=(), workload=workload),
        whole_node_reserve=LearnedWholeNodeReserve(workload, "any", 1.0),
    )
    cache = ClusterCache()
    for node in [*BIG, SMALL]:
        cache.apply_node(ADDED, node)
    cache.apply_pod(ADDED, pod_obj("g", gpus=1))
    planner, snapshot = Planner(profile), cache.snapshot()
    # 1 in 20 pods seen asks 8 GPUs: a reserve of 1 node, and 2 hold the class.
    workload.observe(_eight_gpu("w0"))
    for i in range(19):
        workload.observe(make_pod(f"s{i}", gpus=1))
    assert _planned_node(planner, cache, snapshot).startswith("big")
    # 21 in 40: the reserve grows to 3 nodes, so both big nodes are short of it.
    for i in range(1, 21):
        workload.observe(_eight_gpu(f"w{i}"))
    assert _planned_node(planner, cache, snapshot) == "small"


def test_a_flood_of_whole_node_pods_never_holds_back_a_pod_that_fits() -> None:
    """A tenant's pods shape what is learnt: a thousand 8-GPU pods that never run make
    the reserve as large as it gets, yet a pod that only fits on a reserved node still
    goes there (the Kubernetes policy's last resort is "any")."""
    profile = build_profile("fgd-complete-reserve", topology_keys=())
    assert profile.workload is not None and isinstance(profile.workload, OnlineWorkload)
    for i in range(1000):
        profile.workload.observe(_eight_gpu(f"flood-{i}"))
    cache = ClusterCache()
    for node in BIG:
        cache.apply_node(ADDED, node)
    cache.apply_pod(ADDED, pod_obj("g", gpus=1))
    assert _planned_node(Planner(profile), cache).startswith("big")


def _learnt_classes(planner: Planner, snapshot: Snapshot) -> list[tuple[int, int]]:
    ledger = planner.reserve_ledger(snapshot)
    assert ledger is not None
    return [(r.gpus, r.cpu_milli) for r in ledger.reserve.requests]


def test_requests_no_node_could_hold_are_no_class_of_the_learnt_reserve() -> None:
    """A tenant's pods asking more than any node is built with (200 GPUs; 8 GPUs with
    more CPU than any node; 8 GPUs of a model no node has) never run: had they become
    the classes, the real 8-GPU workers would have lost their reserve."""
    profile = build_profile("fgd-complete-reserve", topology_keys=())
    workload = profile.workload
    assert isinstance(workload, OnlineWorkload)
    for i in range(5):
        workload.observe(_eight_gpu(f"worker-{i}"))
    for i in range(50):
        workload.observe(make_pod(f"huge-{i}", gpus=200, cpu="1"))
        workload.observe(make_pod(f"cpu-{i}", gpus=8, cpu="4000"))
        selector = {PRODUCT_LABEL: "no-such-gpu"}
        workload.observe(make_pod(f"fake-{i}", gpus=8, cpu="8", node_selector=selector))
        workload.observe(make_pod(f"mem-{i}", gpus=8, cpu="8", memory="100Ti"))
    # Not knowing the cluster, the 200-GPU request is the largest.
    unchecked = WholeNodeReserve.from_shape_counts(workload.shape_counts())
    assert [r.gpus for r in unchecked.requests] == [200]
    cache = ClusterCache()
    for node in [*BIG, SMALL]:
        cache.apply_node(ADDED, node)
    planner, snapshot = Planner(profile), cache.snapshot()
    assert _learnt_classes(planner, snapshot) == [(8, 64_000)]
    assert planner.reserving(snapshot)
    # Nor are they expected demand: the mean GPU request is the workers' alone.
    ledger = planner.reserve_ledger(snapshot)
    assert ledger is not None and ledger.reserve.mean_gpu_milli == pytest.approx(8000)
    # On a cluster of 2-GPU nodes the largest request it could hold is the class.
    small = ClusterCache()
    small.apply_node(ADDED, SMALL)
    workload.observe(make_pod("pair", gpus=2, cpu="8"))
    assert _learnt_classes(Planner(profile), small.snapshot()) == [(2, 8000)]


def test_the_learnt_classes_follow_the_nodes_the_cluster_is_built_with() -> None:
    """Rebuilt when a node comes or goes, with no new pod seen."""
    profile = build_profile("fgd-complete-reserve", topology_keys=())
    workload = profile.workload
    assert isinstance(workload, OnlineWorkload)
    workload.observe(_eight_gpu("worker"))
    workload.observe(make_pod("pair", gpus=2, cpu="8"))
    cache = ClusterCache()
    cache.apply_node(ADDED, SMALL)
    planner = Planner(profile)
    assert _learnt_classes(planner, cache.snapshot()) == [(2, 8000)]
    cache.apply_node(ADDED, BIG[0])
    assert _learnt_classes(planner, cache.snapshot()) == [(8, 64_000)]
    cache.apply_node(DELETED, BIG[0])
    assert _learnt_classes(planner, cache.snapshot()) == [(2, 8000)]


def test_a_node_kept_whole_keeps_the_memory_its_class_asks() -> None:
    """The 8-GPU workers seen ask 200 GiB each. A CPU-only pod asking 100 GiB would
    leave a big node (256 GiB) unable to take one, GPUs idle or not: the learnt reserve
    sends it to the small node, where spreading alone sends it to a big one. A reserve
    that knows only the workers' GPUs and CPU (a fixed workload's) does not see it."""
    workload = OnlineWorkload()
    profile = build_profile(
        "fgd-complete-reserve",
        topology_keys=(),
        workload=workload,
        weights={"least-allocated": 1.0},
    )
    for i in range(4):
        workload.observe(make_pod(f"worker-{i}", gpus=8, cpu="64", memory="200Gi"))
    cache = ClusterCache()
    for node in [*BIG, SMALL]:
        cache.apply_node(ADDED, node)
    cache.apply_pod(ADDED, pod_obj("loader", cpu="1", memory="100Gi"))
    ledger = Planner(profile).reserve_ledger(cache.snapshot())
    assert ledger is not None
    assert [(r.gpus, r.memory) for r in ledger.reserve.requests] == [(8, 200 << 30)]
    assert _planned_node(Planner(profile), cache) == "small"
    memoryless = WholeNodeReserve.from_shape_counts(workload.shape_counts(), "any", 2.0)
    assert [r.memory for r in memoryless.requests] == [0]
    blind = dataclasses.replace(profile, whole_node_reserve=memoryless)
    assert _planned_node(Planner(blind), cache).startswith("big")


def test_whole_gpu_requests_are_counted_within_a_bound() -> None:
    """A tenant's 8-GPU pods of ever new memory sizes: the rarer half is dropped past
    the bound, as for shapes, and the workers' request stays counted."""
    workload = OnlineWorkload(max_shapes=8)
    for i in range(20):
        workload.observe(make_pod(f"worker-{i}", gpus=8, cpu="64", memory="200Gi"))
    for i in range(100):
        workload.observe(make_pod(f"odd-{i}", gpus=8, cpu="64", memory=f"{i + 1}Mi"))
    requests = workload.whole_gpu_requests()
    assert len(requests) <= 8
    worker = (WorkloadShape(64_000, 1000, 8), 200 << 30)
    assert requests[worker] == 20
    # Shares and CPU-only pods are no whole-GPU request.
    assert workload.observe(make_pod("share", vgpu=500))
    assert workload.observe(make_pod("cpu"))
    assert sum(workload.whole_gpu_requests().values()) == sum(requests.values())


def test_the_kubernetes_policy_learns_its_reserve_from_its_workload() -> None:
    assert "fgd-complete-reserve" in RESERVING_POLICIES
    profile = build_profile("fgd-complete-reserve")
    source = profile.whole_node_reserve
    assert isinstance(source, LearnedWholeNodeReserve)
    assert source.workload is profile.workload
    assert (source.last_resort, source.margin) == ("any", 2.0)
    # The same scores as fgd-complete: the reserve acts on the pick, not the ranking.
    plain = build_profile("fgd-complete")
    assert plain.whole_node_reserve is None
    assert [(s.name, w) for s, w in profile.node_scores] == [
        (s.name, w) for s, w in plain.node_scores
    ]
    # A fixed workload gives a fixed reserve, from its shares.
    fixed = TargetWorkload({WorkloadShape(64_000, 1000, 8): 0.5, WorkloadShape(4000): 0.5})
    reserve = build_profile("fgd-complete-reserve", workload=fixed).whole_node_reserve
    assert isinstance(reserve, WholeNodeReserve)
    assert [(r.gpus, r.share) for r in reserve.requests] == [(8, 0.5)]


def _core_placing_a_gpu_pod(policy: str, **kwargs: Any) -> str:
    core = SchedulingCore(build_profile(policy, topology_keys=(), **kwargs))
    for node in [*BIG, SMALL]:
        core.apply_node(ADDED, node, 0)
    # Pods the cluster has seen: 8-GPU workers, gone since.
    for i in range(40):
        core.apply_pod(ADDED, pod_obj(f"worker-{i}", gpus=8, cpu="64"), 0)
        core.apply_pod(DELETED, pod_obj(f"worker-{i}"), 0)
    core.apply_pod(ADDED, pod_obj("small", gpus=1), 0)
    run_until_idle(core)
    (node,) = [pod.node_name for pod in core.cache.pods() if pod.name == "small"]
    assert node is not None
    return node


def test_the_scheduling_core_feeds_the_reserve_the_pods_it_sees() -> None:
    """Weights that spread would start an idle big node; the reserve, learnt from the
    8-GPU workers the core has seen, keeps both big nodes whole for them."""
    spread = {"least-allocated": 1.0}
    assert _core_placing_a_gpu_pod("fgd-complete", weights=spread).startswith("big")
    assert _core_placing_a_gpu_pod("fgd-complete-reserve", weights=spread) == "small"


def test_a_relearnt_model_refuses_a_negative_growth() -> None:
    with pytest.raises(ValueError, match="growth"):
        Relearnt(OnlineWorkload(), lambda counts: len(counts), growth=-0.1)
    # Built once empty, then again on the first pod seen.
    workload = OnlineWorkload()
    sizes = Relearnt(workload, lambda counts: sum(counts.values()))
    assert sizes.current() == 0
    workload.observe(make_pod("p", gpus=1))
    assert sizes.current() == 1
