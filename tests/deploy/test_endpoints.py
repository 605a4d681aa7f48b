"""The deployed endpoints (docs/security-endpoints.md): the debug listener on the pod's
loopback only, declared nowhere; the Service, the ServiceMonitor and the probes on the
public listener, whose metrics name no tenant."""

from __future__ import annotations

import ipaddress

from scheduler.config import parse_config
from tests.deploy.render import one, rendered, scheduler_config_text


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
