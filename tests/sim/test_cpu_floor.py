"""The floor of issue 32: on a CPU-heavy trace, the simulator's default policy
(fgd-complete-reserve, BEST_POLICY) allocates no less GPU than FGD beyond noise.

The member: the generated cpu25 (a quarter of the pods CPU-only, as the paper's
openb_pod_list_cpu250), cut to a quarter so that a replay takes about a second: every
4th node of the openb list and every 4th pod of the member, from an offset. Two cuts,
two seeds each. Before issue 32 the policy was below FGD on both, by 0.70 points (cut 2,
CPU pressure 1.044) and 0.49 (cut 3, pressure 0.978) at 130% load, on both seeds.

The Kubernetes profile of the same name (policies/profile.py, learnt online) is held
to the same floor against the Kubernetes `fgd` policy on cut 2: before issue 32 it was
1.2 points below it at both loads (91.46 / 91.72 against 92.66 / 92.91).

The noise allowed: FGD's own per-seed spread that its random tie-break rank makes
(README of the openb data: up to 0.4 points a seed), over two seeds: 0.3 points.
Allocation figures only, never timings."""

from __future__ import annotations

from statistics import fmean

import pytest

from cache.pod import pod_from_api
from policies.profile import build_profile
from scheduler.sim.families import generate
from scheduler.sim.openb import (
    NODE_FILE,
    TRACES,
    arrival_order,
    bundled_file,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.profiles import BEST_POLICY, openb_profile
from scheduler.sim.replay import replay_openb

NOISE = 0.3
SEEDS = (42, 43)


def allocation(cut: int, policy: str) -> dict[int, float]:
    """Mean GPU allocation % over SEEDS at 100% and 130% arrived load."""
    nodes = load_nodes(bundled_file(NODE_FILE))[cut::4]
    pods = generate("cpu25", load_pods(bundled_file(TRACES["default"])))[cut::4]
    size = cluster_size(nodes)
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    readings: dict[int, list[float]] = {100: [], 130: []}
    for seed in SEEDS:
        profile = openb_profile(
            policy,
            seed=seed,
            max_cpu_milli=size.max_cpu_milli,
            max_gpu_milli=size.max_gpu_milli,
            history=history,
            cluster_cpu_milli=size.total_cpu_milli,
            cluster_gpu_milli=size.total_gpu_milli,
        )
        result = replay_openb(nodes, arrival_order(pods, size.total_gpu_milli, seed), profile)
        for load, values in readings.items():
            value = result.allocation_pct[load]
            assert value is not None
            values.append(value)
    return {load: fmean(values) for load, values in readings.items()}


@pytest.mark.parametrize("cut", [2, 3])
def test_the_default_policy_is_not_below_fgd_on_a_cpu_heavy_member(cut: int) -> None:
    fgd = allocation(cut, "fgd")
    ours = allocation(cut, BEST_POLICY)
    for load in (100, 130):
        assert ours[load] >= fgd[load] - NOISE, (load, ours[load], fgd[load])


def learnt_allocation(cut: int, policy: str) -> dict[int, float]:
    """As `allocation`, for the Kubernetes profile `policy` (online workload, candidate
    walk ties, as `gang-scheduler run` builds it without a network topology)."""
    nodes = load_nodes(bundled_file(NODE_FILE))[cut::4]
    pods = generate("cpu25", load_pods(bundled_file(TRACES["default"])))[cut::4]
    total = cluster_size(nodes).total_gpu_milli
    readings: dict[int, list[float]] = {100: [], 130: []}
    for seed in SEEDS:
        profile = build_profile(policy, topology_keys=(), network_weight=0)
        result = replay_openb(nodes, arrival_order(pods, total, seed), profile)
        for load, values in readings.items():
            value = result.allocation_pct[load]
            assert value is not None
            values.append(value)
    return {load: fmean(values) for load, values in readings.items()}


def test_the_kubernetes_profile_is_not_below_fgd_on_a_cpu_heavy_member() -> None:
    fgd = learnt_allocation(2, "fgd")
    ours = learnt_allocation(2, "fgd-complete-reserve")
    for load in (100, 130):
        assert ours[load] >= fgd[load] - NOISE, (load, ours[load], fgd[load])
