"""The Grafana dashboard cannot drift from the metrics: every series its PromQL names, and
every label it groups or filters by, exists in the scheduler's own registry or in the
node agent's (its DCGM-named GPU series included); every metric either exports is
shown somewhere (the process collectors' too); and every query is filtered by the
dashboard's `cluster` variable, and by its `namespace` variable exactly where the series
has a namespace label."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry

from policies.profile import build_profile
from scheduler.agent.health import HealthBook
from scheduler.agent.metrics import GpuCollector, Holding
from scheduler.cycle.core import SchedulingCore
from scheduler.process.metrics import SchedulerMetrics
from scheduler.sim.objects import node_object
from tests.agent import PCIE_BOX, FakeNvml
from tests.cache.test_quota import quota_obj
from tests.deploy.render import DEPLOY
from tests.dra_builders import DRIVER, allocated, claim_obj, device, exactly, slice_obj
from tests.factories import pod_obj

DASHBOARD = DEPLOY / "grafana" / "gang-scheduler.json"
SERIES = r"gang_scheduler_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+|process_[a-z0-9_]+|python_[a-z0-9_]+"
NAME = re.compile(rf"\b(?:{SERIES})")
SELECTOR = re.compile(rf"\b({SERIES})\{{([^}}]*)\}}")
# A series name with its selector, if any: every occurrence in an expression.
OCCURRENCE = re.compile(rf"\b({SERIES})(\{{[^}}]*\}})?")
# Labels Prometheus adds to every series it scrapes (target labels), and the one a
# multi-cluster setup adds (external labels or relabelling): not in our registries.
TARGET_LABELS = {"instance", "job", "cluster"}
MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def panels(container: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in container.get("panels", []):
        yield panel
        yield from panels(panel)


def expressions() -> list[str]:
    return [t["expr"] for p in panels(dashboard()) for t in p.get("targets", [])]


def registry_samples() -> dict[str, list[dict[str, str]]]:
    """Every sample name the registry exposes (with _total, _bucket, _count, _sum...),
    with its label sets, once the core has seen a GPU node and a DRA device taken (series
    by GPU model or driver exist only for models the cluster has and drivers in use)."""
    core = SchedulingCore(build_profile("binpack"))
    core.apply_node("ADDED", node_object("gpu-1", cpu="8", memory="64Gi", gpus=2, model="T4"), 0)
    # A waiting gang and a quota, so that the opt-in namespace series have samples.
    core.apply_elasticquota("ADDED", quota_obj("team-a", {}, {"nvidia.com/gpu": 1}), 0)
    core.apply_pod("ADDED", pod_obj("w-0", namespace="team-a", gang="w", min_member=2), 0)
    # A ResourceSlice and a claim allocated from it, so that the DRA series have one.
    core.apply_dra_object("resourceslices", "ADDED", slice_obj("s", [device("d")], node="gpu-1"), 0)
    allocation = allocated((DRIVER, "gpu-1", "d"))
    core.apply_dra_object(
        "resourceclaims", "ADDED", claim_obj("c", [exactly()], allocation=allocation), 0
    )
    core.refresh(0)
    metrics = SchedulerMetrics(namespace_labels=True)
    metrics.observe_core(core)
    samples: dict[str, list[dict[str, str]]] = {}
    for family in [*metrics.registry.collect(), *agent_registry().collect()]:
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return samples


def agent_registry() -> CollectorRegistry:
    """The node agent's registry on a 4-GPU box (NVML faked) with one GPU shared by
    two pods and one XID seen, so that every series and label it can have is there."""
    book = HealthBook()
    book.note_xid(PCIE_BOX.gpus[0].uuid, 79)
    held = [Holding(0, 500, "ml", "a", "main", "g"), Holding(0, 500, "ml", "b", "main", "")]
    registry = CollectorRegistry()
    registry.register(GpuCollector(FakeNvml(PCIE_BOX), "gpu-1", holders=lambda: held, book=book))
    return registry


def families() -> set[str]:
    return {
        family.name
        for registry in (SchedulerMetrics(namespace_labels=True).registry, agent_registry())
        for family in registry.collect()
    }


def test_every_series_in_the_dashboard_exists() -> None:
    samples = registry_samples()
    exprs = expressions()
    assert len(exprs) >= 10
    for expr in exprs:
        names = NAME.findall(expr)
        assert names, expr
        for name in names:
            assert name in samples, f"{name} (in {expr!r}) is not a metric of the scheduler"


def test_every_label_matcher_and_grouping_names_a_real_label_and_value() -> None:
    samples = registry_samples()
    labels_of = {name: set().union(*(s.keys() for s in sets)) for name, sets in samples.items()}
    for expr in expressions():
        used: set[str] = {"le"} | TARGET_LABELS
        for name in NAME.findall(expr):
            used |= labels_of[name]
        for name, matchers in SELECTOR.findall(expr):
            for label, value in MATCHER.findall(matchers):
                assert any(s.get(label) == value for s in samples[name]), (name, label, value)
        for group in GROUPING.findall(expr):
            for label in filter(None, (g.strip() for g in group.split(","))):
                assert label in used, f"{expr!r} groups by {label!r}, which it does not have"


def test_every_metric_is_on_the_dashboard() -> None:
    shown = {name for expr in expressions() for name in NAME.findall(expr)}
    for family in families():
        assert any(name.startswith(family) for name in shown), f"{family} is on no panel"


def test_panels_use_the_datasource_variable_and_have_unique_ids() -> None:
    board = dashboard()
    assert board["uid"] == "gang-scheduler"
    variable, *_ = board["templating"]["list"]
    assert variable["name"] == "datasource"
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"]


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


def test_cluster_and_namespace_variables_come_from_the_data_source() -> None:
    found = variables()
    assert list(found) == ["datasource", "cluster", "namespace"]
    for name in ("cluster", "namespace"):
        variable = found[name]
        assert variable["type"] == "query"
        assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        query = variable["query"]["query"]
        assert variable["definition"] == query
        assert query.startswith("label_values(") and query.endswith(f", {name})"), query
        # "All" matches every value and series without the label (a single cluster,
        # where no cluster label is set; a GPU no pod holds).
        assert variable["includeAll"] is True and variable["allValue"] == ".*"
        assert variable["multi"] is True
        assert variable["refresh"] == 2  # on time range change: values follow the data
    # Every series a variable reads its values from exists with that label.
    samples = registry_samples()
    cluster_source = NAME.findall(found["cluster"]["query"]["query"])
    assert cluster_source == ["gang_scheduler_build_info"]
    namespace_query = found["namespace"]["query"]["query"]
    sources = re.findall(rf"\b(?:{SERIES})", namespace_query)
    assert sources, namespace_query
    for source in sources:
        assert any("namespace" in labels for labels in samples[source]), source
    # The namespaces offered are those of the chosen clusters.
    assert 'cluster=~"$cluster"' in namespace_query


def test_every_query_is_filtered_by_the_variables_where_the_label_exists() -> None:
    samples = registry_samples()
    has_namespace = {name for name, sets in samples.items() if any("namespace" in s for s in sets)}
    assert "gang_scheduler_namespace_pending_pods" in has_namespace
    assert "DCGM_FI_DEV_GPU_UTIL" in has_namespace
    filtered = 0
    for expr in expressions():
        for name, selector in OCCURRENCE.findall(expr):
            assert 'cluster=~"$cluster"' in selector, f"{name} in {expr!r}: no $cluster"
            wants = name in has_namespace
            has = 'namespace=~"$namespace"' in selector
            problem = "missing" if wants else "on a series without the label"
            assert has == wants, f"{name} in {expr!r}: $namespace {problem}"
            filtered += has
    assert filtered >= 5  # the namespace rows and the node agent's per-pod series


def test_the_dashboard_shows_waiting_by_reason_namespace_and_the_process() -> None:
    shown = {name for expr in expressions() for name in NAME.findall(expr)}
    for name in (
        "gang_scheduler_pending_pods_by_reason",
        "gang_scheduler_namespace_pending_pods",
        "gang_scheduler_namespace_quota_amount",
        "gang_scheduler_namespace_quota_pending_gangs",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "python_gc_collections_total",
    ):
        assert name in shown, name
    # process_* and python_* exist on every target Prometheus scrapes: each query keeps
    # one program's own by joining on a series only that program exports.
    for expr in expressions():
        if re.search(r"\b(?:process|python)_", expr):
            assert any(f"and on (cluster, instance) {own}{{" in expr for own in OWN.values()), expr


# The series a process row joins on: one only that program exports (build info for the
# scheduler; for the node agent, which has none, its GPU health gauge, since the
# DCGM-named series are also what NVIDIA's own exporter serves).
OWN = {
    "Process (scheduler replicas)": "gang_scheduler_build_info",
    "Node agent process": "gang_scheduler_node_agent_gpu_healthy",
}


def rows() -> dict[str, list[dict[str, Any]]]:
    """The dashboard's panels under each row (a row holds the panels after it, up to
    the next row, unless it is collapsed and holds them itself)."""
    found: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            current = found.setdefault(panel["title"], list(panel.get("panels", [])))
        else:
            current.append(panel)
    return found


def test_each_process_row_shows_only_its_own_program() -> None:
    scheduler = {f.name for f in SchedulerMetrics(namespace_labels=True).registry.collect()}
    agent = {f.name for f in agent_registry().collect()}
    by_row = rows()
    for title, own in OWN.items():
        # Only that program exports the series joined on, so no other target shows.
        others = agent if own in scheduler else scheduler
        assert (own in scheduler or own in agent) and own not in others, own
        assert title in by_row, f"no row {title!r}"
        exprs = [t["expr"] for p in by_row[title] for t in p["targets"]]
        shown = {name for expr in exprs for name in NAME.findall(expr)}
        assert {
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
        } <= shown, title
        for expr in exprs:
            join = f'and on (cluster, instance) {own}{{cluster=~"$cluster"}}'
            assert join in expr, f"{title}: {expr!r} is not restricted to {own}"
