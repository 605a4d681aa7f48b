"""PodTopologySpread filter (DoNotSchedule): each case a cluster, an incoming pod and
the nodes kube-scheduler's plugin (pkg/scheduler/framework/plugins/podtopologyspread,
and the TopologySpreadConstraint API reference) lets it on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cache.pod import pod_from_api
from policies.filters.pod_topology_spread import (
    REASON_MISSING_LABEL,
    REASON_SKEW,
    PodTopologySpreadState,
    eligible_domains,
    hard_constraints,
)
from tests.podconstraints import (
    HOST,
    ZONE,
    cluster,
    labelled_pod,
    snapshot_of,
    spread,
    zoned_node,
)

FOO = {"foo": "bar"}
# The API reference's example: two zones of two nodes.
NODES = [
    zoned_node("node1", "zoneA"),
    zoned_node("node2", "zoneA"),
    zoned_node("node3", "zoneB"),
    zoned_node("node4", "zoneB"),
]


def running(name: str, node: str, labels: Mapping[str, str] = FOO, **kwargs: Any) -> dict[str, Any]:
    return labelled_pod(name, labels, node_name=node, **kwargs)


def verdicts(
    incoming: dict[str, Any],
    pods: Sequence[dict[str, Any]],
    nodes: Sequence[dict[str, Any]] = NODES,
) -> dict[str, str | None]:
    snapshot = snapshot_of(cluster(nodes, pods))
    pod = pod_from_api(incoming)
    assert not pod.problems, pod.problems
    hard = hard_constraints(pod)
    domains = eligible_domains(pod, hard, snapshot.nodes.values())
    state = PodTopologySpreadState.compute(pod, hard, domains, snapshot.pods, snapshot.nodes)
    return {name: state.filter(node) for name, node in sorted(snapshot.nodes.items())}


def allowed(
    names: set[str], reason: str = REASON_SKEW, nodes: Sequence[str] = ()
) -> dict[str, str | None]:
    every = nodes or ("node1", "node2", "node3", "node4")
    return {n: None if n in names else reason for n in every}


CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, str | None]]] = [
    (
        "the reference's example: 2 pods in zoneA, 1 in zoneB, maxSkew 1: only zoneB",
        labelled_pod("in", FOO, spread=[spread(FOO)]),
        [running("p1", "node1"), running("p2", "node2"), running("p3", "node3")],
        allowed({"node3", "node4"}),
    ),
    (
        "maxSkew 2 lets it into the fuller zone",
        labelled_pod("in", FOO, spread=[spread(FOO, max_skew=2)]),
        [running("p1", "node1"), running("p2", "node2"), running("p3", "node3")],
        allowed({"node1", "node2", "node3", "node4"}),
    ),
    (
        "a pod the selector does not match adds nothing to its domain",
        labelled_pod("in", {"foo": "baz"}, spread=[spread(FOO)]),
        [running("p1", "node1"), running("p2", "node2"), running("p3", "node3")],
        allowed({"node1", "node2", "node3", "node4"}),
    ),
    (
        "two constraints (zone and host) must both hold",
        labelled_pod("in", FOO, spread=[spread(FOO), spread(FOO, HOST)]),
        [running("p1", "node1"), running("p2", "node3")],
        allowed({"node2", "node4"}),
    ),
    (
        "terminating pods and pods of other namespaces are not counted",
        labelled_pod("in", FOO, spread=[spread(FOO)]),
        [
            running("p1", "node1", deleting=True),
            running("p2", "node2", namespace="other"),
            running("p3", "node3"),
        ],
        allowed({"node1", "node2"}),
    ),
    (
        "minDomains above the domains there are: the global minimum is 0",
        labelled_pod("in", FOO, spread=[spread(FOO, max_skew=2, minDomains=3)]),
        [
            running("p1", "node1"),
            running("p2", "node2"),
            running("p3", "node3"),
            running("p4", "node4"),
        ],
        allowed(set()),
    ),
    (
        "minDomains met: the skew counts from the real minimum",
        labelled_pod("in", FOO, spread=[spread(FOO, max_skew=1, minDomains=2)]),
        [running("p1", "node1"), running("p2", "node3")],
        allowed({"node1", "node2", "node3", "node4"}),
    ),
    (
        "matchLabelKeys: only pods of the incoming pod's revision count",
        labelled_pod(
            "in",
            {"foo": "bar", "rev": "2"},
            spread=[spread(FOO, matchLabelKeys=["rev"])],
        ),
        [
            running("old1", "node1", {"foo": "bar", "rev": "1"}),
            running("old2", "node2", {"foo": "bar", "rev": "1"}),
            running("new", "node3", {"foo": "bar", "rev": "2"}),
        ],
        allowed({"node1", "node2"}),
    ),
]


@pytest.mark.parametrize(
    ("incoming", "pods", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_filter_agrees_with_kube_scheduler(
    incoming: dict[str, Any], pods: list[dict[str, Any]], expected: dict[str, str | None]
) -> None:
    assert verdicts(incoming, pods) == expected


THREE_ZONES = [*NODES, zoned_node("node5", "zoneC", labels={"pool": "spot"})]


def test_node_affinity_policy_honor_leaves_out_domains_the_pod_cannot_use() -> None:
    # zoneC (empty) is outside the pod's nodeSelector: with Honor (the default) it is not
    # a domain, so zoneA (1) vs zoneB (0) decides; with Ignore it is, and the minimum is 0.
    pods = [running("p1", "node1"), running("p2", "node3")]
    selector = {"pool": "regular"}
    regular = [
        zoned_node(n["metadata"]["name"], n["metadata"]["labels"][ZONE], labels=selector)
        for n in NODES
    ]
    nodes = [*regular, THREE_ZONES[-1]]
    names = ("node1", "node2", "node3", "node4", "node5")
    honor = labelled_pod("in", FOO, node_selector=selector, spread=[spread(FOO)])
    assert verdicts(honor, pods, nodes) == allowed(set(names), nodes=names)
    ignore = labelled_pod(
        "in", FOO, node_selector=selector, spread=[spread(FOO, nodeAffinityPolicy="Ignore")]
    )
    assert verdicts(ignore, pods, nodes) == allowed({"node5"}, nodes=names)


def test_node_taints_policy_honor_leaves_out_untolerated_domains() -> None:
    tainted = zoned_node(
        "node5", "zoneC", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    )
    nodes = [*NODES, tainted]
    pods = [running("p1", "node1"), running("p2", "node3")]
    names = ("node1", "node2", "node3", "node4", "node5")
    # Ignore (the default): zoneC counts with 0 pods, so zones A and B are full.
    ignore = labelled_pod("in", FOO, spread=[spread(FOO)])
    assert verdicts(ignore, pods, nodes) == allowed({"node5"}, nodes=names)
    honor = labelled_pod("in", FOO, spread=[spread(FOO, nodeTaintsPolicy="Honor")])
    assert verdicts(honor, pods, nodes) == allowed(set(names), nodes=names)


def test_a_node_without_the_topology_key_is_refused_for_the_missing_label() -> None:
    nodes = [*NODES, zoned_node("bare", None)]
    result = verdicts(labelled_pod("in", FOO, spread=[spread(FOO)]), [], nodes)
    assert result["bare"] == REASON_MISSING_LABEL
    assert result["node1"] is None


def test_schedule_anyway_constraints_never_filter() -> None:
    pods = [running("p1", "node1"), running("p2", "node2")]
    result = verdicts(labelled_pod("in", FOO, spread=[spread(FOO, when="ScheduleAnyway")]), pods)
    assert result == allowed({"node1", "node2", "node3", "node4"})


def test_members_placed_in_the_plan_move_the_counts() -> None:
    snapshot = snapshot_of(cluster(NODES))
    pod = pod_from_api(labelled_pod("in", FOO, spread=[spread(FOO)]))
    hard = hard_constraints(pod)
    state = PodTopologySpreadState.compute(
        pod,
        hard,
        eligible_domains(pod, hard, snapshot.nodes.values()),
        snapshot.pods,
        snapshot.nodes,
    )
    assert state.filter(snapshot.nodes["node1"]) is None
    state.add(pod_from_api(labelled_pod("m", FOO)), snapshot.nodes["node2"])
    assert state.filter(snapshot.nodes["node1"]) == REASON_SKEW
    assert state.filter(snapshot.nodes["node3"]) is None


@pytest.mark.parametrize(
    ("constraint", "problem"),
    [
        (spread(FOO, max_skew=0), "maxSkew must be >= 1"),
        (spread(FOO, when="Sometimes"), "whenUnsatisfiable must be"),
        (spread(FOO, when="ScheduleAnyway", minDomains=2), "minDomains can only be used"),
        (spread(None, matchLabelKeys=["rev"]), "matchLabelKeys cannot be set"),
        (spread(FOO, nodeTaintsPolicy="Maybe"), "nodeTaintsPolicy must be Honor or Ignore"),
    ],
)
def test_malformed_constraints_are_refused_with_the_reason(
    constraint: dict[str, Any], problem: str
) -> None:
    pod = pod_from_api(labelled_pod("in", FOO, spread=[constraint]))
    assert any(problem in text for text in pod.problems), pod.problems


def test_two_constraints_on_one_key_and_action_are_refused_as_the_api_does() -> None:
    twice = [spread(FOO), spread({"other": "x"})]
    pod = pod_from_api(labelled_pod("in", FOO, spread=twice))
    problem = "duplicate {topology.kubernetes.io/zone, DoNotSchedule}"
    assert any(problem in text for text in pod.problems), pod.problems
