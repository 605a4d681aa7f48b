"""No placement violates a required inter-pod constraint, inside one gang included
(hypothesis). Every plan is checked by a naive oracle that loops over every pod, as the
API reference words each rule, rather than by the planner's counting code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.filters.node_affinity import NodeAffinity
from policies.filters.taint_toleration import TaintToleration
from policies.profile import build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import plan_gang
from scheduler.planner.result import Plan
from tests.podconstraints import (
    HOST,
    ZONE,
    cluster,
    labelled_pod,
    required,
    snapshot_of,
    spread,
    term,
    zoned_node,
)

APPS = ("a", "b")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    nodes = []
    for i in range(draw(st.integers(2, 7))):
        zone = draw(st.sampled_from(["z1", "z2", "z3", None]))
        nodes.append(zoned_node(f"n{i}", zone, gpus=draw(st.integers(1, 4))))
    pods: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 5))):
        node = draw(st.sampled_from(nodes))["metadata"]["name"]
        app = draw(st.sampled_from(APPS))
        affinity = None
        if draw(st.booleans()):
            key = draw(st.sampled_from([HOST, ZONE]))
            affinity = required("podAntiAffinity", term({"app": draw(st.sampled_from(APPS))}, key))
        pods.append(labelled_pod(f"run{i}", {"app": app}, node_name=node, affinity=affinity))
    size = draw(st.integers(1, 5))
    app = draw(st.sampled_from(APPS))
    sections: dict[str, Any] = {}
    kind = draw(st.sampled_from(["anti", "affinity", "both", "none"]))
    key = draw(st.sampled_from([HOST, ZONE]))
    if kind in ("anti", "both"):
        sections.update(required("podAntiAffinity", term({"app": app}, key)))
    if kind in ("affinity", "both"):
        other = draw(st.sampled_from(APPS))
        sections.update(required("podAffinity", term({"app": other}, ZONE)))
    constraints = []
    if draw(st.booleans()):
        constraints.append(
            spread(
                {"app": app},
                draw(st.sampled_from([HOST, ZONE])),
                max_skew=draw(st.integers(1, 2)),
            )
        )
    for i in range(size):
        pods.append(
            labelled_pod(
                f"g-{i}",
                {"app": app},
                gang="g",
                min_member=size,
                gpus=1,
                affinity=sections or None,
                spread=constraints,
            )
        )
    return nodes, pods, size


def _domain(node: NodeInfo, key: str) -> str | None:
    return node.labels.get(key)


def violation(
    pod: PodInfo,
    node: NodeInfo,
    others: Sequence[tuple[PodInfo, NodeInfo]],
    nodes: Sequence[NodeInfo],
) -> str | None:
    """The rule `pod` on `node` breaks with `others` running, or None (the oracle)."""
    terms = pod.pod_affinity
    if terms is not None:
        if terms.required:

            def matches_all(other: PodInfo) -> bool:
                return all(t.matches(other.namespace, other.labels, {}) for t in terms.required)

            anywhere = any(
                matches_all(o) and any(t.topology_key in n.labels for t in terms.required)
                for o, n in others
            )
            for t in terms.required:
                value = _domain(node, t.topology_key)
                if value is None:
                    return "affinity: missing key"
            satisfied = all(
                any(
                    matches_all(o) and _domain(n, t.topology_key) == _domain(node, t.topology_key)
                    for o, n in others
                )
                for t in terms.required
            )
            if not satisfied and (anywhere or not matches_all(pod)):
                return "affinity"
        for t in terms.required_anti:
            value = _domain(node, t.topology_key)
            if value is not None and any(
                t.matches(o.namespace, o.labels, {}) and _domain(n, t.topology_key) == value
                for o, n in others
            ):
                return "anti-affinity"
    for other, other_node in others:
        if other.pod_affinity is None:
            continue
        for t in other.pod_affinity.required_anti:
            value = _domain(other_node, t.topology_key)
            if (
                value is not None
                and _domain(node, t.topology_key) == value
                and t.matches(pod.namespace, pod.labels, {})
            ):
                return "existing anti-affinity"
    for c in pod.spread:
        if not c.hard:
            continue
        keys = [k.topology_key for k in pod.spread if k.hard]
        if c.topology_key not in node.labels:
            return "spread: missing key"
        eligible = [
            n
            for n in nodes
            if all(k in n.labels for k in keys)
            and NodeAffinity().filter(pod, n) is None
            and (not c.honor_taints or TaintToleration().filter(pod, n) is None)
        ]
        counts = {n.labels[c.topology_key]: 0 for n in eligible}
        for o, n in others:
            if n in eligible and o.namespace == pod.namespace and c.selector.matches(o.labels):
                counts[n.labels[c.topology_key]] += 1
        minimum = min(counts.values()) if counts else 0
        if len(counts) < c.min_domains:
            minimum = 0
        own = 1 if c.selector.matches(pod.labels) else 0
        if counts.get(node.labels[c.topology_key], 0) + own - minimum > c.max_skew:
            return "spread"
    return None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([0, 2, 128]))
def test_no_plan_breaks_a_required_constraint(
    scenario: tuple[list[dict[str, Any]], list[dict[str, Any]], int], limit: int
) -> None:
    node_objs, pod_objs, _ = scenario
    cache = cluster(node_objs, pod_objs)
    snapshot = snapshot_of(cache)
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs
    result = plan_gang(build_profile(candidate_limit=limit), gangs["default/g"], snapshot)
    if not isinstance(result, Plan):
        return
    nodes = list(snapshot.nodes.values())
    running = [
        (pod, snapshot.nodes[pod.node_name])
        for pod in cache.pods()
        if pod.node_name and pod.node_name in snapshot.nodes
    ]
    members = [(cache.pod(p.pod_uid), snapshot.nodes[p.node]) for p in result.placements]
    everyone = [(pod, node) for pod, node in running + members if pod is not None]
    for index, (pod, node) in enumerate(members):
        assert pod is not None
        others = [pair for pair in everyone if pair[0] is not pod]
        assert violation(pod, node, others, nodes) is None, (pod.name, node.name, index)
