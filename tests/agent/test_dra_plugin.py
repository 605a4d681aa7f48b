"""The node agent's kubelet DRA plugin against a fake kubelet (registration, then
NodePrepareResources / NodeUnprepareResources over real gRPC on unix sockets), with
the claims read from the API emulator through the real client, and the CDI specs it
writes: each container gets exactly the allocated GPUs; hostile allocations are
refused with a clear error; repeated and interrupted calls come out the same."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler.agent import cdi
from scheduler.agent import dra_api as api
from scheduler.agent.deviceplugin import DevicePluginConfig
from scheduler.agent.discovery import discover
from scheduler.agent.dra_plugin import DraPlugin, DraPluginConfig, KubeClaimApi
from scheduler.agent.dra_slices import DRIVER
from scheduler.agent.publisher import AgentOptions, serve
from scheduler.kube.client import create_client
from tests.agent import H100_BOX, PCIE_BOX, FakeNvml
from tests.agent.dra_kubelet import FakeDraKubelet
from tests.dra_builders import allocated, claim_obj, exactly
from tests.factories import node_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.kubeapi.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.waiting import HANG, eventually

NODE = "gpu-node-1"
UID = "6f1c2a0e-1111-4c2b-9d1e-000000000001"


@dataclass
class Setup:
    emulator: KubeApiEmulator
    plugin: DraPlugin
    kubelet: FakeDraKubelet
    cdi_dir: Path

    def claim(
        self, name: str, *devices: tuple[str, str, str], uid: str = UID, **extra: Any
    ) -> api.Claim:
        """A claim allocated (driver, pool, device) triples, stored in the API."""
        allocation = allocated(*devices) if devices else None
        obj = claim_obj(name, [exactly()], allocation=allocation, uid=uid)
        for result in (
            (obj.get("status") or {}).get("allocation", {}).get("devices", {}).get("results", [])
        ):
            result.update(extra)
        self.emulator.put(RESOURCE_CLAIMS, obj)
        return api.Claim("ns", uid, name)

    def spec(self, uid: str = UID) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(cdi.spec_path(self.cdi_dir, uid).read_text())
        return loaded


@asynccontextmanager
async def running(
    socket_dir: Path, tmp_path: Path, machine: Any = PCIE_BOX, register: bool = True
) -> AsyncIterator[Setup]:
    async with KubeApiEmulator() as emulator:
        config_path = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        client = await create_client(str(config_path))
        discovery = discover(FakeNvml(machine))
        config = DraPluginConfig(
            NODE,
            registry_dir=socket_dir / "registry",
            plugins_dir=socket_dir / "plugins",
            cdi_dir=tmp_path / "cdi",
        )
        plugin = DraPlugin(config, KubeClaimApi(client), lambda: discovery)
        kubelet = FakeDraKubelet(config.registry_dir)
        try:
            await plugin.start()
            if register:
                await kubelet.register()
            yield Setup(emulator, plugin, kubelet, config.cdi_dir)
        finally:
            plugin.stop()
            await plugin._stop_servers()
            await client.close()


# --- registration ------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_the_kubelet_registers_the_plugin(socket_dir: Path, tmp_path: Path) -> None:
    async with running(socket_dir, tmp_path, register=False) as s:
        assert not s.plugin.registered
        info = await s.kubelet.register()
        assert info == api.PluginInfo(
            api.DRA_PLUGIN_TYPE,
            DRIVER,
            str(socket_dir / "plugins" / DRIVER / "dra.sock"),
            ("v1.DRAPlugin",),
        )
        assert (socket_dir / "registry" / f"{DRIVER}-reg.sock").is_socket()
        assert s.plugin.registered and s.plugin.registrations == 1
        assert s.kubelet.notified == [api.RegistrationStatus(True)]

        await s.kubelet.register(refuse="version mismatch")
        assert not s.plugin.registered


@pytest.mark.asyncio
async def test_a_wiped_socket_is_served_again_and_registered_anew(
    socket_dir: Path, tmp_path: Path
) -> None:
    async with running(socket_dir, tmp_path) as s:
        s.plugin.config.registration_socket.unlink()
        await s.plugin.check_sockets()
        assert s.plugin.config.registration_socket.is_socket()
        assert not s.plugin.registered  # until the kubelet's watcher comes back
        await s.kubelet.register()
        assert s.plugin.registrations == 2
        claim = s.claim("train", (DRIVER, NODE, "gpu-0"))
        assert not (await s.kubelet.prepare(claim)).claims[UID].error


# --- prepare and unprepare ---------------------------------------------------------------------
@pytest.mark.asyncio
async def test_prepare_writes_a_cdi_spec_with_exactly_the_allocated_gpus(
    socket_dir: Path, tmp_path: Path
) -> None:
    async with running(socket_dir, tmp_path) as s:
        claim = s.claim("train", (DRIVER, NODE, "gpu-1"), (DRIVER, NODE, "gpu-3"))
        answer = (await s.kubelet.prepare(claim)).claims[UID]
        assert answer.error == ""
        assert answer.devices == (
            api.PreparedDevice(("gpu",), NODE, "gpu-1", (f"{cdi.KIND}={UID}-0",)),
            api.PreparedDevice(("gpu",), NODE, "gpu-3", (f"{cdi.KIND}={UID}-1",)),
        )
        spec = s.spec()
        assert spec["cdiVersion"] == "0.6.0" and spec["kind"] == "k8s.gpu.gang-scheduler.io/claim"
        by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
        first = by_name[f"{UID}-0"]
        assert first["deviceNodes"] == [{"path": "/dev/nvidia1"}]
        assert first["env"] == ["NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"]
        assert [m["containerPath"] for m in first["mounts"]] == [
            f"/var/run/nvidia-container-devices/{PCIE_BOX.gpus[1].uuid}"
        ]
        assert by_name[f"{UID}-1"]["deviceNodes"] == [{"path": "/dev/nvidia3"}]
        # The driver's control nodes, whatever device a container uses.
        assert spec["containerEdits"]["deviceNodes"] == [
            {"path": "/dev/nvidiactl"},
            {"path": "/dev/nvidia-uvm"},
            {"path": "/dev/nvidia-uvm-tools"},
        ]
        # No other GPU of the node is named anywhere in the spec.
        text = json.dumps(spec)
        for other in (0, 2):
            assert PCIE_BOX.gpus[other].uuid not in text and f"/dev/nvidia{other}" not in text

        assert (await s.kubelet.unprepare(claim)).claims == {UID: api.UnprepareResult()}
        assert not cdi.spec_path(s.cdi_dir, UID).exists()
        # Unprepared already: still no error.
        assert (await s.kubelet.unprepare(claim)).claims == {UID: api.UnprepareResult()}


@pytest.mark.asyncio
async def test_a_share_carries_its_share_id_and_milli(socket_dir: Path, tmp_path: Path) -> None:
    async with running(socket_dir, tmp_path) as s:
        claim = s.claim(
            "notebook",
            (DRIVER, NODE, "gpu-2"),
            shareID="3b1f0c5e-aaaa-4bbb-8ccc-000000000002",
            consumedCapacity={"milli": "300"},
        )
        answer = (await s.kubelet.prepare(claim)).claims[UID]
        assert answer.devices[0].share_id == "3b1f0c5e-aaaa-4bbb-8ccc-000000000002"
        edits = s.spec()["devices"][0]["containerEdits"]
        assert "GANG_SCHEDULER_GPU_2_MILLI=300" in edits["env"]


@pytest.mark.asyncio
async def test_prepare_is_idempotent_and_survives_a_restart(
    socket_dir: Path, tmp_path: Path
) -> None:
    async with running(socket_dir, tmp_path) as s:
        claim = s.claim("train", (DRIVER, NODE, "gpu-0"))
        first = await s.kubelet.prepare(claim)
        assert first.claims[UID].devices
        assert await s.kubelet.prepare(claim) == first
        # An interrupted write of another claim left its temporary file.
        leftover = cdi.spec_path(s.cdi_dir, "0b0b").with_suffix(".json.tmp")
        leftover.write_text("{")
        # The agent restarts; the claim is gone from the API meanwhile: the kubelet's
        # repeated call is answered from the spec file, which is the agent's record.
        s.emulator.delete(RESOURCE_CLAIMS, "ns", "train")
        await s.plugin._stop_servers()
        await s.plugin.start()
        assert not leftover.exists()
        await s.kubelet.register()
        assert await s.kubelet.prepare(claim) == first


@pytest.mark.asyncio
async def test_a_torn_spec_file_is_prepared_again(socket_dir: Path, tmp_path: Path) -> None:
    async with running(socket_dir, tmp_path) as s:
        claim = s.claim("train", (DRIVER, NODE, "gpu-0"))
        s.cdi_dir.mkdir(parents=True)
        cdi.spec_path(s.cdi_dir, UID).write_text('{"cdiVersion": "0.6.0", "devi')
        answer = (await s.kubelet.prepare(claim)).claims[UID]
        assert answer.error == "" and answer.devices[0].device_name == "gpu-0"
        assert s.spec()["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]


# --- hostile and wrong claims ------------------------------------------------------------------
REFUSALS: list[tuple[str, tuple[tuple[str, str, str], ...], str]] = [
    (
        "a device of another node",
        ((DRIVER, "gpu-node-2", "gpu-0"),),
        "belongs to node 'gpu-node-2', not to this node 'gpu-node-1'",
    ),
    (
        "only devices of another driver",
        (("gpu.nvidia.com", NODE, "gpu-0"),),
        "has no device of driver gpu.gang-scheduler.io in its allocation (it names gpu.nvidia.com)",
    ),
    (
        "ours on another node beside another driver's here",
        (("gpu.nvidia.com", NODE, "gpu-0"), (DRIVER, "gpu-node-2", "gpu-1")),
        "belongs to node 'gpu-node-2'",
    ),
    ("a device this node lacks", ((DRIVER, NODE, "gpu-9"),), "has no such device"),
    ("no allocation", (), "is not allocated"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("case", "devices", "message"), REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_prepare_refuses_what_this_node_cannot_serve(
    socket_dir: Path, tmp_path: Path, case: str, devices: Any, message: str
) -> None:
    async with running(socket_dir, tmp_path) as s:
        claim = s.claim("bad", *devices)
        good = s.claim("good", (DRIVER, NODE, "gpu-0"), uid="6f1c2a0e-2222-4c2b-9d1e-000000000002")
        answer = await s.kubelet.prepare(claim, good)
        assert message in answer.claims[UID].error, case
        assert answer.claims[UID].error.startswith("ResourceClaim ns/bad")
        assert not cdi.spec_path(s.cdi_dir, UID).exists()
        # The other claim of the same call is prepared.
        assert answer.claims[good.uid].error == "" and answer.claims[good.uid].devices


@pytest.mark.asyncio
async def test_prepare_refuses_a_replaced_claim_a_missing_one_and_a_forged_uid(
    socket_dir: Path, tmp_path: Path
) -> None:
    async with running(socket_dir, tmp_path) as s:
        s.claim("train", (DRIVER, NODE, "gpu-0"))
        replaced = api.Claim("ns", "6f1c2a0e-9999-4c2b-9d1e-000000000009", "train")
        missing = api.Claim("ns", "6f1c2a0e-8888-4c2b-9d1e-000000000008", "nope")
        forged = api.Claim("ns", "../../etc/cron.d/x", "train")
        answer = await s.kubelet.prepare(replaced, missing, forged)
        assert "it was replaced" in answer.claims[replaced.uid].error
        assert answer.claims[missing.uid].error == "ResourceClaim ns/nope does not exist"
        assert "is not a uid" in answer.claims[forged.uid].error
        assert "is not a uid" in (await s.kubelet.unprepare(forged)).claims[forged.uid].error
        assert not (tmp_path / "etc").exists() and list(s.cdi_dir.glob("*")) == []


@pytest.mark.asyncio
async def test_a_partition_or_a_bad_share_is_refused(socket_dir: Path, tmp_path: Path) -> None:
    async with running(socket_dir, tmp_path, machine=H100_BOX) as s:
        part = s.claim("mig", (DRIVER, NODE, "gpu-0-mig-1g10gb-19-0"))
        assert "is a MIG partition" in (await s.kubelet.prepare(part)).claims[UID].error
        for value in ("1500", "-1", "lots"):
            share = s.claim("share", (DRIVER, NODE, "gpu-1"), consumedCapacity={"milli": value})
            error = (await s.kubelet.prepare(share)).claims[UID].error
            assert "consumed capacity" in error, value


# --- the command -------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_the_agent_in_dra_mode_publishes_registers_and_prepares(
    socket_dir: Path, tmp_path: Path
) -> None:
    """`node-agent --dra`: the slices published, the plugin registered with the kubelet,
    a claim allocated from the slices prepared, /readyz's condition met."""
    async with KubeApiEmulator() as emulator:
        emulator.put_node(node_obj(NODE))
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        options = AgentOptions(
            node_name=NODE,
            kubeconfig=str(kubeconfig),
            interval=3600,
            metrics_port=None,
            attribution_interval=0,
            pod_resources_interval=0,
            dra=True,
            sysfs=str(tmp_path / "no-sysfs"),
            kubelet_registry_dir=str(socket_dir / "registry"),
            kubelet_plugins_dir=str(socket_dir / "plugins"),
            cdi_dir=str(tmp_path / "cdi"),
        )
        agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX)))
        kubelet = FakeDraKubelet(socket_dir / "registry")
        try:
            await eventually(lambda: len(emulator.objects(RESOURCE_SLICES)) == 4, "slices")
            await eventually(
                lambda: (socket_dir / "registry" / f"{DRIVER}-reg.sock").exists(), "socket"
            )
            await kubelet.register()
            published = {
                d["name"] for s in emulator.objects(RESOURCE_SLICES) for d in s["spec"]["devices"]
            }
            assert published == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
            emulator.put(
                RESOURCE_CLAIMS,
                claim_obj(
                    "train", [exactly()], allocation=allocated((DRIVER, NODE, "gpu-2")), uid=UID
                ),
            )
            answer = (await kubelet.prepare(api.Claim("ns", UID, "train"))).claims[UID]
            assert answer.error == "" and answer.devices[0].device_name == "gpu-2"
            assert cdi.spec_path(tmp_path / "cdi", UID).exists()

            # The kubelet restarts: it deletes its node's slices, then registers the
            # plugins again; the agent publishes at once, not an interval (1 h) later.
            for item in emulator.objects(RESOURCE_SLICES):
                emulator.delete(RESOURCE_SLICES, "", item["metadata"]["name"])
            assert emulator.objects(RESOURCE_SLICES) == []
            await kubelet.register()
            await eventually(lambda: len(emulator.objects(RESOURCE_SLICES)) == 4, "republished")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # serve's handler stops everything
            assert await asyncio.wait_for(agent, HANG) == 0
        # Stopped: its sockets are gone (the kubelet forgets the plugin), the spec stays.
        assert not (socket_dir / "registry" / f"{DRIVER}-reg.sock").exists()
        assert cdi.spec_path(tmp_path / "cdi", UID).exists()


@pytest.mark.asyncio
async def test_dra_mode_refuses_to_start_beside_the_device_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both would hand out the node's GPUs: one by the scheduler's annotations, the other
    by claims, so one GPU could go to two pods."""
    options = AgentOptions(node_name=NODE, dra=True, metrics_port=None)
    config = DevicePluginConfig(node_name="", directory=tmp_path)
    assert await serve(options, FakeNvml(PCIE_BOX), config) == 2
    assert "add --no-device-plugin" in capsys.readouterr().err
