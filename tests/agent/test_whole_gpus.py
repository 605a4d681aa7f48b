"""Whole GPUs (`nvidia.com/gpu`) served by the node agent on a node that opted in: a fake
kubelet (grpcio over real unix sockets) registers the plugin and admits containers the
way its device manager does (GetPreferredAllocation, then Allocate); the pods live in the
API emulator and are read and patched through the real client; NVML is faked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from cache.gpu import ASSIGNMENT_ANNOTATION
from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import (
    ALLOCATED_ANNOTATION,
    CONTAINER_ENV,
    DEVICES_ENV,
    SHARE_ENV,
    VISIBLE_DEVICES_ENV,
)
from scheduler.agent.deviceplugin import (
    SOCKET_NAME,
    WHOLE_GPUS_LABEL,
    WHOLE_SOCKET_NAME,
    DevicePluginConfig,
)
from scheduler.agent.publisher import AgentOptions, serve
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.kubelet import FakeKubelet, PluginClient, first_list
from tests.agent.plugin_running import NODE, handed, running
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.waiting import eventually

UUIDS = [gpu.uuid for gpu in PCIE_BOX.gpus]
ENVS = (VISIBLE_DEVICES_ENV, SHARE_ENV, DEVICES_ENV, CONTAINER_ENV)


def gpu_pod(
    name: str, gpus: int, assignment: str | None, *, bound: str = "2026-01-01T00:01:00Z"
) -> dict[str, Any]:
    annotations = {ASSIGNMENT_ANNOTATION: assignment} if assignment is not None else {}
    pod = pod_obj(name, gpus=gpus, node_name=NODE, annotations=annotations)
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}
    ]
    return pod


@pytest.mark.asyncio
async def test_registers_nvidia_com_gpu_with_one_device_per_gpu_named_by_uuid(
    plugin_dir: Path,
) -> None:
    async with running(plugin_dir, whole=True) as setup:
        assert setup.kubelet.registrations == [
            api.RegisterRequest(
                version="v1beta1",
                endpoint=WHOLE_SOCKET_NAME,
                resource_name="nvidia.com/gpu",
                options=api.PluginOptions(get_preferred_allocation_available=True),
            )
        ]
        client = setup.client()
        try:
            devices = await first_list(client)
        finally:
            await client.close()
    # NVIDIA's plugin names its devices by UUID too: the kubelet's checkpoint of the
    # containers it served stays valid across the hand-over.
    assert devices == [api.Device(gpu.uuid, api.HEALTHY, gpu.numa) for gpu in PCIE_BOX.gpus]


@pytest.mark.asyncio
async def test_the_kubelet_is_steered_to_the_assigned_gpus_and_they_are_given(
    plugin_dir: Path,
) -> None:
    async with running(plugin_dir, whole=True) as setup:
        setup.emulator.put_pod(gpu_pod("train", 2, "1:1000,3:1000"))
        client = setup.client()
        try:
            picked, answer = await client.admit(list(UUIDS), 2)
        finally:
            await client.close()
        # Without the preference the kubelet would have taken GPUs 0 and 1.
        assert picked == [UUIDS[1], UUIDS[3]]
        assert handed(answer) == f"{UUIDS[1]},{UUIDS[3]}"
        assert {key: answer.envs[key] for key in ENVS} == {
            VISIBLE_DEVICES_ENV: "void",
            SHARE_ENV: "1000",
            DEVICES_ENV: "1:1000,3:1000",
            CONTAINER_ENV: "default/train/main",
        }
        assert setup.pod("train")["metadata"]["annotations"][ALLOCATED_ANNOTATION] == "main"


@pytest.mark.asyncio
async def test_ids_the_kubelet_picked_otherwise_still_get_the_assigned_gpus(
    plugin_dir: Path,
) -> None:
    """The kubelet may not take the preference (its topology manager keeps it to another
    NUMA node): the container gets what the scheduler assigned all the same."""
    async with running(plugin_dir, whole=True) as setup:
        setup.emulator.put_pod(gpu_pod("train", 1, "2:1000"))
        client = setup.client()
        try:
            [answer] = await client.allocate([UUIDS[0]])
        finally:
            await client.close()
        assert handed(answer) == UUIDS[2]
        assert answer.envs[DEVICES_ENV] == "2:1000"


@pytest.mark.asyncio
async def test_the_gpus_the_kubelet_names_pick_the_pod_they_were_preferred_for(
    plugin_dir: Path,
) -> None:
    """Two one-GPU pods wait; the kubelet names GPU 2, which is the later pod's: that pod
    is served, not the one bound first, and the first one then gets its own GPU."""
    async with running(plugin_dir, whole=True) as setup:
        setup.emulator.put_pod(gpu_pod("first", 1, "0:1000", bound="2026-01-01T00:01:00Z"))
        setup.emulator.put_pod(gpu_pod("second", 1, "2:1000", bound="2026-01-01T00:02:00Z"))
        client = setup.client()
        try:
            [second] = await client.allocate([UUIDS[2]])
            assert second.envs[CONTAINER_ENV] == "default/second/main"
            _, first = await client.admit([UUIDS[0], UUIDS[1], UUIDS[3]], 1)
        finally:
            await client.close()
        assert first.envs[CONTAINER_ENV] == "default/first/main"
        assert handed(first) == UUIDS[0]


@pytest.mark.asyncio
async def test_pods_it_cannot_serve_are_refused_with_the_reason(plugin_dir: Path) -> None:
    async with running(plugin_dir, whole=True) as setup:
        # A share pod is not this plugin's; a whole-GPU pod without an assignment (bound
        # by another scheduler) is refused rather than given a GPU at random.
        setup.emulator.put_pod(
            pod_obj(
                "notebook", vgpu=500, node_name=NODE, annotations={ASSIGNMENT_ANNOTATION: "0:500"}
            )
        )
        stray = gpu_pod("stray", 1, None)
        stray["spec"]["schedulerName"] = "default-scheduler"
        setup.emulator.put_pod(stray)
        client = setup.client()
        try:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.allocate([UUIDS[0]])
        finally:
            await client.close()
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = refused.value.details() or ""
        assert "default/stray: scheduled by 'default-scheduler'" in details
        assert "notebook" not in details


@pytest.mark.asyncio
async def test_an_init_container_gets_the_first_assigned_gpus_and_the_app_all_of_them(
    plugin_dir: Path,
) -> None:
    """The kubelet allocates the init container first, then the app container, which
    reuses the init container's GPU and asks for the rest: both get what the scheduler
    assigned, and the kubelet's records name those GPUs."""
    async with running(plugin_dir, whole=True) as setup:
        obj = gpu_pod("train", 2, "1:1000,3:1000")
        obj["spec"]["initContainers"] = [
            {"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]
        setup.emulator.put_pod(obj)
        client = setup.client()
        try:
            init_ids, init = await client.admit(list(UUIDS), 1)
            app_ids, app = await client.admit(list(UUIDS), 2, reusable=init_ids)
        finally:
            await client.close()
        assert init_ids == [UUIDS[1]] and handed(init) == UUIDS[1]
        assert init.envs[CONTAINER_ENV] == "default/train/warmup"
        assert sorted(app_ids) == sorted([UUIDS[1], UUIDS[3]])
        assert handed(app) == f"{UUIDS[1]},{UUIDS[3]}"
        assert app.envs[CONTAINER_ENV] == "default/train/main"
        annotations = setup.pod("train")["metadata"]["annotations"]
        assert annotations[ALLOCATED_ANNOTATION] == "main,warmup"


# --- opting in -------------------------------------------------------------------------------
@asynccontextmanager
async def agent_serving(
    emulator: KubeApiEmulator, tmp_path: Path, plugin_dir: Path, *, interval: float, mode: str
) -> AsyncIterator[FakeKubelet]:
    """The agent command (`--whole-gpus mode`, a pass every `interval` seconds) run
    against the emulator's node and a fake kubelet, until the block ends."""
    kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
    kubelet = FakeKubelet(plugin_dir)
    await kubelet.start()
    options = AgentOptions(
        node_name=NODE, kubeconfig=str(kubeconfig), interval=interval, metrics_port=None
    )
    config = DevicePluginConfig(
        node_name="",
        directory=plugin_dir,
        health_interval=0.05,
        watch_interval=0.02,
        whole_gpus=mode,
    )
    agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX), config))
    try:
        yield kubelet
    finally:
        agent.cancel()
        with pytest.raises(asyncio.CancelledError):
            await agent
        await kubelet.stop()


async def registered_resources(
    tmp_path: Path, plugin_dir: Path, *, label: str | None, mode: str, expected: int
) -> list[str]:
    """Run the agent command against a node (labelled or not) and a fake kubelet;
    the resources registered once the plugin set is final: the agent's pass has read the
    node (and followed its label: the node patch comes after) and every plugin socket in
    the directory has registered. A plugin too many is then among them."""
    async with KubeApiEmulator() as emulator:
        node = node_obj(NODE, gpus=4)
        if label is not None:
            node["metadata"].setdefault("labels", {})[WHOLE_GPUS_LABEL] = label
        emulator.put_node(node)
        async with agent_serving(
            emulator, tmp_path, plugin_dir, interval=3600, mode=mode
        ) as kubelet:

            def settled() -> bool:
                sockets = {path.name for path in plugin_dir.glob("*.sock")}
                sockets.discard(kubelet.socket.name)
                endpoints = {r.endpoint for r in kubelet.registrations}
                return (
                    emulator.request_count("patch", "nodes") >= 1
                    and len(kubelet.registrations) >= expected
                    and sockets == endpoints
                )

            await eventually(settled, "the agent's pass done and every plugin registered")
            return sorted(r.resource_name for r in kubelet.registrations)


@pytest.mark.asyncio
async def test_a_node_labelled_whole_gpus_gets_nvidia_com_gpu_too(
    tmp_path: Path, plugin_dir: Path
) -> None:
    both = ["nvidia.com/gpu", "nvidia.com/vgpu"]
    shares = ["nvidia.com/vgpu"]
    cases = [("true", "label", both), (None, "label", shares), (None, "on", both)]
    cases.append(("true", "off", shares))
    for label, mode, resources in cases:
        registered = await registered_resources(
            tmp_path, plugin_dir, label=label, mode=mode, expected=len(resources)
        )
        assert registered == resources, (label, mode)
        assert not (plugin_dir / WHOLE_SOCKET_NAME).exists()  # removed at exit
    assert SOCKET_NAME != WHOLE_SOCKET_NAME


@pytest.mark.asyncio
async def test_the_agent_follows_the_whole_gpus_label_at_run_time(
    tmp_path: Path, plugin_dir: Path
) -> None:
    """Labelling a running node makes the agent serve and register nvidia.com/gpu at its
    next pass; removing the label stops that plugin (its socket goes, its ListAndWatch
    streams end: the kubelet marks the resource's devices unhealthy and running pods
    keep theirs), while the share plugin serves on; labelling again registers again."""
    async with KubeApiEmulator() as emulator:
        emulator.put_node(node_obj(NODE, gpus=4))
        async with agent_serving(
            emulator, tmp_path, plugin_dir, interval=0.05, mode="label"
        ) as kubelet:

            def resources() -> list[str]:
                return [r.resource_name for r in kubelet.registrations]

            def label(value: str | None) -> None:
                current = emulator.get_node(NODE)
                assert current is not None
                labels = current["metadata"].setdefault("labels", {})
                if value is None:
                    labels.pop(WHOLE_GPUS_LABEL, None)
                else:
                    labels[WHOLE_GPUS_LABEL] = value
                emulator.put_node(current)

            whole_socket = plugin_dir / WHOLE_SOCKET_NAME
            await eventually(lambda: resources() == ["nvidia.com/vgpu"], "shares registered")
            assert not whole_socket.exists()
            label("true")
            await eventually(lambda: "nvidia.com/gpu" in resources(), "whole GPUs registered")
            client = PluginClient(whole_socket)
            try:
                stream = client.list_and_watch()
                assert len(await anext(stream)) == 4
                label(None)
                # The stream ends (the kubelet's endpoint stops) and the socket goes.
                async for _ in stream:
                    pass
            finally:
                await client.close()
            await eventually(lambda: not whole_socket.exists(), "whole-GPU socket removed")
            assert (plugin_dir / SOCKET_NAME).exists()  # the shares are still served
            label("true")
            await eventually(lambda: resources().count("nvidia.com/gpu") == 2, "registered again")
            assert resources().count("nvidia.com/vgpu") == 1
        assert not whole_socket.exists()


def test_a_bad_whole_gpus_mode_is_a_deployment_mistake() -> None:
    config = DevicePluginConfig(node_name=NODE, whole_gpus="maybe")
    assert config.problems() == ["--whole-gpus must be on, off or label, got 'maybe'"]
    whole = DevicePluginConfig(node_name=NODE).whole_gpus_config()
    assert (whole.resource, whole.unit, whole.whole) == ("nvidia.com/gpu", 1000, True)
    assert whole.problems() == []
