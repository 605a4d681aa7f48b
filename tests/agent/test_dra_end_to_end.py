"""The node agent's driver end to end: the agent publishes its node's slices through the
API emulator, the scheduler (`run_scheduler`) allocates a gang's claims from them (a
share each, and a whole GPU), and the agent's kubelet plugin prepares those claims for
the fake kubelet: CDI specs with the GPUs and shares the scheduler wrote."""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from cache.quantity import parse_quantity
from scheduler.agent import cdi
from scheduler.agent import dra_api as api
from scheduler.agent.discovery import discover
from scheduler.agent.dra_plugin import DraPlugin, DraPluginConfig, KubeClaimApi
from scheduler.agent.dra_publisher import KubeSliceApi, SlicePublisher
from scheduler.agent.dra_slices import DRIVER
from scheduler.kube.client import create_client
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.dra_kubelet import FakeDraKubelet
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import DEVICE_CLASSES, RESOURCE_CLAIMS, KubeApiEmulator, write_kubeconfig
from tests.waiting import eventually

NODE = "n0"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER}" && '
                        f'device.attributes["{DRIVER}"].type == "gpu"'
                    }
                }
            ]
        },
    }


def claim(name: str, milli: str | None) -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": DRIVER,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    if milli is not None:
        exactly["capacity"] = {"requests": {"milli": milli}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def member(name: str, gang: str, size: int) -> dict[str, Any]:
    pod = pod_obj(name, gang=gang, min_member=size)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    return pod


@pytest.mark.asyncio
async def test_slices_published_by_the_agent_are_allocated_and_prepared(
    socket_dir: Path, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as emulator:
            emulator.put_node(node_obj(NODE))
            emulator.put(DEVICE_CLASSES, device_class())
            config = write_kubeconfig(emulator.base_url, tmp_path / "agent-kubeconfig")
            client = await create_client(str(config))
            try:
                discovery = discover(FakeNvml(PCIE_BOX))
                publisher = SlicePublisher(KubeSliceApi(client), NODE, tmp_path / "no-sysfs")
                assert await publisher.publish(discovery)
                asks = {"share-0": "500", "share-1": "300", "whole-0": None}
                for name, milli in asks.items():
                    emulator.put(RESOURCE_CLAIMS, claim(name, milli))
                    emulator.put_pod(member(name, "train", len(asks)))
                async with running(emulator, tmp_path):
                    await eventually(lambda: len(bound(emulator)) == 3, "the gang bound")

                claims = {c["metadata"]["name"]: c for c in emulator.objects(RESOURCE_CLAIMS)}
                results = {
                    name: c["status"]["allocation"]["devices"]["results"][0]
                    for name, c in claims.items()
                }
                assert {r["driver"] for r in results.values()} == {DRIVER}
                assert {r["pool"] for r in results.values()} == {NODE}
                used: dict[str, Fraction] = {}
                for result in results.values():
                    milli = parse_quantity(result["consumedCapacity"]["milli"])
                    used[result["device"]] = used.get(result["device"], Fraction(0)) + milli
                assert parse_quantity(results["whole-0"]["consumedCapacity"]["milli"]) == 1000
                assert all(total <= 1000 for total in used.values())

                plugin = DraPlugin(
                    DraPluginConfig(
                        NODE,
                        registry_dir=socket_dir / "registry",
                        plugins_dir=socket_dir / "plugins",
                        cdi_dir=tmp_path / "cdi",
                    ),
                    KubeClaimApi(client),
                    lambda: discovery,
                )
                await plugin.start()
                try:
                    kubelet = FakeDraKubelet(socket_dir / "registry")
                    await kubelet.register()
                    asked = [
                        api.Claim("default", c["metadata"]["uid"], name)
                        for name, c in claims.items()
                    ]
                    answer = await kubelet.prepare(*asked)
                finally:
                    plugin.stop()
                    await plugin._stop_servers()
                for claim_asked in asked:
                    prepared = answer.claims[claim_asked.uid]
                    result = results[claim_asked.name]
                    assert prepared.error == ""
                    (device,) = prepared.devices
                    assert device.device_name == result["device"]
                    assert device.share_id == result.get("shareID", "")
                    spec = json.loads(cdi.spec_path(tmp_path / "cdi", claim_asked.uid).read_text())
                    (edits,) = [d["containerEdits"] for d in spec["devices"]]
                    index = int(result["device"].removeprefix("gpu-"))
                    assert edits["deviceNodes"] == [{"path": f"/dev/nvidia{index}"}]
                    milli = parse_quantity(result["consumedCapacity"]["milli"])
                    assert f"GANG_SCHEDULER_GPU_{index}_MILLI={milli}" in edits["env"]
            finally:
                await client.close()

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
