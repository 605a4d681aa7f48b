"""The per-model reserve for model-pinned pods (policies/model_reserve.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import ClusterCache, EventType
from cache.gpu import PRODUCT_LABEL
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.model_reserve import (
    LearnedModelReserve,
    ModelReserve,
    PinnedDemand,
    after_taking,
    pinned,
    pinned_room,
)
from policies.profile import build_profile
from policies.scores.fill_fragmentation import shape_groups
from policies.scores.fragmentation import OnlineWorkload, TargetWorkload, WorkloadShape
from tests.factories import make_pod, node_obj, pod_obj


def on_models(*models: str) -> dict[str, Any]:
    """Required node affinity to GPU models, as the openb gpu_spec column makes it."""
    term = {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": models}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}  # fmt: skip


def pinned_pod(name: str, *models: str, cpu: str = "4", gpus: int = 1, vgpu: int = 0) -> PodInfo:
    return make_pod(name, cpu=cpu, gpus=gpus, vgpu=vgpu, affinity=on_models(*models))


def cluster(nodes: dict[str, tuple[str, int, str]]) -> tuple[ClusterCache, Snapshot]:
    """name -> (model, GPUs, CPU cores)."""
    cache = ClusterCache()
    for name, (model, gpus, cpu) in nodes.items():
        cache.apply_node(EventType.ADDED, node_obj(name, gpus=gpus, cpu=cpu, model=model))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    return cache, snapshot


def run_pod(cache: ClusterCache, snapshot: Snapshot, name: str, node: str, **kwargs: Any) -> None:
    cache.apply_pod(EventType.ADDED, pod_obj(name, node_name=node, phase="Running", **kwargs))
    cache.update_snapshot(snapshot)


def test_pinned_demand_splits_a_pod_over_its_models_by_their_gpus() -> None:
    history = [
        pinned_pod("a", "P100", cpu="6"),
        pinned_pod("b", "P100", "V100", cpu="4", gpus=2),
        make_pod("free", cpu="8", gpus=1),
        make_pod("cpu-only", cpu="32"),
    ]
    demand = PinnedDemand.from_pods(history, {"P100": 10, "V100": 30})
    # GPU milli of all GPU pods: 1000 + 2000 + 1000; "b" is split 1:3.
    assert demand.gpu_fraction == pytest.approx({"P100": 1500 / 4000, "V100": 1500 / 4000})
    assert demand.cpu_fraction == pytest.approx({"P100": 7000 / 4000, "V100": 3000 / 4000})
    assert pinned(history[0]) and not pinned(history[2]) and not pinned(history[3])
    # A model the cluster lacks takes nothing; a workload without GPU pods has no demand.
    assert PinnedDemand.from_pods(history, {"V100": 4}).gpu_fraction == pytest.approx(
        {"V100": 2000 / 4000}
    )
    assert PinnedDemand.from_pods([history[3]], {"V100": 4}).gpu_fraction == {}


def test_available_is_free_room_beyond_what_pinned_pods_are_still_expected_to_ask() -> None:
    # 8 GPUs in all; pinned pods ask a quarter of the workload's GPU milli, all on P100.
    cache, snapshot = cluster({"p": ("P100", 2, "16"), "g": ("G2", 6, "96")})
    history = (pinned_pod("x", "P100", cpu="8"), *(make_pod(f"u{i}", gpus=1) for i in range(3)))
    reserve = ModelReserve.from_pods(history, horizon=1.0)
    # Reserve: 1/4 x 8 GPUs = 2000 milli, CPU 8000 x 8 = 16000 milli.
    assert reserve.available(snapshot) == {"P100": (0.0, 0.0)}
    run_pod(cache, snapshot, "pinned-1", "p", cpu="8", gpus=1, affinity=on_models("P100"))
    # The pinned pod took 1000 of the free GPU milli and 1000 off what is left to reserve.
    assert reserve.available(snapshot) == {"P100": (0.0, 0.0)}
    run_pod(cache, snapshot, "free-1", "p", cpu="2", gpus=1)
    assert reserve.available(snapshot) == {"P100": (-1000.0, -2000.0)}
    # Caught up from the change log, it agrees with a ledger built from scratch.
    fresh = ModelReserve.from_pods(history, horizon=1.0)
    assert reserve.available(snapshot) == fresh.available(snapshot)


def test_unpinned_pods_are_steered_off_a_closed_model_and_pinned_pods_are_not() -> None:
    _, snapshot = cluster({"p1": ("P100", 2, "16"), "p2": ("P100", 2, "16"), "g": ("G2", 8, "96")})
    history = (
        *(pinned_pod(f"x{i}", "P100", cpu="8") for i in range(4)),
        *(make_pod(f"u{i}", cpu="8", gpus=1) for i in range(8)),
    )
    reserve = ModelReserve.from_pods(history, horizon=1.0, tolerance=0.0)
    # Pinned pods ask 4000 of the 12000 milli of the workload: 4000 of 12 GPUs reserved
    # on P100, which has exactly that free.
    free_pod = make_pod("free", cpu="8", gpus=1)
    admits = reserve.preferred(free_pod, snapshot)
    assert admits is not None
    assert not admits("p1") and not admits("p2") and admits("g")
    assert reserve.preferred(pinned_pod("pinned", "P100", cpu="8"), snapshot) is None
    # A CPU-only pod asking no more CPU than P100 has beyond its reserve is not steered.
    assert reserve.preferred(make_pod("c", cpu="0"), snapshot) is None
    # With a horizon of 0 nothing is reserved: no model is ever closed.
    assert ModelReserve.from_pods(history, horizon=0.0).preferred(free_pod, snapshot) is None
    # A workload without pinned pods never steers.
    assert ModelReserve.from_pods(history[4:]).preferred(free_pod, snapshot) is None


def test_a_closed_models_node_admits_what_its_pinned_pods_could_not_use() -> None:
    cache, snapshot = cluster({"v": ("V100", 4, "32"), "g": ("G2", 8, "96")})
    history = (
        *(pinned_pod(f"x{i}", "V100", cpu="11") for i in range(8)),
        *(make_pod(f"u{i}", cpu="3", gpus=1) for i in range(4)),
    )
    reserve = ModelReserve.from_pods(history, horizon=1.0, tolerance=0.35)
    assert reserve.available(snapshot)["V100"][0] < 1000  # V100 is closed to GPU pods
    # 32 cores hold two 11-core pinned pods, so two of the four GPUs are beyond their
    # reach: a 3-core pod taking one costs them nothing, an 11-core pod one copy.
    light, heavy = make_pod("light", cpu="3", gpus=1), make_pod("heavy", cpu="11", gpus=1)
    admits_light, admits_heavy = (
        reserve.preferred(light, snapshot),
        reserve.preferred(heavy, snapshot),
    )
    assert admits_light is not None and admits_heavy is not None
    assert admits_light("v") and not admits_heavy("v")
    assert admits_light("g") and admits_heavy("g")
    assert reserve.pinned_loss(light, snapshot.nodes["v"], "V100") == 0.0
    assert reserve.pinned_loss(heavy, snapshot.nodes["v"], "V100") == 1000.0
    # Once two pinned pods run there, the 10 cores left beside 2 free GPUs are of no
    # use to them: any pod may have them.
    for i in range(2):
        run_pod(cache, snapshot, f"x{i}", "v", cpu="11", gpus=1, affinity=on_models("V100"))
    admits_heavy = reserve.preferred(make_pod("ten", cpu="10", gpus=1), snapshot)
    assert admits_heavy is not None and admits_heavy("v")


def test_pinned_room_counts_the_copies_a_node_can_still_take() -> None:
    workload = TargetWorkload(
        {WorkloadShape(11_000, 1000, 1): 1.0, WorkloadShape(3_000, 500, 1): 1.0}
    )
    groups = shape_groups(workload, "V100")
    # Two free GPUs: 11-core copies limited to 1 by 12 cores, 500-milli copies to 4.
    assert pinned_room((1000, 1000), 12_000, groups) == pytest.approx(0.5 * 1000 + 0.5 * 2000)
    assert pinned_room((0, 0), 12_000, groups) == 0.0
    assert after_taking((1000, 600, 300), make_pod("s", cpu="1", vgpu=250)) == (1000, 600, 50)
    assert after_taking((300, 1000, 1000), make_pod("w", cpu="1", gpus=1)) == (300, 0, 1000)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="horizon"):
        ModelReserve.from_pods((), horizon=-1.0)
    with pytest.raises(ValueError, match="tolerance"):
        ModelReserve.from_pods((), tolerance=float("nan"))


def test_learnt_from_the_pods_seen_it_steers_as_the_same_history_does() -> None:
    _, snapshot = cluster({"p1": ("P100", 2, "16"), "p2": ("P100", 2, "16"), "g": ("G2", 8, "96")})
    history = (
        *(pinned_pod(f"x{i}", "P100", cpu="8") for i in range(4)),
        *(make_pod(f"u{i}", cpu="8", gpus=1) for i in range(8)),
    )
    workload = OnlineWorkload()
    learnt = LearnedModelReserve(workload, horizon=1.0, tolerance=0.0)
    free_pod = make_pod("free", cpu="8", gpus=1)
    assert learnt.preferred(free_pod, snapshot) is None  # nothing seen: nothing steered
    for pod in history:
        workload.observe(pod)
    admits = learnt.preferred(free_pod, snapshot)
    fixed = ModelReserve.from_pods(history, horizon=1.0, tolerance=0.0).preferred(
        free_pod, snapshot
    )
    assert admits is not None and fixed is not None
    assert [admits(n) for n in ("p1", "p2", "g")] == [fixed(n) for n in ("p1", "p2", "g")]
    assert [admits(n) for n in ("p1", "p2", "g")] == [False, False, True]
    # Rebuilt as the pods seen grow: once unpinned pods dominate, P100 opens again.
    for i in range(200):
        workload.observe(make_pod(f"more{i}", cpu="8", gpus=1))
    assert learnt.preferred(free_pod, snapshot) is None


def test_the_kubernetes_reserving_policy_learns_a_model_reserve_too() -> None:
    profile = build_profile("fgd-complete-reserve")
    assert isinstance(profile.preference, LearnedModelReserve)
    assert profile.preference.workload is profile.workload
    assert build_profile("fgd-complete").preference is None
    fixed = TargetWorkload({WorkloadShape(8000, 1000, 1, frozenset({"P100"})): 1.0})
    preference = build_profile("fgd-complete-reserve", workload=fixed).preference
    assert isinstance(preference, ModelReserve)
    assert preference.workload == fixed.shares
