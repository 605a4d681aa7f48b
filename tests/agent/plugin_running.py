"""A device plugin served against a fake kubelet and the API emulator, for the tests that
drive it through the kubelet's calls (shares in test_deviceplugin, whole GPUs in
test_whole_gpus, isolation modes in test_isolation)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.agent.allocation import VISIBLE_DEVICES_ENV
from scheduler.agent.deviceplugin import DevicePlugin, DevicePluginConfig, KubePodApi
from scheduler.agent.isolation import CDI_KIND, NO_DEVICES
from scheduler.agent.kubelet_api import ContainerAllocation
from scheduler.kube.client import KubeClient
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.kubelet import FakeKubelet, PluginClient
from tests.kubeapi import KubeApiEmulator, api_client
from tests.waiting import HANG, eventually

NODE = "gpu-1"


@dataclass
class Setup:
    kubelet: FakeKubelet
    plugin: DevicePlugin
    nvml: FakeNvml
    emulator: KubeApiEmulator
    directory: Path
    socket_name: str

    def client(self) -> PluginClient:
        """A client on the plugin's own socket (close it)."""
        return PluginClient(self.directory / self.socket_name)

    def pod(self, name: str) -> dict[str, Any]:
        return next(p for p in self.emulator.pods() if p["metadata"]["name"] == name)


@asynccontextmanager
async def running(
    directory: Path,
    *,
    whole: bool = False,
    refuse: str | None = None,
    registered: bool = True,
    **config: Any,
) -> AsyncIterator[Setup]:
    """A fake kubelet (refusing registrations with `refuse`), the API emulator and the
    plugin serving, until the block ends. The plugin serves shares, or with `whole` the
    whole-GPU plugin that runs beside them; `config` sets more DevicePluginConfig fields.
    With `registered` the block starts once the plugin has registered."""
    async with (
        KubeApiEmulator() as emulator,
        KubeClient(await api_client(emulator.base_url)) as kube,
    ):
        kubelet = FakeKubelet(directory)
        kubelet.refuse = refuse
        await kubelet.start()
        nvml = FakeNvml(PCIE_BOX)
        settings = DevicePluginConfig(
            node_name=NODE, directory=directory, health_interval=0.05, watch_interval=0.02, **config
        )
        if whole:
            settings = settings.whole_gpus_config()
        plugin = DevicePlugin(nvml, settings, KubePodApi(kube))
        task = asyncio.create_task(plugin.run())
        try:
            if registered:
                await eventually(lambda: len(kubelet.registrations) == 1)
            yield Setup(kubelet, plugin, nvml, emulator, directory, settings.socket_name)
        finally:
            plugin.stop()
            await asyncio.wait_for(task, HANG)
            await kubelet.stop()


def handed(answer: ContainerAllocation) -> str:
    """The GPUs an Allocate answer in the default isolation mode (cdi) hands the
    container, comma-separated UUIDs in index order as NVIDIA_VISIBLE_DEVICES would list
    them; the variable itself says `void`, so the NVIDIA runtime adds none."""
    assert answer.envs[VISIBLE_DEVICES_ENV] == NO_DEVICES, answer.envs
    assert all(name.startswith(f"{CDI_KIND}=") for name in answer.cdi_devices), answer
    return ",".join(name.removeprefix(f"{CDI_KIND}=") for name in answer.cdi_devices)
