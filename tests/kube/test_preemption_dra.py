"""Priority preemption for DRA devices end to end (issue 28): the scheduler runs against
the API emulator through its real client; the resourceclaim controller stand-in
(tests/kubeapi/resourceclaim_controller.py) releases the victims' claims when the test
says. A high-priority gang whose claims need the devices a low-priority gang's claims
hold evicts that gang, waits (saying so) while the controller has not yet released the
claims, and binds onto the devices once it has; no device is ever allocated to two
claims, as the emulator's history of every claim write shows."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.client import KubeClient
from tests.dra_objects import allocation, device_class_obj, slice_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_dra_writes import stored_as_created
from tests.kube.test_runner import (
    TEST_TIMEOUT,
    bound,
    fast_config,
    running_with,
    unschedulable_message,
)
from tests.kubeapi import (
    DEVICE_CLASSES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeApiEmulator,
    api_client,
)
from tests.kubeapi.resourceclaim_controller import FINALIZER, ResourceClaimController
from tests.kubeapi.resources import EVENTS
from tests.signed import signed, with_key
from tests.waiting import eventually, free_port

WAITING = "waiting for the resourceclaim controller to release their claims"


def member(name: str, index: int, priority: int, node: str = "") -> dict[str, Any]:
    """Member `index` of a gang of two using its own claim `<name>-<index>`; with
    `node`, bound there by this scheduler (signed) before the test starts it."""
    pod = pod_obj(
        f"{name}-{index}",
        gang=name,
        min_member=2,
        priority=priority,
        node_name=node,
        phase="Running" if node else "Pending",
    )
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-{index}"}]
    return signed(pod) if node else pod


def allocated_for(pod: dict[str, Any], device: str) -> dict[str, Any]:
    """The pod's claim as this scheduler left it: finalizer, allocation, reservedFor."""
    claim = stored_as_created(pod["spec"]["resourceClaims"][0]["resourceClaimName"])
    claim["metadata"]["finalizers"] = [FINALIZER]
    meta = pod["metadata"]
    claim["status"] = {
        "allocation": allocation("n", (device,)),
        "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
    }
    return claim


def devices_of(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def allocated_twice(api: KubeApiEmulator) -> list[tuple[int, tuple[str, str, str]]]:
    """(resourceVersion, device) wherever, in the history of every claim write, one
    device was allocated to two claims at once."""
    current: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    twice = []
    for change in api.store.of(RESOURCE_CLAIMS).history:
        key = (change.obj.namespace, change.obj.name)
        if change.kind == "DELETED":
            current.pop(key, None)
        else:
            current[key] = devices_of(change.obj.obj)
        counts = Counter(device for devices in current.values() for device in devices)
        twice += [(change.rv, device) for device, n in counts.items() if n > 1]
    return twice


def events(api: KubeApiEmulator, reason: str) -> dict[str, str]:
    return {
        e["involvedObject"]["name"]: e["message"]
        for e in api.objects(EVENTS)
        if e.get("reason") == reason
    }


@pytest.mark.asyncio
async def test_a_dra_gang_preempts_a_lower_one_and_binds_once_its_claims_are_released(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api, KubeClient(await api_client(api.base_url)) as kube:
            controller = ResourceClaimController(kube)
            api.put_node(node_obj("n", gpus=0))
            api.put(DEVICE_CLASSES, device_class_obj())
            api.put(RESOURCE_SLICES, slice_obj("n", gpus=2))
            low = [member("low", i, priority=1, node="n") for i in range(2)]
            for index, pod in enumerate(low):
                api.put(RESOURCE_CLAIMS, allocated_for(pod, f"gpu-{index}"))
                api.put_pod(pod)
            config = with_key(fast_config(free_port()), tmp_path)
            # A changed condition is written when the events window ends: a short one.
            events_config = dataclasses.replace(config.events, aggregation_window_seconds=0.2)
            config = dataclasses.replace(config, events=events_config)
            async with running_with(api, tmp_path, config):
                for i in range(2):
                    api.put(RESOURCE_CLAIMS, stored_as_created(f"high-{i}"))
                    api.put_pod(member("high", i, priority=10))
                await eventually(lambda: not bound(api, "low-"), "the low gang evicted")

                def waits_for_the_controller() -> bool:
                    pods = [api.get_pod("default", f"high-{i}") or {} for i in range(2)]
                    return all(WAITING in unschedulable_message(pod) for pod in pods)

                # Planned again once its victims were gone, it still finds the devices
                # allocated to their claims: it waits, naming them, and binds nothing.
                await eventually(waits_for_the_controller, "the gang waiting for the controller")
                message = unschedulable_message(api.get_pod("default", "high-0") or {})
                assert "default/low-0, default/low-1" in message, message
                assert not bound(api, "high-")
                claims = {c["metadata"]["name"]: c for c in api.objects(RESOURCE_CLAIMS)}
                assert not devices_of(claims["high-0"]) and not devices_of(claims["high-1"])
                await controller.sync()  # reservations of the pods gone removed, deallocated
                await eventually(lambda: len(bound(api, "high-")) == 2, "the high gang bound")
            claims = {c["metadata"]["name"]: c for c in api.objects(RESOURCE_CLAIMS)}
            assert not devices_of(claims["low-0"]) and not devices_of(claims["low-1"])
            taken = sorted(devices_of(claims["high-0"]) + devices_of(claims["high-1"]))
            assert [device for _, _, device in taken] == ["gpu-0", "gpu-1"]
            for i in range(2):
                reserved = claims[f"high-{i}"]["status"]["reservedFor"]
                assert [r["name"] for r in reserved] == [f"high-{i}"]
            assert allocated_twice(api) == []
            assert api.request_count("create", "pods", "eviction") == 2
            preempted = events(api, "Preempted")
            assert "the DRA devices of its claims default/low-0" in preempted["low-0"]
            preempting = events(api, "Preempting")
            assert "gpu.example.com/n/gpu-0, gpu.example.com/n/gpu-1" in preempting["high-0"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
