"""The Grafana dashboard cannot drift from the metrics: every series its PromQL names, and
every label it groups or filters by, exists in the scheduler's own registry or in the
node agent's (its DCGM-named GPU series included); and every metric either exports is
shown somewhere."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry

from policies.profile import build_profile
from scheduler.agent.health import HealthBook
from scheduler.agent.metrics import GpuCollector, Holding
from scheduler.core import SchedulingCore
from scheduler.metrics import SchedulerMetrics
from scheduler.sim.objects import node_object
from tests.agent import PCIE_BOX, FakeNvml
from tests.deploy.render import DEPLOY

DASHBOARD = DEPLOY / "grafana" / "gang-scheduler.json"
NAME = re.compile(r"\b(?:gang_scheduler_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)")
SELECTOR = re.compile(r"\b(gang_scheduler_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\{([^}]*)\}")
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
    with its label sets, once the core has seen a GPU node (series by GPU model exist
    only for models the cluster has)."""
    core = SchedulingCore(build_profile("binpack"))
    core.apply_node("ADDED", node_object("gpu-1", cpu="8", memory="64Gi", gpus=2, model="T4"), 0)
    metrics = SchedulerMetrics()
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
        for registry in (SchedulerMetrics().registry, agent_registry())
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
        used: set[str] = {"le"}
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
    (variable,) = board["templating"]["list"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"]
