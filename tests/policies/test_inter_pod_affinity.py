"""InterPodAffinity filter: each case a cluster, an incoming pod and the nodes that
kube-scheduler's plugin (pkg/scheduler/framework/plugins/interpodaffinity, as the API
reference documents PodAffinityTerm) lets it on, with the reason for the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cache.pod import pod_from_api
from policies.filters.inter_pod_affinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    InterPodAffinityState,
)
from tests.podconstraints import (
    HOST,
    ZONE,
    cluster,
    labelled_pod,
    required,
    snapshot_of,
    term,
    zoned_node,
)

NODES = [
    zoned_node("a1", "za"),
    zoned_node("a2", "za"),
    zoned_node("b1", "zb"),
    zoned_node("n0", None),  # no zone label
]
SECURITY = {"service": "securityscan"}


def running(name: str, node: str, labels: Mapping[str, str], **kwargs: Any) -> dict[str, Any]:
    return labelled_pod(name, labels, node_name=node, gang=None, **kwargs)


def verdicts(
    incoming: dict[str, Any],
    pods: Sequence[dict[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, str | None]:
    snapshot = snapshot_of(cluster(NODES, pods, namespaces))
    pod = pod_from_api(incoming)
    assert not pod.problems
    state = InterPodAffinityState.compute(pod, snapshot.pods, snapshot.nodes)
    return {name: state.filter(node) for name, node in sorted(snapshot.nodes.items())}


def only(allowed: set[str], reason: str) -> dict[str, str | None]:
    return {n: None if n in allowed else reason for n in ("a1", "a2", "b1", "n0")}


CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, str | None]]] = [
    (
        "affinity to pods in a zone: every node of that zone, none elsewhere",
        labelled_pod("in", affinity=required("podAffinity", term(SECURITY, ZONE))),
        [running("s", "a1", SECURITY)],
        only({"a1", "a2"}, REASON_AFFINITY),
    ),
    (
        "affinity: a node without the topology key never passes",
        labelled_pod("in", affinity=required("podAffinity", term(SECURITY, HOST))),
        [running("s", "n0", SECURITY)],
        only({"n0"}, REASON_AFFINITY),
    ),
    (
        "first pod of a self-affine group: nothing matches yet, it may start anywhere "
        "its topology key exists",
        labelled_pod("in", SECURITY, affinity=required("podAffinity", term(SECURITY, ZONE))),
        [],
        only({"a1", "a2", "b1"}, REASON_AFFINITY),
    ),
    (
        "no matching pod and the pod does not match its own term: nowhere",
        labelled_pod("in", affinity=required("podAffinity", term(SECURITY, ZONE))),
        [],
        only(set(), REASON_AFFINITY),
    ),
    (
        "several affinity terms: a pod must match ALL of them to count",
        labelled_pod(
            "in",
            affinity=required("podAffinity", term(SECURITY, ZONE), term({"tier": "db"}, ZONE)),
        ),
        [running("s", "a1", SECURITY), running("d", "b1", {"tier": "db"})],
        only(set(), REASON_AFFINITY),
    ),
    (
        "anti-affinity by hostname: only the node running a matching pod is refused",
        labelled_pod("in", affinity=required("podAntiAffinity", term(SECURITY, HOST))),
        [running("s", "a1", SECURITY)],
        only({"a2", "b1", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "anti-affinity by zone: the whole zone; a node without the key is not in it",
        labelled_pod("in", affinity=required("podAntiAffinity", term(SECURITY, ZONE))),
        [running("s", "a1", SECURITY)],
        only({"b1", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "symmetry: a running pod's anti-affinity keeps a matching newcomer out of its zone",
        labelled_pod("in", SECURITY),
        [
            running(
                "guard",
                "a2",
                {"app": "guard"},
                affinity=required("podAntiAffinity", term(SECURITY, ZONE)),
            )
        ],
        only({"b1", "n0"}, REASON_EXISTING_ANTI_AFFINITY),
    ),
    (
        "symmetry only for pods the running pod's term selects",
        labelled_pod("in", {"service": "other"}),
        [
            running(
                "guard",
                "a2",
                {"app": "guard"},
                affinity=required("podAntiAffinity", term(SECURITY, ZONE)),
            )
        ],
        only({"a1", "a2", "b1", "n0"}, ""),
    ),
    (
        "terms look in the pod's own namespace by default",
        labelled_pod("in", affinity=required("podAntiAffinity", term(SECURITY, HOST))),
        [running("s", "a1", SECURITY, namespace="other")],
        only({"a1", "a2", "b1", "n0"}, ""),
    ),
    (
        "explicit namespaces",
        labelled_pod(
            "in",
            affinity=required("podAntiAffinity", term(SECURITY, HOST, namespaces=["other"])),
        ),
        [running("s", "a1", SECURITY, namespace="other"), running("t", "b1", SECURITY)],
        only({"a2", "b1", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "an empty namespaceSelector selects every namespace",
        labelled_pod(
            "in",
            affinity=required("podAntiAffinity", term(SECURITY, HOST, namespaceSelector={})),
        ),
        [running("s", "a1", SECURITY, namespace="other"), running("t", "b1", SECURITY)],
        only({"a2", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "namespaceSelector reads the Namespace objects' labels",
        labelled_pod(
            "in",
            affinity=required(
                "podAntiAffinity",
                term(SECURITY, HOST, namespaceSelector={"matchLabels": {"team": "ml"}}),
            ),
        ),
        [
            running("s", "a1", SECURITY, namespace="ml-1"),
            running("t", "a2", SECURITY, namespace="web"),
            running("u", "b1", SECURITY),  # the pod's own namespace, not selected
        ],
        only({"a2", "b1", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "matchLabelKeys: only pods with the incoming pod's value of the key",
        labelled_pod(
            "in",
            {"app": "web", "pod-template-hash": "v2"},
            affinity=required(
                "podAntiAffinity",
                term({"app": "web"}, HOST, matchLabelKeys=["pod-template-hash"]),
            ),
        ),
        [
            running("old", "a1", {"app": "web", "pod-template-hash": "v1"}),
            running("new", "b1", {"app": "web", "pod-template-hash": "v2"}),
        ],
        only({"a1", "a2", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "mismatchLabelKeys: only pods with another value of the key",
        labelled_pod(
            "in",
            {"tenant": "t1"},
            affinity=required("podAntiAffinity", term({}, HOST, mismatchLabelKeys=["tenant"])),
        ),
        [running("mine", "a1", {"tenant": "t1"}), running("theirs", "b1", {"tenant": "t2"})],
        only({"a1", "a2", "n0"}, REASON_ANTI_AFFINITY),
    ),
    (
        "a term without labelSelector matches no pod",
        labelled_pod("in", affinity=required("podAntiAffinity", term(None, HOST))),
        [running("s", "a1", SECURITY)],
        only({"a1", "a2", "b1", "n0"}, ""),
    ),
]


@pytest.mark.parametrize(
    ("incoming", "pods", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_filter_agrees_with_kube_scheduler(
    incoming: dict[str, Any], pods: list[dict[str, Any]], expected: dict[str, str | None]
) -> None:
    namespaces = {"ml-1": {"team": "ml"}, "web": {"team": "web"}}
    assert verdicts(incoming, pods, namespaces) == expected


def test_members_placed_in_the_plan_count_as_running_pods() -> None:
    snapshot = snapshot_of(cluster(NODES))
    worker = pod_from_api(
        labelled_pod("w", {"app": "w"}, affinity=required("podAntiAffinity", term({"app": "w"})))
    )
    state = InterPodAffinityState.compute(worker, snapshot.pods, snapshot.nodes)
    assert state.filter(snapshot.nodes["a1"]) is None
    other = pod_from_api(labelled_pod("w2", {"app": "w"}))
    state.add(other, snapshot.nodes["a1"])
    assert state.filter(snapshot.nodes["a1"]) == REASON_ANTI_AFFINITY
    state.add(other, snapshot.nodes["a1"], -1)
    assert state.filter(snapshot.nodes["a1"]) is None


def test_a_placed_member_with_anti_affinity_keeps_others_away_by_symmetry() -> None:
    snapshot = snapshot_of(cluster(NODES))
    plain = pod_from_api(labelled_pod("p", {"app": "w"}))
    state = InterPodAffinityState.compute(plain, snapshot.pods, snapshot.nodes)
    guard = pod_from_api(
        labelled_pod("g", affinity=required("podAntiAffinity", term({"app": "w"}, ZONE)))
    )
    state.add(guard, snapshot.nodes["a1"])
    assert state.filter(snapshot.nodes["a2"]) == REASON_EXISTING_ANTI_AFFINITY
    assert state.filter(snapshot.nodes["b1"]) is None


def test_label_changes_of_running_pods_reach_the_snapshot() -> None:
    cache = cluster(NODES, [running("s", "a1", {"service": "other"})])
    snapshot = snapshot_of(cache)
    incoming = pod_from_api(
        labelled_pod("in", affinity=required("podAntiAffinity", term(SECURITY, HOST)))
    )
    assert (
        InterPodAffinityState.compute(incoming, snapshot.pods, snapshot.nodes).filter(
            snapshot.nodes["a1"]
        )
        is None
    )
    relabelled = running("s", "a1", SECURITY, resource_version="2")
    cache.apply_pod("MODIFIED", relabelled)
    cache.update_snapshot(snapshot)
    state = InterPodAffinityState.compute(incoming, snapshot.pods, snapshot.nodes)
    assert state.filter(snapshot.nodes["a1"]) == REASON_ANTI_AFFINITY


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        (required("podAffinity", term(SECURITY, "")), "topologyKey can not be empty"),
        (
            required("podAffinity", {"topologyKey": HOST, "matchLabelKeys": ["x"]}),
            "matchLabelKeys cannot be set when labelSelector isn't set",
        ),
        (
            {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "podAffinityTerm": term(SECURITY)}
                    ]
                }
            },
            "weight must be 1..100",
        ),
    ],
)
def test_malformed_terms_are_refused_with_the_reason(section: dict[str, Any], problem: str) -> None:
    pod = pod_from_api(labelled_pod("in", affinity=section))
    assert any(problem in text for text in pod.problems)
