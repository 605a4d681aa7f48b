"""Profile.preference (policies/interface.py NodePreference): the planner places a pod
on the best ranked node the preference admits, and on the best ranked node when it
admits none; in bounded and in exhaustive mode, for lone pods and gang members."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from cache.cluster import ClusterCache, EventType
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.profile import Profile, build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj

SCHED = "gang-scheduler"
EVEN = {"most-allocated": 1.0, "least-allocated": 1.0}


class Admit:
    """Admits the nodes named; records what it was asked."""

    name = "admit"

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.asked: list[tuple[str, Snapshot]] = []

    def preferred(self, pod: PodInfo, snapshot: Snapshot) -> Callable[[str], bool] | None:
        self.asked.append((pod.name, snapshot))
        return self.names.__contains__


def profile(limit: int, preference: Admit | None) -> Profile:
    """Totals tie on every node, so the rank decides (n0 first) but for the preference."""
    base = build_profile("even", weights=EVEN, candidate_limit=limit)
    ranks = {f"n{i}": i for i in range(4)}
    return dataclasses.replace(base, node_rank=ranks, preference=preference)


def plan(profile: Profile, pods: int = 1, gpus: int = 1) -> list[str]:
    cache = ClusterCache()
    for i in range(4):
        cache.apply_node(EventType.ADDED, node_obj(f"n{i}", gpus=2 if i == 2 else 8))
    if pods == 1:
        cache.apply_pod(EventType.ADDED, pod_obj("solo", gpus=gpus))
        key = "default/pod:solo"
    else:
        for i in range(pods):
            cache.apply_pod(EventType.ADDED, pod_obj(f"m{i}", gpus=gpus, gang="g", min_member=pods))
        key = "default/g"
    gang = assemble_gangs(cache.pods(), {}, SCHED).gangs[key]
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    result = Planner(profile).plan(gang, snapshot)
    assert isinstance(result, Plan)
    return sorted(placement.node for placement in result.placements)


@pytest.mark.parametrize("limit", [0, 3, 8], ids=["exhaustive", "bounded", "all"])
def test_the_best_ranked_admitted_node_wins(limit: int) -> None:
    assert plan(profile(limit, None)) == ["n0"]
    preference = Admit("n2", "n3")
    assert plan(profile(limit, preference)) == ["n2"]
    assert preference.asked and preference.asked[0][0] == "solo"


@pytest.mark.parametrize("limit", [0, 8], ids=["exhaustive", "all"])
def test_without_an_admitted_node_that_fits_the_best_ranked_wins(limit: int) -> None:
    # n2 has 2 GPUs: a 4-GPU pod does not fit there; n5 is no node.
    assert plan(profile(limit, Admit("n2", "n5")), gpus=4) == ["n0"]


@pytest.mark.parametrize("limit", [0, 8], ids=["exhaustive", "all"])
def test_gang_members_fill_the_admitted_node_then_fall_back(limit: int) -> None:
    # Three 3-GPU members, too many for one host: two fit the admitted n3 (the second
    # on a node the gang has already changed), the third goes to the best ranked node.
    assert plan(profile(limit, Admit("n3")), pods=3, gpus=3) == ["n0", "n3", "n3"]
