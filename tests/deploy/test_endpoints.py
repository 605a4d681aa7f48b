"""The deployed endpoints (docs/security.md, "Endpoints"): the debug listener on the pod's
loopback only, declared nowhere; the Service, the ServiceMonitor and the probes on the
public listener, whose metrics name no tenant."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import kubernetes_validate

from scheduler.process.config import parse_config
from tests.deploy.render import DEPLOY, one, rendered, scheduler_config_text


def test_the_debug_listener_is_loopback_only_and_declared_nowhere() -> None:
    objects = rendered()
    http = parse_config(scheduler_config_text(objects)).http
    assert http.debug_port and ipaddress.ip_address(http.debug_address).is_loopback
    deployment = one(objects, "Deployment", "gang-scheduler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    declared = {port["containerPort"] for port in container["ports"]}
    assert declared == {http.port}
    service = one(objects, "Service", "gang-scheduler-metrics")
    assert {port["port"] for port in service["spec"]["ports"]} == {http.port}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["port"] == container["ports"][0]["name"] and get.get("scheme", "HTTP") == (
            "HTTP"
        )


def test_the_networkpolicy_component_admits_only_the_metrics_port(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(DEPLOY, tmp_path)}]\n"
        f"components: [{os.path.relpath(DEPLOY, tmp_path)}/components/networkpolicy]\n"
    )
    objects = rendered(tmp_path)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32", strict=True)
    policy = one(objects, "NetworkPolicy", "gang-scheduler-metrics")
    deployment = one(objects, "Deployment", "gang-scheduler")
    template = deployment["spec"]["template"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= (
        template["metadata"]["labels"].items()
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress to the API untouched
    (rule,) = policy["spec"]["ingress"]
    (container,) = template["spec"]["containers"]
    assert rule["ports"] == [{"port": container["ports"][0]["name"], "protocol": "TCP"}]
    assert "NetworkPolicy" not in {o["kind"] for o in rendered()}  # optional
    # The node agents' metrics name the pods holding each GPU: the same rule for them.
    agents = one(objects, "NetworkPolicy", "gang-scheduler-node-agent-metrics")
    daemonset = one(objects, "DaemonSet", "gang-scheduler-node-agent")
    agent_template = daemonset["spec"]["template"]
    assert agents["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert agents["spec"]["podSelector"]["matchLabels"].items() <= (
        agent_template["metadata"]["labels"].items()
    )
    (agent_rule,) = agents["spec"]["ingress"]
    (agent,) = agent_template["spec"]["containers"]
    assert agent_rule["ports"] == [{"port": agent["ports"][0]["name"], "protocol": "TCP"}]
    assert agent_rule["from"] == rule["from"]
