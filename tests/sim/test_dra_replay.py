"""The openb replay through DRA devices (`gang-scheduler simulate --dra`,
scheduler/sim/dra.py): the same pods on the same nodes and the same GPUs as the
annotation model, under the packing policies (FGD, share completion, fill fragmentation,
the whole-node reserve), and no shared GPU ever over-committed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from functools import cache, partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.dra.gpu_shares import SHARE_CAPACITY
from cache.pod import PodInfo, pod_from_api
from scheduler.cycle.core import SchedulingCore
from scheduler.sim.openb import (
    NODE_FILE,
    TRACES,
    OpenbPod,
    arrival_order,
    bundled_file,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.profiles import BEST_POLICY, openb_profile
from scheduler.sim.replay import OpenbResult, replay_openb

# Where each placed pod went: pod name -> (node, ((GPU index, milli), ...)).
Placed = dict[str, tuple[str, tuple[tuple[int, int], ...]]]


def annotation_placements(core: SchedulingCore) -> Placed:
    placed: Placed = {}
    for pod in core.cache.pods():
        shares = core.cache.charged_shares(pod.uid) or ()
        placed[pod.name] = (pod.node_name, tuple(sorted(shares)))
    return placed


def dra_placements(core: SchedulingCore) -> Placed:
    """The same read off the claims' allocations (device `gpu-<i>` is GPU i)."""
    shares: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for claim in core.dra.claims.values():
        assert claim.allocation is not None, f"claim {claim.key} left unallocated"
        for result in claim.allocation.results:
            milli = dict(result.consumed)[SHARE_CAPACITY]
            pod = claim.name.removesuffix("-gpu")
            shares[pod].append((int(result.device.removeprefix("gpu-")), int(milli)))
    return {
        pod.name: (pod.node_name, tuple(sorted(shares.get(pod.name, ()))))
        for pod in core.cache.pods()
    }


def over_committed(core: SchedulingCore) -> list[str]:
    """Shared GPUs whose allocated shares sum past their capacity, or that a share and
    a whole allocation both take."""
    consumed: dict[Any, Fraction] = defaultdict(Fraction)
    whole: set[Any] = set()
    for claim in core.dra.claims.values():
        if claim.allocation is None:
            continue
        for result in claim.allocation.results:
            if result.share_id:
                consumed[result.device_id] += dict(result.consumed).get(SHARE_CAPACITY, 0)
            else:
                whole.add(result.device_id)
    wrong = [str(d) for d, amount in consumed.items() if amount > 1000]
    return wrong + [str(d) for d in whole if d in consumed]


def replay_both(
    nodes: Sequence[dict[str, Any]],
    order: Sequence[OpenbPod],
    policy: str,
    history: list[PodInfo],
    seed: int,
) -> tuple[OpenbResult, Placed, OpenbResult, Placed, list[str]]:
    size = cluster_size(nodes)
    ends: dict[str, SchedulingCore] = {}

    def run(dra: bool) -> OpenbResult:
        profile = openb_profile(
            policy,
            seed=seed,
            max_cpu_milli=size.max_cpu_milli,
            max_gpu_milli=size.max_gpu_milli,
            history=history,
            cluster_cpu_milli=size.total_cpu_milli,
            cluster_gpu_milli=size.total_gpu_milli,
        )
        key = "dra" if dra else "annotation"
        return replay_openb(nodes, order, profile, dra=dra, finished=partial(ends.__setitem__, key))

    annotation = run(dra=False)
    dra = run(dra=True)
    return (
        annotation,
        annotation_placements(ends["annotation"]),
        dra,
        dra_placements(ends["dra"]),
        over_committed(ends["dra"]),
    )


@cache
def trace_slice() -> tuple[list[dict[str, Any]], list[OpenbPod], list[PodInfo]]:
    """Every 15th node of the openb node list (81 nodes, every GPU model), and the
    default trace's arrival order (seed 42) up to 130% of their GPUs."""
    nodes = load_nodes(bundled_file(NODE_FILE))[::15]
    pods = load_pods(bundled_file(TRACES["default"]))
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    order = arrival_order(
        pods, cluster_size(load_nodes(bundled_file(NODE_FILE))).total_gpu_milli, 42
    )
    limit = cluster_size(nodes).total_gpu_milli * 13 // 10
    taken, arrived = [], 0
    for pod in order:
        milli = pod.num_gpu * (min(pod.gpu_milli, 1000) if pod.num_gpu == 1 else 1000)
        if arrived + milli > limit:
            break
        arrived += milli
        taken.append(pod)
    return nodes, taken, history


@pytest.mark.parametrize("policy", ["bestfit", "fgd", BEST_POLICY])
def test_a_slice_of_the_trace_places_the_same_pods_through_dra(policy: str) -> None:
    """Exact, not within a tolerance: the shared GPUs are shown to the same filters,
    chooser and scores as device-plugin GPUs, in the same order, and each claim gets the
    devices the chosen shares name (docs/dra.md, "Packing DRA shares")."""
    nodes, order, history = trace_slice()
    annotation, by_annotation, dra, by_dra, wrong = replay_both(nodes, order, policy, history, 42)
    assert annotation.failed_pods > 0  # the slice runs the cluster full
    assert by_dra == by_annotation
    assert dra.failed_pods == annotation.failed_pods
    assert dra.readings.allocated == annotation.readings.allocated
    assert dra.allocation_pct == annotation.allocation_pct
    assert wrong == []


MODELS = ("A100", "T4", "V100")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[OpenbPod]]:
    count = draw(st.integers(2, 6))
    rows = "".join(
        f"n{i},{draw(st.sampled_from([16000, 32000, 64000]))},65536,"
        f"{draw(st.sampled_from([1, 2, 4, 8]))},{draw(st.sampled_from(MODELS))}\n"
        for i in range(count)
    )
    nodes = load_nodes("sn,cpu_milli,memory_mib,gpu,model\n" + rows)
    shapes = st.sampled_from(
        [(0, 0), (1, 100), (1, 250), (1, 500), (1, 700), (1, 1000), (2, 1000), (4, 1000)]
    )
    pods = []
    for i in range(draw(st.integers(5, 40))):
        num_gpu, milli = draw(shapes)
        spec = draw(st.none() | st.frozensets(st.sampled_from(MODELS), min_size=1, max_size=2))
        cpu = draw(st.sampled_from([1000, 4000, 8000]))
        pods.append(OpenbPod(f"p{i}", cpu, 1024, num_gpu, milli, spec if num_gpu else None))
    return nodes, pods


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["bestfit", "fgd", BEST_POLICY]), st.integers(0, 3))
def test_dra_replays_place_as_the_annotation_model_and_never_over_commit(
    cluster: tuple[list[dict[str, Any]], list[OpenbPod]], policy: str, seed: int
) -> None:
    nodes, pods = cluster
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    order = arrival_order(pods, cluster_size(nodes).total_gpu_milli, seed, 1.5)
    annotation, by_annotation, dra, by_dra, wrong = replay_both(nodes, order, policy, history, seed)
    assert wrong == []
    assert by_dra == by_annotation
    assert dra.readings.allocated == annotation.readings.allocated
