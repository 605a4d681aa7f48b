"""InterPodAffinity and PodTopologySpread scoring: normalized 0..100 scores of the
nodes compared, as kube-scheduler's Score + NormalizeScore give them (scoring.go of
both plugins), for small clusters worked by hand."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cache.pod import pod_from_api
from policies.scores.inter_pod_affinity import PreferredAffinityState, normalize
from policies.scores.pod_topology_spread import SoftSpreadState
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

NODES = [zoned_node("a1", "za"), zoned_node("a2", "za"), zoned_node("b1", "zb")]
DB = {"app": "db"}


def running(name: str, node: str, labels: Mapping[str, str], **kwargs: Any) -> dict[str, Any]:
    return labelled_pod(name, labels, node_name=node, **kwargs)


def affinity_scores(incoming: dict[str, Any], pods: Sequence[dict[str, Any]]) -> dict[str, float]:
    snapshot = snapshot_of(cluster(NODES, pods))
    state = PreferredAffinityState.compute(pod_from_api(incoming), snapshot.pods, snapshot.nodes)
    names = sorted(snapshot.nodes)
    scores = normalize([state.raw(snapshot.nodes[n]) for n in names])
    return dict(zip(names, scores, strict=True))


AFFINITY_CASES = [
    (
        "preferred affinity: the zone of the selected pod scores 100",
        labelled_pod("in", affinity=preferred("podAffinity", (5, term(DB, ZONE)))),
        [running("db", "a1", DB)],
        {"a1": 100.0, "a2": 100.0, "b1": 0.0},
    ),
    (
        "preferred anti-affinity: the selected pod's zone scores 0",
        labelled_pod("in", affinity=preferred("podAntiAffinity", (5, term(DB, ZONE)))),
        [running("db", "a1", DB)],
        {"a1": 0.0, "a2": 0.0, "b1": 100.0},
    ),
    (
        "weights add per pair: affinity 8 (zone) and anti-affinity 4 (host) give 4 / 8 / 0",
        labelled_pod(
            "in",
            affinity={
                **preferred("podAffinity", (8, term(DB, ZONE))),
                **preferred("podAntiAffinity", (4, term(DB, HOST))),
            },
        ),
        [running("db", "a1", DB)],
        {"a1": 50.0, "a2": 100.0, "b1": 0.0},
    ),
    (
        "symmetry: a running pod's preferred affinity to the newcomer draws it to its zone",
        labelled_pod("in", DB),
        [
            running(
                "web", "b1", {"app": "web"}, affinity=preferred("podAffinity", (10, term(DB, ZONE)))
            )
        ],
        {"a1": 0.0, "a2": 0.0, "b1": 100.0},
    ),
    (
        "symmetry: a running pod's required affinity counts hardPodAffinityWeight (1)",
        labelled_pod("in", DB),
        [running("web", "b1", {"app": "web"}, affinity=required("podAffinity", term(DB, ZONE)))],
        {"a1": 0.0, "a2": 0.0, "b1": 100.0},
    ),
    (
        "symmetry: a running pod's preferred anti-affinity pushes the newcomer away",
        labelled_pod("in", DB),
        [
            running(
                "web",
                "a2",
                {"app": "web"},
                affinity=preferred("podAntiAffinity", (3, term(DB, HOST))),
            )
        ],
        {"a1": 100.0, "a2": 0.0, "b1": 100.0},
    ),
    (
        "all equal: every node 0",
        labelled_pod("in", affinity=preferred("podAffinity", (5, term(DB, ZONE)))),
        [],
        {"a1": 0.0, "a2": 0.0, "b1": 0.0},
    ),
]


@pytest.mark.parametrize(
    ("incoming", "pods", "expected"),
    [c[1:] for c in AFFINITY_CASES],
    ids=[c[0] for c in AFFINITY_CASES],
)
def test_preferred_affinity_scores_agree_with_kube_scheduler(
    incoming: dict[str, Any], pods: list[dict[str, Any]], expected: dict[str, float]
) -> None:
    assert affinity_scores(incoming, pods) == expected


def spread_scores(
    incoming: dict[str, Any],
    pods: Sequence[dict[str, Any]],
    nodes: Sequence[dict[str, Any]] = NODES,
) -> dict[str, float]:
    snapshot = snapshot_of(cluster(nodes, pods))
    state = SoftSpreadState.compute(pod_from_api(incoming), snapshot.pods, snapshot.nodes)
    assert state is not None
    names = sorted(snapshot.nodes)
    return dict(zip(names, state.scores([snapshot.nodes[n] for n in names]), strict=True))


def test_schedule_anyway_zone_scores_worked_by_hand() -> None:
    # counts za 2, zb 1; 2 domains: weight ln(4) = 1.386; raw za round(2.77) = 3,
    # zb round(1.39) = 1; normalized 100 * (3 + 1 - raw) // 3: za 33, zb 100.
    pods = [running("p1", "a1", DB), running("p2", "a2", DB), running("p3", "b1", DB)]
    incoming = labelled_pod("in", DB, spread=[spread(DB, when="ScheduleAnyway")])
    assert spread_scores(incoming, pods) == {"a1": 33.0, "a2": 33.0, "b1": 100.0}


def test_schedule_anyway_max_skew_softens_the_differences() -> None:
    # maxSkew 3 adds 2 to every raw score: za round(2.77 + 2) = 5, zb round(3.39) = 3;
    # normalized 100 * (5 + 3 - raw) // 5: za 60, zb 100.
    pods = [running("p1", "a1", DB), running("p2", "a2", DB), running("p3", "b1", DB)]
    incoming = labelled_pod("in", DB, spread=[spread(DB, max_skew=3, when="ScheduleAnyway")])
    assert spread_scores(incoming, pods) == {"a1": 60.0, "a2": 60.0, "b1": 100.0}


def test_schedule_anyway_by_hostname_counts_each_node_and_ignores_nodes_without_keys() -> None:
    nodes = [*NODES, zoned_node("bare", None)]
    del nodes[-1]["metadata"]["labels"][HOST]
    pods = [running("p1", "a1", DB), running("p2", "a1", DB)]
    incoming = labelled_pod("in", DB, spread=[spread(DB, HOST, when="ScheduleAnyway")])
    # 3 nodes with the key: weight ln(5) = 1.609; raw a1 round(3.22) = 3, others 0;
    # normalized 100 * (3 + 0 - raw) // 3: a1 0, others 100; the bare node 0.
    assert spread_scores(incoming, pods, nodes) == {
        "a1": 0.0,
        "a2": 100.0,
        "b1": 100.0,
        "bare": 0.0,
    }


def test_no_matching_pod_anywhere_scores_every_node_100() -> None:
    incoming = labelled_pod("in", DB, spread=[spread(DB, when="ScheduleAnyway")])
    assert spread_scores(incoming, []) == {"a1": 100.0, "a2": 100.0, "b1": 100.0}
