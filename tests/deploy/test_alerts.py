"""deploy/components/alerts: the PrometheusRule renders beside the base, names only
metrics the scheduler exposes, and every alert says what to do."""

from __future__ import annotations

import os
import re
from pathlib import Path

from scheduler.process.metrics import SchedulerMetrics
from tests.deploy.render import DEPLOY, one, rendered

NAME = re.compile(r"\bgang_scheduler_\w+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def exposed() -> set[str]:
    return {family.name for family in SchedulerMetrics().registry.collect()}


def base_name(metric: str) -> str:
    for suffix in SUFFIXES:
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def test_the_alerts_component_renders_and_names_real_metrics(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(DEPLOY, tmp_path)}]\n"
        f"components: [{os.path.relpath(DEPLOY, tmp_path)}/components/alerts]\n"
    )
    rule = one(rendered(tmp_path), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "kube-system"
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {r["alert"] for r in rules} == {
        "GangSchedulerDown",
        "GangSchedulerGangWaiting",
        "GangSchedulerBindFailures",
    }
    known = exposed()
    for alert in rules:
        names = NAME.findall(alert["expr"])
        assert names, alert["alert"]
        for name in names:
            assert base_name(name) in known, f"{alert['alert']}: {name} is not exposed"
        assert alert["labels"]["severity"] in {"critical", "warning"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", alert["for"])
    assert "PrometheusRule" not in {o["kind"] for o in rendered()}
