"""The planner with inter-pod affinity and topology spread: a gang is judged against the
running pods and against its own members placed in the same plan, all or nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from cache.cluster import ClusterCache
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner, plan_gang
from scheduler.planner.result import Plan, Unschedulable
from tests.podconstraints import (
    HOST,
    ZONE,
    cluster,
    labelled_pod,
    preferred,
    required,
    snapshot_of,
    spread,
    term,
    zoned_node,
)

WORKER = {"app": "train-7", "role": "worker"}
ONE_PER_NODE = required("podAntiAffinity", term(WORKER, HOST))


def gang(
    count: int,
    labels: Mapping[str, str] = WORKER,
    name: str = "g",
    **kwargs: Any,
) -> list[dict[str, Any]]:
    return [
        labelled_pod(f"{name}-{i}", labels, gang=name, min_member=count, **kwargs)
        for i in range(count)
    ]


def plan_for(
    nodes: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
    key: str = "default/g",
    **profile: Any,
) -> tuple[Plan | Unschedulable, ClusterCache]:
    cache = cluster(nodes, pods)
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs
    return plan_gang(build_profile(**profile), gangs[key], snapshot_of(cache)), cache


def placed_nodes(result: Plan) -> list[str]:
    return [p.node for p in result.placements]


def zones(nodes: Sequence[dict[str, Any]]) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE, "") for n in nodes}


def test_one_worker_per_node_puts_eight_workers_on_eight_nodes() -> None:
    nodes = [zoned_node(f"n{i}", "z1", gpus=8) for i in range(10)]
    result, _ = plan_for(nodes, gang(8, gpus=1, affinity=ONE_PER_NODE))
    assert isinstance(result, Plan)
    assert len(set(placed_nodes(result))) == 8


def test_one_worker_per_node_on_seven_nodes_places_none_and_says_why() -> None:
    nodes = [zoned_node(f"n{i}", "z1", gpus=8) for i in range(7)]
    result, _ = plan_for(nodes, gang(8, gpus=1, affinity=ONE_PER_NODE))
    assert isinstance(result, Unschedulable)
    assert result.placeable == 7
    assert "0/7 nodes are available: 7 node(s) didn't match pod anti-affinity rules." in (
        result.message
    )
    assert "gang default/g: 7/8 members placeable" in result.message


def test_candidate_bound_does_not_hide_nodes_the_gang_needs() -> None:
    # 200 nodes, the candidate bound at 4: anti-affinity needs 8 distinct hosts.
    nodes = [zoned_node(f"n{i:03d}", "z1", gpus=8) for i in range(200)]
    result, _ = plan_for(nodes, gang(8, gpus=1, affinity=ONE_PER_NODE), candidate_limit=4)
    assert isinstance(result, Plan) and len(set(placed_nodes(result))) == 8


def test_zone_spread_of_six_over_three_zones_is_two_two_two() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb", "zc") for i in range(2)]
    result, _ = plan_for(nodes, gang(6, gpus=1, spread=[spread(WORKER)]))
    assert isinstance(result, Plan)
    assert sorted(Counter(zones(nodes)[n] for n in placed_nodes(result)).values()) == [2, 2, 2]


def test_zone_spread_counts_running_pods_too() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb", "zc") for i in range(2)]
    running = [labelled_pod(f"old-{i}", WORKER, node_name="za0") for i in range(2)]
    result, _ = plan_for(nodes, [*running, *gang(4, gpus=1, spread=[spread(WORKER)])])
    assert isinstance(result, Plan)
    counts = Counter(zones(nodes)[n] for n in placed_nodes(result))
    assert counts == {"zb": 2, "zc": 2}


def test_zone_spread_that_cannot_hold_places_none_with_kube_scheduler_reasons() -> None:
    # zc has room for one member only: 2/2/1 plus a sixth breaks maxSkew 1 everywhere.
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb") for i in range(2)]
    nodes.append(zoned_node("zc0", "zc", gpus=1))
    result, _ = plan_for(nodes, gang(6, gpus=1, spread=[spread(WORKER)]))
    assert isinstance(result, Unschedulable)
    assert "node(s) didn't match pod topology spread constraints" in result.message
    assert "5/6 members placeable" in result.message


def test_self_affinity_keeps_the_whole_gang_in_one_zone() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=2) for z in ("za", "zb") for i in range(3)]
    affinity = required("podAffinity", term(WORKER, ZONE))
    result, _ = plan_for(nodes, gang(6, gpus=1, affinity=affinity))
    assert isinstance(result, Plan)
    assert len({zones(nodes)[n] for n in placed_nodes(result)}) == 1


def test_self_affinity_larger_than_any_zone_places_none() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=2) for z in ("za", "zb") for i in range(2)]
    affinity = required("podAffinity", term(WORKER, ZONE))
    result, _ = plan_for(nodes, gang(5, gpus=1, affinity=affinity))
    assert isinstance(result, Unschedulable)
    assert "node(s) didn't match pod affinity rules" in result.message


def test_affinity_to_running_pods_follows_them() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb") for i in range(2)]
    cache_pod = labelled_pod("cache", {"app": "dataset-cache"}, node_name="zb1")
    affinity = required("podAffinity", term({"app": "dataset-cache"}, ZONE))
    result, _ = plan_for(nodes, [cache_pod, *gang(4, gpus=1, affinity=affinity)])
    assert isinstance(result, Plan)
    assert {zones(nodes)[n] for n in placed_nodes(result)} == {"zb"}


def test_a_running_pods_anti_affinity_keeps_the_gang_out() -> None:
    nodes = [zoned_node(f"n{i}", "z1", gpus=8) for i in range(3)]
    guard = labelled_pod(
        "noisy",
        {"app": "noisy"},
        node_name="n0",
        affinity=required("podAntiAffinity", term(WORKER)),
    )
    result, _ = plan_for(nodes, [guard, *gang(2, gpus=1)])
    assert isinstance(result, Plan)
    assert "n0" not in placed_nodes(result)


def test_members_without_terms_are_placed_before_those_whose_terms_count_them() -> None:
    # The member with the spread constraint must see where its unconstrained fellow
    # goes: judged first, it would take za0 and the other would follow it there
    # (bin-packing), skewing the zones 2/0.
    nodes = [zoned_node("za0", "za", gpus=8), zoned_node("zb0", "zb", gpus=8)]
    constrained = labelled_pod(
        "g-a", WORKER, gang="g", min_member=2, gpus=1, spread=[spread(WORKER)]
    )
    plain = labelled_pod("g-b", WORKER, gang="g", min_member=2, gpus=1)
    result, _ = plan_for(nodes, [constrained, plain])
    assert isinstance(result, Plan)
    assert len(set(placed_nodes(result))) == 2


def test_parameter_server_with_affinity_to_its_workers_is_placed_after_them() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb") for i in range(2)]
    workers = gang(3, gpus=2)
    ps = labelled_pod(
        "g-ps",
        {"app": "train-7", "role": "ps"},
        gang="g",
        min_member=4,
        cpu="8",
        gpus=4,
        affinity=required("podAffinity", term(WORKER, HOST)),
    )
    for worker in workers:
        worker["metadata"]["annotations"]["gang-scheduler.io/min-member"] = "4"
    result, _ = plan_for(nodes, [*workers, ps])
    assert isinstance(result, Plan) and len(result.placements) == 4
    by_pod = {p.pod_uid: p.node for p in result.placements}
    worker_nodes = {by_pod[f"uid-default-g-{i}"] for i in range(3)}
    assert by_pod["uid-default-g-ps"] in worker_nodes


def test_exhaustive_rankings_stay_valid_across_constrained_gangs() -> None:
    # Rankings kept between plans hold node-local answers only; the inter-pod checks are
    # applied on top, so a second gang sees the first one's pods once they run.
    nodes = [zoned_node(f"n{i}", "z1", gpus=8) for i in range(4)]
    cache = cluster(nodes, gang(2, name="g", gpus=1, affinity=ONE_PER_NODE))
    planner = Planner(build_profile(candidate_limit=0))
    snapshot = snapshot_of(cache)
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs
    first = planner.plan(gangs["default/g"], snapshot)
    assert isinstance(first, Plan)
    cache.assume(first.placements, now=0)
    for obj in gang(2, name="h", gpus=1, affinity=ONE_PER_NODE):
        cache.apply_pod("ADDED", obj)
    cache.update_snapshot(snapshot)
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs
    second = planner.plan(gangs["default/h"], snapshot)
    assert isinstance(second, Plan)
    assert not set(placed_nodes(first)) & set(placed_nodes(second))


def test_failed_scheduling_message_counts_each_node_under_its_first_failing_constraint() -> None:
    # Three zones of four nodes. za: one matching pod on each node (4), zb and zc: five
    # each. maxSkew 1: zb and zc are too full (8 nodes); za's nodes each run a pod the
    # one-per-node anti-affinity refuses (4 nodes).
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb", "zc") for i in range(4)]
    running = [labelled_pod(f"a{i}", WORKER, node_name=f"za{i}") for i in range(4)]
    running += [labelled_pod(f"b{i}", WORKER, node_name=f"zb{i % 4}") for i in range(5)]
    running += [labelled_pod(f"c{i}", WORKER, node_name=f"zc{i % 4}") for i in range(5)]
    pending = gang(1, gpus=1, affinity=ONE_PER_NODE, spread=[spread(WORKER)])
    result, _ = plan_for(nodes, [*running, *pending])
    assert isinstance(result, Unschedulable)
    assert result.message.startswith(
        "0/12 nodes are available: 8 node(s) didn't match pod topology spread constraints, "
        "4 node(s) didn't match pod anti-affinity rules."
    )


def test_preferred_anti_affinity_spreads_a_gang_that_bin_packing_would_stack() -> None:
    nodes = [zoned_node(f"n{i}", "z1", gpus=8) for i in range(2)]
    stacked, _ = plan_for(nodes, gang(2, gpus=1))
    assert isinstance(stacked, Plan) and len(set(placed_nodes(stacked))) == 1
    apart = preferred("podAntiAffinity", (100, term(WORKER, HOST)))
    result, _ = plan_for(nodes, gang(2, gpus=1, affinity=apart))
    assert isinstance(result, Plan) and len(set(placed_nodes(result))) == 2


def test_preferred_affinity_draws_the_gang_to_a_running_pods_zone() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb") for i in range(2)]
    cache_pod = labelled_pod("cache", {"app": "dataset-cache"}, node_name="zb1")
    near = preferred("podAffinity", (50, term({"app": "dataset-cache"}, ZONE)))
    result, _ = plan_for(nodes, [cache_pod, *gang(3, gpus=1, affinity=near)])
    assert isinstance(result, Plan)
    assert {zones(nodes)[n] for n in placed_nodes(result)} == {"zb"}


def test_schedule_anyway_spread_evens_out_a_gang_over_zones() -> None:
    nodes = [zoned_node(f"{z}{i}", z, gpus=8) for z in ("za", "zb") for i in range(2)]
    soft = [spread(WORKER, when="ScheduleAnyway")]
    result, _ = plan_for(nodes, gang(4, gpus=1, spread=soft), topology_keys=[HOST])
    assert isinstance(result, Plan)
    assert sorted(Counter(zones(nodes)[n] for n in placed_nodes(result)).values()) == [2, 2]


def test_inter_pod_score_weights_zero_turn_the_scores_off() -> None:
    nodes = [zoned_node(f"n{i}", "z1", gpus=8) for i in range(2)]
    apart = preferred("podAntiAffinity", (100, term(WORKER, HOST)))
    result, _ = plan_for(nodes, gang(2, gpus=1, affinity=apart), pod_affinity_weight=0)
    assert isinstance(result, Plan) and len(set(placed_nodes(result))) == 1


def test_a_gang_waiting_on_pod_affinity_is_retried_when_such_a_pod_starts() -> None:
    core = SchedulingCore(build_profile())
    for node in (zoned_node("za0", "za", gpus=4), zoned_node("zb0", "zb", gpus=4)):
        core.apply_node("ADDED", node, 0)
    near = required("podAffinity", term({"app": "dataset-cache"}, ZONE))
    for pod in gang(2, gpus=1, affinity=near):
        core.apply_pod("ADDED", pod, 0)
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert core.queue.state("default/g") == "unschedulable"
    # A pod of another gang being bound does not concern it...
    core.apply_pod("ADDED", labelled_pod("other", {"app": "web"}, node_name="za0"), 1)
    assert core.queue.state("default/g") == "unschedulable"
    # ...the pod its affinity names does.
    core.apply_pod("ADDED", labelled_pod("cache", {"app": "dataset-cache"}, node_name="zb0"), 2)
    assert core.queue.state("default/g") != "unschedulable"
    retried = core.schedule_next(100)
    assert retried is not None and isinstance(retried.result, Plan)
    assert {p.node for p in retried.result.placements} == {"zb0"}
