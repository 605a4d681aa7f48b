"""Host ports, preferred node affinity and PreferNoSchedule taints, table by table
against what kube-scheduler's NodePorts, NodeAffinity and TaintToleration plugins give
for the same pod and node (their documented semantics and unit-test cases)."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import ClusterCache, EventType
from cache.node import NodeInfo
from cache.pod import PodInfo, pod_from_api
from policies.filters.node_ports import REASON, NodePorts
from policies.interface import GangContext
from policies.profile import POLICIES, build_profile
from policies.scores.node_affinity import PreferredNodeAffinity
from policies.scores.taint_toleration import PreferNoScheduleTaints
from tests.factories import make_node, node_obj, pod_obj


def port(
    host_port: int, ip: str = "", protocol: str = "", container_port: int = 80
) -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": container_port}
    if host_port:
        entry["hostPort"] = host_port
    if ip:
        entry["hostIP"] = ip
    if protocol:
        entry["protocol"] = protocol
    return entry


def with_ports(obj: dict[str, Any], *ports: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["containers"][0]["ports"] = list(ports)
    return obj


def node_with(*running: dict[str, Any]) -> NodeInfo:
    """Node n as the cache accounts it with `running` pods bound there."""
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n"))
    for obj in running:
        cache.apply_pod(EventType.ADDED, obj)
    node = cache.node("n")
    assert node is not None
    return node


def running_pod(name: str, *ports: dict[str, Any]) -> dict[str, Any]:
    return with_ports(pod_obj(name, node_name="n", phase="Running"), *ports)


def pending(*ports: dict[str, Any]) -> PodInfo:
    return pod_from_api(with_ports(pod_obj("new"), *ports))


# --- NodePorts --------------------------------------------------------------------------
# (used on the node, wanted by the pod, fits): kube-scheduler's HostPortInfo rules.
PORT_CASES = [
    pytest.param([], [port(8080)], True, id="nothing-used"),
    pytest.param([port(8080, "127.0.0.1")], [port(8080, "127.0.0.1")], False, id="same-ip-port"),
    pytest.param(
        [port(8080, "127.0.0.1", "TCP")], [port(8080, "127.0.0.1", "UDP")], True, id="other-proto"
    ),
    pytest.param([port(8080, "127.0.0.1")], [port(8080, "127.0.0.2")], True, id="other-ip"),
    pytest.param([port(8080, "127.0.0.1")], [port(8081, "127.0.0.1")], True, id="other-port"),
    pytest.param([port(8080, "0.0.0.0")], [port(8080, "127.0.0.1")], False, id="used-wildcard"),
    pytest.param([port(8080, "127.0.0.1")], [port(8080, "0.0.0.0")], False, id="want-wildcard"),
    pytest.param([port(8080)], [port(8080, "10.0.0.1")], False, id="empty-ip-is-wildcard"),
    pytest.param([port(8080, "", "TCP")], [port(8080)], False, id="empty-protocol-is-tcp"),
    pytest.param([port(8080, "", "UDP")], [port(8080)], True, id="udp-vs-default-tcp"),
    pytest.param([port(8080, "", "SCTP")], [port(8080, "", "SCTP")], False, id="sctp"),
    pytest.param([port(0, container_port=8080)], [port(8080)], True, id="container-port-only"),
    pytest.param([port(8080)], [port(0, container_port=8080)], True, id="no-host-port-wanted"),
    pytest.param(
        [port(8080, "127.0.0.1"), port(9090)],
        [port(7070), port(9090, "10.0.0.1")],
        False,
        id="second-port-clashes",
    ),
]


@pytest.mark.parametrize(("used", "wanted", "fits"), PORT_CASES)
def test_host_ports_conflict_as_kube_scheduler_decides(
    used: list[dict[str, Any]], wanted: list[dict[str, Any]], fits: bool
) -> None:
    node = node_with(running_pod("old", *used))
    assert NodePorts().filter(pending(*wanted), node) == (None if fits else REASON)


def test_init_container_ports_are_not_host_ports() -> None:
    # NodePorts reads the regular containers only.
    old = pod_obj("old", node_name="n", phase="Running")
    old["spec"]["initContainers"] = [{"name": "init", "ports": [port(8080)]}]
    assert NodePorts().filter(pending(port(8080)), node_with(old)) is None


def test_host_network_pods_hold_their_container_ports() -> None:
    # The API server defaults hostPort to containerPort on the host network.
    old = running_pod("old", {"containerPort": 8080})
    old["spec"]["hostNetwork"] = True
    assert NodePorts().filter(pending(port(8080)), node_with(old)) == REASON
    wanted = with_ports(pod_obj("new"), {"containerPort": 8080})
    wanted["spec"]["hostNetwork"] = True
    assert NodePorts().filter(pod_from_api(wanted), node_with(running_pod("o", port(8080))))


def test_a_zero_host_port_on_the_host_network_is_the_container_port() -> None:
    old = running_pod("old", {"containerPort": 8080, "hostPort": 0})
    old["spec"]["hostNetwork"] = True
    assert NodePorts().filter(pending(port(8080)), node_with(old)) == REASON


def test_a_finished_pod_frees_its_port_and_a_double_booking_keeps_it() -> None:
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n"))
    first = running_pod("a", port(8080))
    second = running_pod("b", port(8080))  # a static pod double-booking the port
    cache.apply_pod(EventType.ADDED, first)
    cache.apply_pod(EventType.ADDED, second)
    want = pending(port(8080))
    cache.apply_pod(EventType.DELETED, first)
    assert NodePorts().filter(want, cache.node("n")) == REASON  # type: ignore[arg-type]
    second["status"]["phase"] = "Succeeded"
    second["metadata"]["resourceVersion"] = "2"
    cache.apply_pod(EventType.MODIFIED, second)
    assert NodePorts().filter(want, cache.node("n")) is None  # type: ignore[arg-type]


def test_snapshots_carry_ports_and_planning_views_leave_them_alone() -> None:
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n"))
    cache.apply_pod(EventType.ADDED, running_pod("a", port(8080)))
    snapshot = cache.snapshot()
    want = pending(port(8080))
    assert NodePorts().filter(want, snapshot.nodes["n"]) == REASON
    cache.apply_pod(EventType.DELETED, running_pod("a", port(8080)))
    cache.update_snapshot(snapshot)
    assert NodePorts().filter(want, snapshot.nodes["n"]) is None

    from cache.snapshot import PlanningView

    view = PlanningView(snapshot)
    view.place("n", {}, (), want.host_ports)
    assert NodePorts().filter(want, view.node("n")) == REASON
    assert NodePorts().filter(want, snapshot.nodes["n"]) is None


def test_copies_of_a_pod_with_host_ports_fit_once_per_node() -> None:
    from policies.capacity import copies_that_fit

    assert copies_that_fit(pending(), node_with()) > 1
    assert copies_that_fit(pending(port(8080)), node_with()) == 1
    assert copies_that_fit(pending(port(8080)), node_with(running_pod("a", port(8080)))) == 0


def test_a_malformed_host_port_is_a_problem_not_a_crash() -> None:
    pod = pending({"containerPort": 80, "hostPort": "eighty"})
    assert any("hostPort" in problem for problem in pod.problems)


def test_host_ports_change_the_placement_signature() -> None:
    assert pending(port(8080)).placement_signature() != pending().placement_signature()
    assert pending(port(8080)).placement_signature() != pending(port(8081)).placement_signature()


# --- preferred node affinity --------------------------------------------------------------
def preferred(*terms: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": weight, "preference": {"matchExpressions": exprs}}
                for weight, exprs in terms
            ]
        }
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def kube_node_affinity_scores(raw: dict[str, int]) -> dict[str, float]:
    """kube-scheduler's NormalizeScore for NodeAffinity: raw x 100 / max (0s if max 0)."""
    top = max(raw.values())
    return {name: (100 * value / top if top else 0.0) for name, value in raw.items()}


AFFINITY = preferred(
    (80, [expr("zone", "In", "a")]),
    (20, [expr("disk", "In", "ssd")]),
)
# node labels -> kube-scheduler's raw score (sum of matched weights)
AFFINITY_NODES = {
    "both": ({"zone": "a", "disk": "ssd"}, 100),
    "zone": ({"zone": "a", "disk": "hdd"}, 80),
    "disk": ({"zone": "b", "disk": "ssd"}, 20),
    "none": ({"zone": "b"}, 0),
}


def affinity_scores(pod: PodInfo, labels: dict[str, dict[str, str]]) -> dict[str, float]:
    score = PreferredNodeAffinity()
    return {
        name: score.score(pod, make_node(name, labels=node_labels), (), GangContext())
        for name, node_labels in labels.items()
    }


def test_preferred_affinity_scores_sum_the_matched_weights() -> None:
    pod = pod_from_api(pod_obj("p", affinity=AFFINITY))
    ours = affinity_scores(pod, {name: labels for name, (labels, _) in AFFINITY_NODES.items()})
    kube = kube_node_affinity_scores({name: raw for name, (_, raw) in AFFINITY_NODES.items()})
    # A node matching every term exists here, so the values are kube-scheduler's.
    assert ours == pytest.approx(kube)
    assert ours == {"both": 100.0, "zone": 80.0, "disk": 20.0, "none": 0.0}


def test_preferred_affinity_orders_nodes_as_kube_scheduler_when_none_matches_all() -> None:
    nodes = {name: labels for name, (labels, _) in AFFINITY_NODES.items() if name != "both"}
    pod = pod_from_api(pod_obj("p", affinity=AFFINITY))
    ours = affinity_scores(pod, nodes)
    kube = kube_node_affinity_scores(
        {name: raw for name, (_, raw) in AFFINITY_NODES.items() if name != "both"}
    )
    assert sorted(ours, key=lambda n: -ours[n]) == sorted(kube, key=lambda n: -kube[n])


@pytest.mark.parametrize(
    ("term", "labels", "matches"),
    [
        pytest.param([], {"zone": "a"}, False, id="empty-preference-matches-nothing"),
        pytest.param([expr("zone", "NotIn", "a")], {}, True, id="notin-absent-label"),
        pytest.param([expr("zone", "Exists")], {"zone": ""}, True, id="exists"),
        pytest.param([expr("gen", "Gt", "3")], {"gen": "4"}, True, id="gt"),
        pytest.param([expr("gen", "Gt", "3")], {"gen": "x"}, False, id="gt-not-a-number"),
        pytest.param(
            [expr("zone", "In", "a"), expr("disk", "In", "ssd")],
            {"zone": "a"},
            False,
            id="requirements-are-anded",
        ),
    ],
)
def test_a_preference_matches_as_a_node_selector_term(
    term: list[dict[str, Any]], labels: dict[str, str], matches: bool
) -> None:
    pod = pod_from_api(pod_obj("p", affinity=preferred((10, term))))
    assert affinity_scores(pod, {"n": labels})["n"] == (100.0 if matches else 0.0)


def test_a_preference_on_the_node_name_uses_match_fields() -> None:
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {"matchFields": [expr("metadata.name", "In", "wanted")]},
                }
            ]
        }
    }
    pod = pod_from_api(pod_obj("p", affinity=affinity))
    assert affinity_scores(pod, {"wanted": {}, "other": {}}) == {"wanted": 100.0, "other": 0.0}


def test_preferred_weights_out_of_range_are_problems() -> None:
    pod = pod_from_api(pod_obj("p", affinity=preferred((101, [expr("zone", "In", "a")]))))
    assert any("weight" in problem for problem in pod.problems)


def test_a_pod_without_preferences_scores_zero_everywhere() -> None:
    pod = pod_from_api(pod_obj("p"))
    assert set(affinity_scores(pod, {"a": {"zone": "a"}, "b": {}}).values()) == {0.0}


# --- PreferNoSchedule taints ---------------------------------------------------------------
def taint(key: str, effect: str = "PreferNoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def toleration(
    key: str, effect: str = "", operator: str = "Equal", value: str = ""
) -> dict[str, str]:
    return {"key": key, "operator": operator, "value": value, "effect": effect}


# (node taints, pod tolerations, kube-scheduler's intolerable PreferNoSchedule count)
TAINT_CASES = [
    pytest.param([], [], 0, id="untainted"),
    pytest.param([taint("a")], [], 1, id="one-intolerable"),
    pytest.param([taint("a"), taint("b")], [], 2, id="two-intolerable"),
    pytest.param([taint("a"), taint("b")], [toleration("a")], 1, id="empty-effect-tolerates"),
    pytest.param(
        [taint("a")], [toleration("a", "PreferNoSchedule")], 0, id="prefer-effect-tolerates"
    ),
    pytest.param([taint("a")], [toleration("a", "NoSchedule")], 1, id="noschedule-does-not"),
    pytest.param([taint("a")], [toleration("", operator="Exists")], 0, id="exists-all"),
    pytest.param([taint("a", value="x")], [toleration("a", value="y")], 1, id="value-differs"),
    pytest.param([taint("a", "NoSchedule")], [], 0, id="noschedule-is-the-filters"),
    pytest.param([taint("a", "NoExecute"), taint("b")], [], 1, id="only-prefer-counts"),
]


@pytest.mark.parametrize(("taints", "tolerations", "intolerable"), TAINT_CASES)
def test_prefer_no_schedule_counts_as_kube_scheduler(
    taints: list[dict[str, str]], tolerations: list[dict[str, str]], intolerable: int
) -> None:
    pod = pod_from_api(pod_obj("p", tolerations=tolerations))
    node = make_node("n", taints=taints)
    score = PreferNoScheduleTaints().score(pod, node, (), GangContext())
    assert score == pytest.approx(100.0 / (1 + intolerable))


def kube_taint_scores(raw: dict[str, int]) -> dict[str, float]:
    """kube-scheduler's reversed NormalizeScore: 100 - raw x 100 / max (all 100 if max 0)."""
    top = max(raw.values())
    return {name: (100 - 100 * value / top if top else 100.0) for name, value in raw.items()}


def test_prefer_no_schedule_orders_nodes_as_kube_scheduler() -> None:
    taints = {
        "clean": [],
        "one": [taint("a")],
        "two": [taint("a"), taint("b")],
        "tolerated": [taint("c")],
    }
    pod = pod_from_api(pod_obj("p", tolerations=[toleration("c")]))
    score = PreferNoScheduleTaints()
    ours = {
        n: score.score(pod, make_node(n, taints=t), (), GangContext()) for n, t in taints.items()
    }
    kube = kube_taint_scores({"clean": 0, "one": 1, "two": 2, "tolerated": 0})
    assert ours["clean"] == kube["clean"] == ours["tolerated"] == kube["tolerated"] == 100.0
    assert sorted(ours, key=lambda n: (-ours[n], n)) == sorted(kube, key=lambda n: (-kube[n], n))


# --- profiles -------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_named_policy_weighs_the_users_preferences(policy: str) -> None:
    names = {score.name: weight for score, weight in build_profile(policy).node_scores}
    assert names["node-affinity"] == 2.0
    assert names["taint-toleration"] == 3.0
