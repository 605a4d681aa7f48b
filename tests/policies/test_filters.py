"""The filters of policies/filters: each one alone, on nodes and pods built as the API
would send them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.gpu import PRODUCT_LABEL, TOPOLOGY_ANNOTATION
from cache.node import NodeInfo, node_from_api
from cache.pod import pod_from_api
from cache.terms import parse_label_int
from policies.filters import (
    GpuFit,
    GpuType,
    NodeAffinity,
    NodeUnschedulable,
    ResourceFit,
    TaintToleration,
    default_filters,
)
from policies.filters.node_affinity import requirement_matches, terms_match
from tests.factories import dgx_links, make_node, make_pod, node_obj, pod_obj

AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


# --- builders -------------------------------------------------------------------------
def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        requirement["values"] = list(values)
    return requirement


def affinity(*terms: Mapping[str, Any]) -> dict[str, Any]:
    """Required node affinity with these nodeSelectorTerms."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def term(
    *expressions: Mapping[str, Any], fields: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    result: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        result["matchFields"] = list(fields)
    return result


def gpu_node(
    taken: Sequence[int], healthy: Sequence[bool] | None = None, *, model: str = "A100"
) -> NodeInfo:
    """A node whose device i has taken[i] milli in use (more than 1000 = over-committed)
    and the health the node agent reports."""
    count = len(taken)
    obj = node_obj("gpu-node", gpus=count, model=model, links=dgx_links(count))
    if count:
        topology = json.loads(obj["metadata"]["annotations"][TOPOLOGY_ANNOTATION])
        for device, ok in zip(topology["devices"], healthy or [True] * count, strict=True):
            device["healthy"] = ok
        obj["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = json.dumps(topology)
    node = node_from_api(obj)
    assert not node.problems
    shares = tuple((i, milli) for i, milli in enumerate(taken) if milli)
    if shares:
        node.charge({}, shares)
    return node


def with_requests(**extra: str) -> dict[str, Any]:
    obj = pod_obj("p")
    obj["spec"]["containers"][0]["resources"]["requests"].update(extra)
    return obj


# --- default order --------------------------------------------------------------------
def test_default_filters_run_in_kube_scheduler_order() -> None:
    assert [type(f).__name__ for f in default_filters()] == [
        "NodeUnschedulable",
        "TaintToleration",
        "GpuType",
        "NodeAffinity",
        "NodePorts",
        "ResourceFit",
        "GpuFit",
        "NodeVolumeLimits",
        "VolumeBinding",
        # DRA claims last: the costliest test, asked only of nodes that passed the rest
        # (docs/dra.md, "Whole-gang allocation").
        "DynamicResources",
    ]
    names = [f.name for f in default_filters()]
    assert len(set(names)) == len(names)


# --- NodeUnschedulable ------------------------------------------------------------------
def test_cordoned_node_is_unschedulable() -> None:
    pod = make_pod("p")
    assert NodeUnschedulable().filter(pod, make_node("n")) is None
    assert (
        NodeUnschedulable().filter(pod, make_node("n", unschedulable=True))
        == "node(s) were unschedulable"
    )


@pytest.mark.parametrize(
    ("toleration", "passes"),
    [
        ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, True),
        (
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            },
            True,
        ),
        ({"operator": "Exists"}, True),
        (
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoExecute",
            },
            False,
        ),
        ({"key": "dedicated", "operator": "Exists"}, False),
    ],
)
def test_cordoned_node_takes_pods_tolerating_the_unschedulable_taint(
    toleration: dict[str, str], passes: bool
) -> None:
    pod = make_pod("p", tolerations=[toleration])
    reason = NodeUnschedulable().filter(pod, make_node("n", unschedulable=True))
    assert (reason is None) == passes


# --- TaintToleration --------------------------------------------------------------------
GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def test_node_without_taints_takes_any_pod() -> None:
    assert TaintToleration().filter(make_pod("p"), make_node("n")) is None


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_untolerated_scheduling_taint_fails_with_its_description(effect: str) -> None:
    node = make_node("n", taints=[{**GPU_TAINT, "effect": effect}])
    assert (
        TaintToleration().filter(make_pod("p"), node)
        == "node(s) had untolerated taint {dedicated: gpu}"
    )


def test_prefer_no_schedule_taint_never_filters() -> None:
    node = make_node("n", taints=[{**GPU_TAINT, "effect": "PreferNoSchedule"}])
    assert TaintToleration().filter(make_pod("p"), node) is None


def test_taint_without_value_is_described_by_its_key() -> None:
    node = make_node("n", taints=[{"key": "maintenance", "effect": "NoExecute"}])
    assert (
        TaintToleration().filter(make_pod("p"), node)
        == "node(s) had untolerated taint {maintenance}"
    )


@pytest.mark.parametrize(
    ("toleration", "passes"),
    [
        # Equal (the default operator) needs the same key and value.
        ({"key": "dedicated", "value": "gpu"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "gpu"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
        ({"key": "other", "operator": "Equal", "value": "gpu"}, False),
        # Exists ignores the value; with an empty key it tolerates every taint.
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists"}, True),
        # The effect must match unless the toleration leaves it empty.
        ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}, False),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_toleration_semantics(toleration: dict[str, str], passes: bool) -> None:
    node = make_node("n", taints=[GPU_TAINT])
    pod = make_pod("p", tolerations=[toleration])
    assert (TaintToleration().filter(pod, node) is None) == passes


def test_reason_names_the_first_untolerated_taint() -> None:
    node = make_node(
        "n",
        taints=[
            GPU_TAINT,
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
            {"key": "team", "value": "a", "effect": "NoExecute"},
            {"key": "zzz", "value": "b", "effect": "NoSchedule"},
        ],
    )
    pod = make_pod("p", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert TaintToleration().filter(pod, node) == "node(s) had untolerated taint {team: a}"
    both = make_pod(
        "p",
        tolerations=[
            {"key": "dedicated", "operator": "Exists"},
            {"key": "team", "value": "a", "effect": "NoExecute"},
            {"key": "zzz", "operator": "Exists", "effect": "NoSchedule"},
        ],
    )
    assert TaintToleration().filter(both, node) is None


# --- GpuType ----------------------------------------------------------------------------
A100 = make_node("a100", gpus=8, model="A100")
V100 = make_node("v100", gpus=8, model="V100")
T4 = make_node("t4", gpus=4, model="T4")
CPU_ONLY = make_node("cpu")


def test_pod_without_model_constraint_passes_gpu_type_everywhere() -> None:
    pod = make_pod("p", gpus=1, node_selector={"zone": "a"})
    for node in (A100, V100, CPU_ONLY):
        assert GpuType().filter(pod, node) is None


def test_gpu_type_from_node_selector() -> None:
    pod = make_pod("p", gpus=1, node_selector={PRODUCT_LABEL: "A100"})
    assert GpuType().filter(pod, A100) is None
    assert GpuType().filter(pod, V100) == "node(s) didn't match GPU type A100"
    assert GpuType().filter(pod, CPU_ONLY) == "node(s) didn't match GPU type A100"


def test_gpu_type_affinity_in_two_models() -> None:
    pod = make_pod("p", gpus=1, affinity=affinity(term(expr(PRODUCT_LABEL, "In", "A100", "V100"))))
    assert GpuType().filter(pod, A100) is None
    assert GpuType().filter(pod, V100) is None
    assert GpuType().filter(pod, T4) == "node(s) didn't match GPU type A100|V100"
    assert GpuType().filter(pod, CPU_ONLY) == "node(s) didn't match GPU type A100|V100"


def test_gpu_type_lists_models_of_ored_terms_once() -> None:
    pod = make_pod(
        "p",
        gpus=1,
        affinity=affinity(
            term(expr(PRODUCT_LABEL, "In", "A100")),
            term(expr(PRODUCT_LABEL, "In", "V100", "A100")),
        ),
    )
    assert GpuType().filter(pod, V100) is None
    assert GpuType().filter(pod, T4) == "node(s) didn't match GPU type A100|V100"


@pytest.mark.parametrize(
    ("requirement", "node", "reason"),
    [
        (expr(PRODUCT_LABEL, "NotIn", "T4"), T4, "not T4"),
        (expr(PRODUCT_LABEL, "NotIn", "T4"), A100, None),
        (expr(PRODUCT_LABEL, "Exists"), CPU_ONLY, "(any)"),
        (expr(PRODUCT_LABEL, "Exists"), T4, None),
        (expr(PRODUCT_LABEL, "DoesNotExist"), T4, "(none)"),
        (expr(PRODUCT_LABEL, "DoesNotExist"), CPU_ONLY, None),
    ],
)
def test_gpu_type_other_operators(
    requirement: dict[str, Any], node: NodeInfo, reason: str | None
) -> None:
    pod = make_pod("p", affinity=affinity(term(requirement)))
    expected = None if reason is None else f"node(s) didn't match GPU type {reason}"
    assert GpuType().filter(pod, node) == expected


def test_gpu_type_checks_only_the_product_key_and_any_term_may_pass() -> None:
    # Term 1 accepts A100 in zone a, term 2 V100 anywhere. An A100 node in zone b has
    # the right model for term 1: GpuType passes, NodeAffinity then refuses it.
    pod = make_pod(
        "p",
        gpus=1,
        affinity=affinity(
            term(expr(PRODUCT_LABEL, "In", "A100"), expr("zone", "In", "a")),
            term(expr(PRODUCT_LABEL, "In", "V100")),
        ),
    )
    a100_zone_b = make_node("a100-b", gpus=8, model="A100", labels={"zone": "b"})
    assert GpuType().filter(pod, a100_zone_b) is None
    assert NodeAffinity().filter(pod, a100_zone_b) == AFFINITY_REASON
    assert GpuType().filter(pod, V100) is None
    assert NodeAffinity().filter(pod, V100) is None
    assert GpuType().filter(pod, T4) == "node(s) didn't match GPU type A100|V100"


def test_term_without_product_requirement_leaves_the_model_open() -> None:
    pod = make_pod(
        "p",
        affinity=affinity(term(expr(PRODUCT_LABEL, "In", "A100")), term(expr("zone", "In", "a"))),
    )
    assert GpuType().filter(pod, T4) is None
    assert NodeAffinity().filter(pod, T4) == AFFINITY_REASON


def test_gpu_type_and_of_two_product_requirements_in_one_term() -> None:
    pod = make_pod(
        "p",
        affinity=affinity(
            term(expr(PRODUCT_LABEL, "Exists"), expr(PRODUCT_LABEL, "NotIn", "T4", "K80"))
        ),
    )
    assert GpuType().filter(pod, A100) is None
    assert GpuType().filter(pod, T4) == "node(s) didn't match GPU type (any) and not T4|K80"


def test_gpu_type_selector_and_affinity_both_apply() -> None:
    pod = make_pod(
        "p",
        node_selector={PRODUCT_LABEL: "A100"},
        affinity=affinity(term(expr(PRODUCT_LABEL, "In", "A100", "V100"))),
    )
    assert GpuType().filter(pod, A100) is None
    assert GpuType().filter(pod, V100) == "node(s) didn't match GPU type A100"


# --- NodeAffinity -----------------------------------------------------------------------
LABELLED = make_node("n1", labels={"zone": "a", "cores": "64", "odd": "12x", "neg": "-3"})


def test_node_selector_needs_every_label_exactly() -> None:
    assert NodeAffinity().filter(make_pod("p", node_selector={"zone": "a"}), LABELLED) is None
    both = make_pod("p", node_selector={"zone": "a", "cores": "64"})
    assert NodeAffinity().filter(both, LABELLED) is None
    for selector in ({"zone": "b"}, {"zone": "a", "missing": "x"}, {"cores": "064"}):
        pod = make_pod("p", node_selector=selector)
        assert NodeAffinity().filter(pod, LABELLED) == AFFINITY_REASON


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b"), False),
        (expr("missing", "In", "a"), False),
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("missing", "NotIn", "a"), True),  # an absent label is outside every list
        (expr("zone", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("zone", "DoesNotExist"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("cores", "Gt", "32"), True),
        (expr("cores", "Gt", "64"), False),
        (expr("cores", "Lt", "65"), True),
        (expr("cores", "Lt", "64"), False),
        (expr("neg", "Lt", "0"), True),
        (expr("neg", "Gt", "-4"), True),
        (expr("odd", "Gt", "1"), False),  # a non-integer label fails Gt and Lt
        (expr("odd", "Lt", "100"), False),
        (expr("zone", "Lt", "100"), False),
        (expr("missing", "Gt", "0"), False),
        (expr("missing", "Lt", "0"), False),
    ],
)
def test_each_operator(requirement: dict[str, Any], matches: bool) -> None:
    pod = make_pod("p", affinity=affinity(term(requirement)))
    assert pod.required_affinity is not None
    [[parsed]] = pod.required_affinity
    assert requirement_matches(parsed, LABELLED) == matches
    assert (NodeAffinity().filter(pod, LABELLED) is None) == matches


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("+7", 7),
        ("-3", -3),
        ("0", 0),
        ("", None),
        ("-", None),
        ("1_000", None),
        (" 5", None),
        ("5.0", None),
        ("²", None),
        ("0x10", None),
        (str(2**63 - 1), 2**63 - 1),
        (str(2**63), None),  # beyond int64, as Go's ParseInt refuses it
    ],
)
def test_label_integers_are_read_as_kubernetes_reads_them(text: str, value: int | None) -> None:
    assert parse_label_int(text) == value


def test_match_fields_compare_metadata_name_only() -> None:
    node = make_node("worker-3", labels={"zone": "a"})
    name_in = make_pod(
        "p", affinity=affinity(term(fields=[expr("metadata.name", "In", "worker-3")]))
    )
    name_not_in = make_pod(
        "p", affinity=affinity(term(fields=[expr("metadata.name", "NotIn", "worker-3")]))
    )
    other_field = make_pod("p", affinity=affinity(term(fields=[expr("spec.x", "NotIn", "y")])))
    # A label called metadata.name is not the node's name.
    as_label = make_pod("p", affinity=affinity(term(expr("metadata.name", "In", "worker-3"))))
    assert NodeAffinity().filter(name_in, node) is None
    assert NodeAffinity().filter(name_not_in, node) == AFFINITY_REASON
    assert NodeAffinity().filter(other_field, node) == AFFINITY_REASON
    assert NodeAffinity().filter(as_label, node) == AFFINITY_REASON


def test_terms_are_ored_and_requirements_anded() -> None:
    pod = make_pod(
        "p",
        affinity=affinity(
            term(expr("zone", "In", "a"), expr("cores", "Gt", "100")),
            term(expr("zone", "In", "b")),
        ),
    )
    assert pod.required_affinity is not None
    assert not terms_match(pod.required_affinity, LABELLED)
    zone_b = make_node("n2", labels={"zone": "b"})
    assert terms_match(pod.required_affinity, zone_b)
    big = make_node("n3", labels={"zone": "a", "cores": "128"})
    assert terms_match(pod.required_affinity, big)


def test_empty_term_matches_nothing() -> None:
    empty = make_pod("p", affinity=affinity({}))
    assert NodeAffinity().filter(empty, LABELLED) == AFFINITY_REASON
    with_other = make_pod("p", affinity=affinity({}, term(expr("zone", "Exists"))))
    assert NodeAffinity().filter(with_other, LABELLED) is None
    assert not terms_match((), LABELLED)


def test_selector_and_affinity_must_both_hold() -> None:
    pod = make_pod(
        "p", node_selector={"zone": "a"}, affinity=affinity(term(expr("cores", "Lt", "32")))
    )
    assert NodeAffinity().filter(pod, LABELLED) == AFFINITY_REASON
    assert NodeAffinity().filter(pod, make_node("n", labels={"zone": "a", "cores": "8"})) is None


def test_pod_without_constraints_fits_any_node() -> None:
    assert NodeAffinity().filter(make_pod("p"), LABELLED) is None


# --- ResourceFit ------------------------------------------------------------------------
def test_pod_fits_free_resources() -> None:
    node = make_node("n", cpu="4", memory="8Gi")
    assert ResourceFit().filter(make_pod("p", cpu="4", memory="8Gi"), node) is None


def test_requests_already_on_the_node_count() -> None:
    node = make_node("n", cpu="4", memory="8Gi")
    node.charge({"cpu": 3500, "memory": 2**30}, ())
    assert ResourceFit().filter(make_pod("p", cpu="500m", memory="7Gi"), node) is None
    assert ResourceFit().filter(make_pod("p", cpu="501m"), node) == "Insufficient cpu"
    assert ResourceFit().filter(make_pod("p", cpu="100m", memory="8Gi"), node) == (
        "Insufficient memory"
    )


def test_reasons_come_in_a_stable_order() -> None:
    node = make_node("n", cpu="1", memory="1Gi", pods=1)
    big = pod_from_api(
        with_requests(cpu="2", memory="2Gi", **{"example.com/b": "1", "example.com/a": "1"})
    )
    assert ResourceFit().filter(big, node) == "Insufficient cpu"
    node.charge({}, ())
    assert ResourceFit().filter(big, node) == "Too many pods"
    roomy = make_node("n", cpu="8", memory="1Gi")
    assert ResourceFit().filter(big, roomy) == "Insufficient memory"
    roomier = make_node("n", cpu="8", memory="8Gi", extra={"example.com/b": "0"})
    assert ResourceFit().filter(big, roomier) == "Insufficient example.com/a"


def test_extended_resources() -> None:
    pod = pod_from_api(with_requests(**{"example.com/fpga": "2", "ephemeral-storage": "10Gi"}))
    lacking = make_node("n")
    assert ResourceFit().filter(pod, lacking) == "Insufficient ephemeral-storage"
    with_disk = make_node("n", extra={"ephemeral-storage": "100Gi"})
    assert ResourceFit().filter(pod, with_disk) == "Insufficient example.com/fpga"
    one_fpga = make_node("n", extra={"ephemeral-storage": "100Gi", "example.com/fpga": "1"})
    assert ResourceFit().filter(pod, one_fpga) == "Insufficient example.com/fpga"
    enough = make_node("n", extra={"ephemeral-storage": "100Gi", "example.com/fpga": "2"})
    assert ResourceFit().filter(pod, enough) is None


def test_gpu_resources_are_left_to_gpu_fit() -> None:
    pod = make_pod("p", gpus=8)
    assert ResourceFit().filter(pod, CPU_ONLY) is None
    assert ResourceFit().filter(make_pod("p", vgpu=300), CPU_ONLY) is None


def test_pod_count() -> None:
    node = make_node("n", pods=2)
    pod = make_pod("p")
    node.charge({}, ())
    assert ResourceFit().filter(pod, node) is None
    node.charge({}, ())
    assert ResourceFit().filter(pod, node) == "Too many pods"


def test_node_without_pods_allocatable_takes_kube_default_of_110() -> None:
    obj = node_obj("n")
    del obj["status"]["allocatable"]["pods"]
    node = node_from_api(obj)
    pod = make_pod("p", cpu="0", memory="0")
    for _ in range(109):
        node.charge({}, ())
    assert ResourceFit().filter(pod, node) is None
    node.charge({}, ())
    assert ResourceFit().filter(pod, node) == "Too many pods"


def test_over_committed_node_still_takes_a_pod_that_requests_nothing() -> None:
    node = make_node("n", cpu="1")
    node.charge({"cpu": 2000}, ())
    assert ResourceFit().filter(make_pod("p", cpu="0", memory="0"), node) is None
    assert ResourceFit().filter(make_pod("p", cpu="1m", memory="0"), node) == "Insufficient cpu"


# --- GpuFit -----------------------------------------------------------------------------
def test_pod_without_gpu_fits_any_node() -> None:
    assert GpuFit().filter(make_pod("p"), CPU_ONLY) is None


def test_whole_gpus_need_that_many_free_devices() -> None:
    node = gpu_node([0, 0, 1000, 300])
    assert GpuFit().filter(make_pod("p", gpus=2), node) is None
    assert GpuFit().filter(make_pod("p", gpus=3), node) == "Insufficient nvidia.com/gpu"
    assert GpuFit().filter(make_pod("p", gpus=1), CPU_ONLY) == "Insufficient nvidia.com/gpu"
    assert GpuFit().filter(make_pod("p", gpus=8), gpu_node([0] * 4)) == (
        "Insufficient nvidia.com/gpu"
    )
    # vgpu in whole multiples of 1000 asks for whole devices.
    assert GpuFit().filter(make_pod("p", vgpu=2000), node) is None
    assert GpuFit().filter(make_pod("p", vgpu=3000), node) == "Insufficient nvidia.com/gpu"


def test_unhealthy_devices_take_no_new_work() -> None:
    node = gpu_node([0, 0, 0], healthy=[True, False, True])
    assert GpuFit().filter(make_pod("p", gpus=2), node) is None
    assert GpuFit().filter(make_pod("p", gpus=3), node) == "Insufficient nvidia.com/gpu"
    sick = gpu_node([0, 0], healthy=[False, False])
    assert GpuFit().filter(make_pod("p", vgpu=100), sick) == "Insufficient nvidia.com/vgpu"
    assert GpuFit().filter(make_pod("p", gpus=1), sick) == "Insufficient nvidia.com/gpu"


def test_fractional_share_fits_on_one_device() -> None:
    node = gpu_node([800, 300])
    assert GpuFit().filter(make_pod("p", vgpu=700), node) is None
    assert GpuFit().filter(make_pod("p", vgpu=200), node) is None


def test_fractional_share_without_capacity_is_insufficient() -> None:
    assert GpuFit().filter(make_pod("p", vgpu=500), CPU_ONLY) == "Insufficient nvidia.com/vgpu"
    full = gpu_node([800, 900])
    assert GpuFit().filter(make_pod("p", vgpu=400), full) == "Insufficient nvidia.com/vgpu"


def test_fragmentation_has_its_own_reason() -> None:
    # 400 + 400 free: enough in total, on no single device.
    node = gpu_node([600, 600])
    assert (
        GpuFit().filter(make_pod("p", vgpu=500), node)
        == "node(s) had no single GPU with 500/1000 free"
    )


def test_over_committed_and_unhealthy_devices_add_nothing_to_the_total() -> None:
    # Device 0 is over-committed by 500 (free -500): it must not cancel device 1's
    # 400; the unhealthy device's 1000 free are not there for new work.
    node = gpu_node([1500, 600, 0, 700], healthy=[True, True, False, True])
    assert (
        GpuFit().filter(make_pod("p", vgpu=500), node)
        == "node(s) had no single GPU with 500/1000 free"
    )
    assert GpuFit().filter(make_pod("p", vgpu=800), node) == "Insufficient nvidia.com/vgpu"


@settings(max_examples=150, deadline=None)
@given(
    devices=st.lists(
        st.tuples(st.integers(min_value=0, max_value=1300), st.booleans()), max_size=6
    ),
    milli=st.integers(min_value=1, max_value=999),
)
def test_fractional_fit_iff_some_healthy_device_has_room(
    devices: list[tuple[int, bool]], milli: int
) -> None:
    node = gpu_node([taken for taken, _ in devices], [ok for _, ok in devices])
    pod = make_pod("p", vgpu=milli)
    assert pod.gpu.fractional and not pod.problems
    reason = GpuFit().filter(pod, node)
    fits = any(ok and 1000 - taken >= milli for taken, ok in devices)
    assert (reason is None) == fits
    if not fits:
        usable = sum(max(0, 1000 - taken) for taken, ok in devices if ok)
        if usable >= milli:
            assert reason == f"node(s) had no single GPU with {milli}/1000 free"
        else:
            assert reason == "Insufficient nvidia.com/vgpu"
