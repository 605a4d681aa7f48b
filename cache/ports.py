"""Host ports: what a pod asks for on its node's network, and what a node has taken.

Semantics are kube-scheduler's NodePorts (framework HostPortInfo): only ports of the
pod's regular containers with a hostPort above 0 count (init containers are not
read); an empty hostIP means 0.0.0.0 and an empty protocol TCP. A port bound on
0.0.0.0 conflicts with the same (protocol, port) on any address; a port on a
specific address conflicts with the same (protocol, port) on that address or on
0.0.0.0.

A pod with `hostNetwork: true` uses its containers' ports on the node itself: the API
server defaults each hostPort to its containerPort then, and so does the parser here,
so that objects built by hand (tests, the simulator) behave as stored ones do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from cache.limits import shown

ANY_ADDRESS = "0.0.0.0"
DEFAULT_PROTOCOL = "TCP"
_MAX_PORT = 65535


class HostPort(NamedTuple):
    ip: str
    protocol: str
    port: int


def parse_host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """The host ports a pod's regular containers ask for, sanitised, in spec order.
    Raises ValueError on a port that is not a whole number from 1 to 65535."""
    host_network = spec.get("hostNetwork") is True
    ports: list[HostPort] = []
    for container in spec.get("containers") or ():
        for raw in container.get("ports") or ():
            number = raw.get("hostPort")
            if not number and host_network:
                number = raw.get("containerPort")
            if number is None or number == 0:
                continue
            if isinstance(number, bool) or not isinstance(number, int):
                raise ValueError(f"hostPort {shown(number)} is not a whole number")
            if not 0 < number <= _MAX_PORT:
                raise ValueError(f"hostPort {shown(number)} is outside 1-{_MAX_PORT}")
            ip = str(raw.get("hostIP") or ANY_ADDRESS)
            protocol = str(raw.get("protocol") or DEFAULT_PROTOCOL)
            ports.append(HostPort(ip, protocol, number))
    return tuple(ports)


# (protocol, port) -> address -> how many pods on the node hold it. Counted, not a set:
# pods placed by others (static pods, another scheduler) may double-book a port, and
# removing one of them must not free the port the other still holds.
UsedPorts = dict[tuple[str, int], dict[str, int]]


def take_ports(used: UsedPorts, ports: Sequence[HostPort]) -> None:
    for ip, protocol, port in ports:
        holders = used.setdefault((protocol, port), {})
        holders[ip] = holders.get(ip, 0) + 1


def release_ports(used: UsedPorts, ports: Sequence[HostPort]) -> None:
    for ip, protocol, port in ports:
        holders = used.get((protocol, port))
        if holders is None or ip not in holders:
            continue
        if holders[ip] > 1:
            holders[ip] -= 1
        else:
            del holders[ip]
            if not holders:
                del used[(protocol, port)]


def copy_ports(used: UsedPorts) -> UsedPorts:
    return {key: dict(holders) for key, holders in used.items()}


def conflicts(used: UsedPorts, wanted: HostPort) -> bool:
    """Whether `wanted` clashes with a port already taken on the node."""
    holders = used.get((wanted.protocol, wanted.port))
    if not holders:
        return False
    if wanted.ip == ANY_ADDRESS:
        return True
    return ANY_ADDRESS in holders or wanted.ip in holders
