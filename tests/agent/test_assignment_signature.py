"""The device plugin checks the scheduler's signature itself (issue 26, docs/security.md):
without the admission policy, a tenant can write `gang-scheduler.io/gpu-devices` on its
own pod (at create, or by a patch before its container starts); the node agent as the
DaemonSet runs it (`serve`, default options) refuses any assignment whose node signature
does not verify, and serves the scheduler's."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import grpc.aio
import pytest

from cache.signing import NODE_SIGNATURE_ANNOTATION
from scheduler.agent.deviceplugin import SOCKET_NAME, DevicePluginConfig
from scheduler.agent.publisher import AgentOptions, serve
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.kubelet import FakeKubelet, PluginClient
from tests.agent.plugin_running import NODE, handed
from tests.agent.test_deviceplugin import UUIDS, ids_of, vgpu_pod
from tests.factories import node_obj
from tests.kubeapi import SECRETS, KubeApiEmulator, write_kubeconfig
from tests.signed import node_agent_secret, node_signed
from tests.waiting import HANG, eventually


@asynccontextmanager
async def agent(
    plugin_dir: Path, tmp_path: Path
) -> AsyncIterator[tuple[KubeApiEmulator, PluginClient]]:
    """The node agent command's serve() with its default options, against the emulator."""
    async with KubeApiEmulator() as emulator:
        emulator.put_node(node_obj(NODE))
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        kubelet = FakeKubelet(plugin_dir)
        await kubelet.start()
        options = AgentOptions(node_name=NODE, kubeconfig=str(kubeconfig), interval=30)
        config = DevicePluginConfig(node_name="", directory=plugin_dir, watch_interval=0.02)
        task = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX), config))
        client = PluginClient(plugin_dir / SOCKET_NAME)
        try:
            await eventually(lambda: len(kubelet.registrations) == 1)
            yield emulator, client
        finally:
            await client.close()
            os.kill(os.getpid(), signal.SIGTERM)  # serve's handler stops both
            assert await asyncio.wait_for(task, HANG) == 0
            await kubelet.stop()


async def refusal(client: PluginClient, milli: int) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.allocate(ids_of(0, milli))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return str(refused.value.details())


@pytest.mark.asyncio
async def test_a_forged_assignment_is_refused_and_the_schedulers_is_served(
    plugin_dir: Path, tmp_path: Path
) -> None:
    async with agent(plugin_dir, tmp_path) as (emulator, client):
        emulator.put(SECRETS, node_agent_secret())
        # Written by the tenant: no signature at all.
        emulator.put_pod(vgpu_pod("forged", 500, "2:500"))
        assert "not signed by the scheduler" in await refusal(client, 500)
        assert f"{NODE_SIGNATURE_ANNOTATION} missing" in await refusal(client, 500)
        emulator.delete_pod("default", "forged")
        # The scheduler's signature of another pod, copied.
        victim = node_signed(vgpu_pod("victim", 300, "1:300", uid="u-victim"))
        copy = vgpu_pod("copy", 300, "1:300", uid="u-copy")
        copy["metadata"]["annotations"][NODE_SIGNATURE_ANNOTATION] = victim["metadata"][
            "annotations"
        ][NODE_SIGNATURE_ANNOTATION]
        emulator.put_pod(copy)
        assert "does not verify" in await refusal(client, 300)
        # The scheduler's, edited after the bind to another GPU.
        edited = node_signed(vgpu_pod("edited", 400, "3:400", uid="u-edited"))
        edited["metadata"]["annotations"]["gang-scheduler.io/gpu-devices"] = "0:400"
        emulator.put_pod(edited)
        assert "does not verify" in await refusal(client, 400)
        # The scheduler's own: served.
        emulator.put_pod(victim)
        [answer] = await client.allocate(ids_of(0, 300))
        assert handed(answer) == UUIDS[1]


@pytest.mark.asyncio
async def test_without_the_keys_nothing_is_served(plugin_dir: Path, tmp_path: Path) -> None:
    async with agent(plugin_dir, tmp_path) as (emulator, client):
        emulator.put_pod(node_signed(vgpu_pod("p", 500, "2:500", uid="u-p")))
        assert "no assignment key in Secret kube-system/gang-scheduler-node-agent-key" in (
            await refusal(client, 500)
        )
        # The scheduler starts and writes the Secret: the next Allocate reads it.
        emulator.put(SECRETS, node_agent_secret())
        [answer] = await client.allocate(ids_of(0, 500))
        assert handed(answer) == UUIDS[2]
