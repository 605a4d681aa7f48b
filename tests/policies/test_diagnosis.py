"""Failure diagnosis: each node charged to its first failing filter, and the histogram
summarised as kube-scheduler's FitError message."""

from __future__ import annotations

from collections import Counter

from cache.gpu import PRODUCT_LABEL
from policies.diagnosis import diagnose, first_failure, summarize
from policies.filters import default_filters
from tests.factories import make_node, make_pod


def test_node_is_charged_to_the_first_failing_filter() -> None:
    filters = default_filters()
    cordoned_and_tainted = make_node(
        "n",
        unschedulable=True,
        taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        gpus=1,
        model="V100",
    )
    pod = make_pod("p", gpus=4, node_selector={PRODUCT_LABEL: "A100"})
    assert first_failure(filters, pod, cordoned_and_tainted) == "node(s) were unschedulable"
    # The wrong model is named before the missing GPUs, and before NodeAffinity's
    # vaguer reason for the same nodeSelector.
    v100 = make_node("v", gpus=1, model="V100")
    assert first_failure(filters, pod, v100) == "node(s) didn't match GPU type A100"
    small_a100 = make_node("a", gpus=2, model="A100")
    assert first_failure(filters, pod, small_a100) == "Insufficient nvidia.com/gpu"
    assert first_failure(filters, pod, make_node("big", gpus=8, model="A100")) is None


def test_no_filters_means_every_node_fits() -> None:
    assert first_failure([], make_pod("p", gpus=1), make_node("cpu")) is None


def test_diagnose_counts_fitting_nodes_and_reasons() -> None:
    nodes = [make_node(f"a100-{i}", gpus=2, model="A100") for i in range(8)]
    nodes += [make_node(f"v100-{i}", gpus=8, model="V100") for i in range(4)]
    pod = make_pod("p", gpus=4, node_selector={PRODUCT_LABEL: "A100"})
    fits, reasons = diagnose(default_filters(), pod, nodes)
    assert fits == 0
    assert reasons == Counter(
        {"Insufficient nvidia.com/gpu": 8, "node(s) didn't match GPU type A100": 4}
    )
    assert summarize(len(nodes), reasons) == (
        "0/12 nodes are available: 8 Insufficient nvidia.com/gpu, "
        "4 node(s) didn't match GPU type A100."
    )


def test_diagnose_with_some_nodes_fitting() -> None:
    nodes = [make_node("big", gpus=8, model="A100"), make_node("cpu", cpu="4")]
    fits, reasons = diagnose(default_filters(), make_pod("p", gpus=1), nodes)
    assert (fits, reasons) == (1, Counter({"Insufficient nvidia.com/gpu": 1}))
    assert summarize(2, reasons) == "1/2 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_fragmentation_reason_aggregates_across_nodes() -> None:
    nodes = [make_node(f"n{i}", gpus=2, model="T4") for i in range(3)]
    for node in nodes:
        node.charge({}, ((0, 700), (1, 700)))
    fits, reasons = diagnose(default_filters(), make_pod("p", vgpu=500), nodes)
    assert fits == 0
    assert summarize(3, reasons) == (
        "0/3 nodes are available: 3 node(s) had no single GPU with 500/1000 free."
    )


def test_reasons_ordered_by_count_then_alphabetically() -> None:
    reasons = Counter(
        {
            "Insufficient cpu": 2,
            "node(s) were unschedulable": 5,
            "Insufficient memory": 2,
            "Too many pods": 1,
        }
    )
    assert summarize(10, reasons) == (
        "0/10 nodes are available: 5 node(s) were unschedulable, 2 Insufficient cpu, "
        "2 Insufficient memory, 1 Too many pods."
    )


def test_empty_cluster_says_so() -> None:
    assert summarize(0, Counter()) == "0/0 nodes are available: no nodes in the cluster."


def test_every_node_available() -> None:
    assert summarize(5, Counter()) == "5/5 nodes are available."


def test_zero_counts_are_left_out() -> None:
    reasons = Counter({"Insufficient cpu": 3, "Too many pods": 0})
    assert summarize(3, reasons) == "0/3 nodes are available: 3 Insufficient cpu."
