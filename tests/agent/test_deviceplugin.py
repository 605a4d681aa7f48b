"""The vGPU device plugin end to end: a fake kubelet (grpcio over real unix sockets)
registers it and calls ListAndWatch and Allocate; the pods live in the API emulator and
are read and patched through the real client; NVML is faked at its boundary."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
import pytest_asyncio

from cache.gpu import ASSIGNMENT_ANNOTATION
from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import (
    ALLOCATED_ANNOTATION,
    CONTAINER_ENV,
    DEVICES_ENV,
    SHARE_ENV,
    VISIBLE_DEVICES_ENV,
)
from scheduler.agent.deviceplugin import SOCKET_NAME, DevicePlugin, DevicePluginConfig, KubePodApi
from scheduler.agent.publisher import AgentOptions, serve
from scheduler.kube.client import KubeClient
from tests.agent import PCIE_BOX, FakeNvml, with_gpu
from tests.agent.kubelet import FakeKubelet, PluginClient, first_list
from tests.agent.plugin_running import NODE, Setup, handed, running
from tests.factories import node_obj, pod_obj
from tests.kubeapi import SECRETS, KubeApiEmulator, api_client, write_kubeconfig
from tests.signed import node_agent_secret, node_signed
from tests.waiting import HANG, eventually

UUIDS = [gpu.uuid for gpu in PCIE_BOX.gpus]
MINUTE_1, MINUTE_2 = "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def vgpu_pod(
    name: str,
    milli: int,
    assignment: str | None,
    *,
    created: str = "2026-01-01T00:00:00Z",
    bound: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    annotations = {ASSIGNMENT_ANNOTATION: assignment} if assignment is not None else {}
    pod = pod_obj(
        name, vgpu=milli, node_name=NODE, created=created, annotations=annotations, **kwargs
    )
    if bound is not None:
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}
        ]
    return pod


@pytest_asyncio.fixture
async def setup(plugin_dir: Path) -> AsyncIterator[Setup]:
    async with running(plugin_dir) as running_setup:
        yield running_setup


def ids_of(gpu: int, count: int) -> list[str]:
    return [f"{UUIDS[gpu]}::{k}" for k in range(count)]


# --- registration and ListAndWatch -------------------------------------------------------------
@pytest.mark.asyncio
async def test_registers_nvidia_com_vgpu_with_the_kubelet(setup: Setup) -> None:
    assert setup.kubelet.registrations == [
        api.RegisterRequest(
            version="v1beta1",
            endpoint=SOCKET_NAME,
            resource_name="nvidia.com/vgpu",
            options=api.PluginOptions(
                pre_start_required=False, get_preferred_allocation_available=True
            ),
        )
    ]
    client = setup.client()
    try:
        assert await client.options() == setup.kubelet.registrations[0].options
        await client.pre_start(ids_of(0, 1))  # nothing to do, but it answers
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_a_thousand_share_devices_per_healthy_gpu_with_their_numa_node(
    setup: Setup,
) -> None:
    client = setup.client()
    try:
        devices = await first_list(client)
    finally:
        await client.close()
    assert len(devices) == 4000
    assert {device.health for device in devices} == {api.HEALTHY}
    assert devices[0] == api.Device(f"{UUIDS[0]}::0", api.HEALTHY, 0)
    assert devices[-1] == api.Device(f"{UUIDS[3]}::999", api.HEALTHY, 1)
    assert len({device.id for device in devices}) == 4000


@pytest.mark.asyncio
async def test_an_unhealthy_gpu_is_sent_as_unhealthy_shares(setup: Setup) -> None:
    client = setup.client()
    try:
        stream = client.list_and_watch()
        first = await anext(stream)
        assert {device.health for device in first} == {api.HEALTHY}
        setup.nvml.machine = with_gpu(PCIE_BOX, 2, mig=True)  # MIG on: unhealthy
        second = await anext(stream)
        unhealthy = {device.id.split("::")[0] for device in second if device.health != "Healthy"}
        assert unhealthy == {UUIDS[2]} and len(second) == 4000
        setup.nvml.machine = PCIE_BOX
        third = await anext(stream)
        assert {device.health for device in third} == {api.HEALTHY}
        await stream.aclose()
    finally:
        await client.close()


# --- Allocate ----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_allocate_gives_the_assigned_gpu_and_marks_the_pod(setup: Setup) -> None:
    setup.emulator.put_pod(vgpu_pod("notebook", 500, "2:500"))
    client = setup.client()
    try:
        # The kubelet picks IDs as it likes (here GPU 0's); the device is the assignment's.
        [answer] = await client.allocate(ids_of(0, 500))
        assert handed(answer) == UUIDS[2]
        assert answer.envs == {
            VISIBLE_DEVICES_ENV: "void",
            SHARE_ENV: "500",
            DEVICES_ENV: "2:500",
            CONTAINER_ENV: "default/notebook/main",
            # Half of the V100's 32,510 MiB: the share's memory contract.
            "GANG_SCHEDULER_GPU_MEMORY_LIMIT_MIB": "16255",
        }
        stored = setup.emulator.get_pod("default", "notebook")
        assert stored is not None
        assert stored["metadata"]["annotations"][ALLOCATED_ANNOTATION] == "main"
        # Allocated once: a second Allocate of the same size finds no pod.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.allocate(ids_of(1, 500))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no pod bound to node gpu-1 waits for 500" in str(refused.value.details())
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_whole_gpus_are_named_by_uuid(setup: Setup) -> None:
    setup.emulator.put_pod(vgpu_pod("trainer", 2000, "1:1000,3:1000"))
    client = setup.client()
    try:
        [answer] = await client.allocate(ids_of(0, 1000) + ids_of(2, 1000))
    finally:
        await client.close()
    assert handed(answer) == f"{UUIDS[1]},{UUIDS[3]}"
    assert answer.envs[SHARE_ENV] == "1000"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("assignment", "reason"),
    [
        (None, f"no {ASSIGNMENT_ANNOTATION} assignment"),
        ("two:half", "is not <device index>:<milli>"),
        ("1:300", "gives 300 milli in all, but the containers ask for 500"),
        ("9:500", "names GPU 9, which this node does not have"),
    ],
)
async def test_a_pod_without_a_valid_assignment_is_refused(
    setup: Setup, assignment: str | None, reason: str
) -> None:
    setup.emulator.put_pod(vgpu_pod("p", 500, assignment))
    client = setup.client()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.allocate(ids_of(0, 500))
    finally:
        await client.close()
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason in str(refused.value.details())
    stored = setup.emulator.get_pod("default", "p")
    assert stored is not None and ALLOCATED_ANNOTATION not in stored["metadata"]["annotations"]


@pytest.mark.asyncio
async def test_an_assigned_gpu_gone_unhealthy_is_refused(setup: Setup) -> None:
    setup.emulator.put_pod(vgpu_pod("p", 500, "2:500"))
    setup.nvml.machine = with_gpu(PCIE_BOX, 2, mig=True)
    await eventually(lambda: not setup.plugin.gpus[2].healthy)
    client = setup.client()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.allocate(ids_of(0, 500))
    finally:
        await client.close()
    assert "assigned GPU 2" in str(refused.value.details())
    assert "unhealthy" in str(refused.value.details())


@pytest.mark.asyncio
async def test_two_pods_of_the_same_size_go_in_bind_order(setup: Setup) -> None:
    # "early" was created first but bound after "late": bind time decides.
    early = vgpu_pod("early", 250, "0:250", created="2026-01-01T00:00:10Z", bound=MINUTE_2)
    setup.emulator.put_pod(early)
    late = vgpu_pod("late", 250, "3:250", created="2026-01-01T00:00:20Z", bound=MINUTE_1)
    setup.emulator.put_pod(late)
    client = setup.client()
    try:
        [first] = await client.allocate(ids_of(1, 250))
        [second] = await client.allocate(ids_of(1, 250))
    finally:
        await client.close()
    assert first.envs[CONTAINER_ENV] == "default/late/main"
    assert handed(first) == UUIDS[3]
    assert second.envs[CONTAINER_ENV] == "default/early/main"
    assert handed(second) == UUIDS[0]


@pytest.mark.asyncio
async def test_a_removed_mark_never_gets_a_container_served_twice(setup: Setup) -> None:
    """Where the admission policy is not installed a tenant may strip the
    gpu-allocated mark of its running pod, so that the next pod of its size is handed
    its GPU (bound-first puts it first again). The plugin remembers what it served."""
    setup.emulator.put_pod(vgpu_pod("tenant", 250, "0:250", bound=MINUTE_1))
    setup.emulator.put_pod(vgpu_pod("victim", 250, "3:250", bound=MINUTE_2))
    client = setup.client()
    try:
        [first] = await client.allocate(ids_of(1, 250))
        tenant = setup.emulator.get_pod("default", "tenant")
        assert tenant is not None and tenant["metadata"]["annotations"][ALLOCATED_ANNOTATION]
        del tenant["metadata"]["annotations"][ALLOCATED_ANNOTATION]
        setup.emulator.put_pod(tenant)
        [second] = await client.allocate(ids_of(1, 250))
    finally:
        await client.close()
    assert first.envs[CONTAINER_ENV] == "default/tenant/main"
    assert second.envs[CONTAINER_ENV] == "default/victim/main"
    assert handed(second) == UUIDS[3]


@pytest.mark.asyncio
async def test_a_pod_of_another_size_is_not_taken(setup: Setup) -> None:
    setup.emulator.put_pod(vgpu_pod("small", 100, "0:100"))
    client = setup.client()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.allocate(ids_of(0, 200))
    finally:
        await client.close()
    assert "default/small container main asks for 100" in str(refused.value.details())


@pytest.mark.asyncio
async def test_containers_of_one_pod_take_their_parts_in_order(setup: Setup) -> None:
    pod = vgpu_pod("pair", 300, "3:1000")
    first = pod["spec"]["containers"][0]
    first["name"] = "a"
    pod["spec"]["containers"].append(
        {"name": "b", "image": "x", "resources": {"limits": {"nvidia.com/vgpu": "700"}}}
    )
    setup.emulator.put_pod(pod)
    client = setup.client()
    try:
        [a] = await client.allocate(ids_of(0, 300))
        [b] = await client.allocate(ids_of(0, 700))
    finally:
        await client.close()
    assert (a.envs[SHARE_ENV], a.envs[CONTAINER_ENV]) == ("300", "default/pair/a")
    assert (b.envs[SHARE_ENV], b.envs[CONTAINER_ENV]) == ("700", "default/pair/b")
    assert handed(a) == handed(b) == UUIDS[3]
    stored = setup.emulator.get_pod("default", "pair")
    assert stored is not None and stored["metadata"]["annotations"][ALLOCATED_ANNOTATION] == "a,b"


@pytest.mark.asyncio
async def test_preferred_allocation_names_the_assigned_gpu(setup: Setup) -> None:
    setup.emulator.put_pod(vgpu_pod("p", 3, "1:3"))
    available = ids_of(0, 5) + ids_of(1, 5)
    client = setup.client()
    try:
        [preferred] = await client.preferred(api.ContainerPreferredRequest(tuple(available), (), 3))
        [fallback] = await client.preferred(api.ContainerPreferredRequest(tuple(available), (), 7))
    finally:
        await client.close()
    assert preferred == ids_of(1, 3)
    assert fallback == available[:7]  # no pod of that size: the kubelet's own order
    stored = setup.emulator.get_pod("default", "p")
    assert stored is not None and ALLOCATED_ANNOTATION not in stored["metadata"]["annotations"]


@pytest.mark.asyncio
async def test_a_transient_api_error_is_retried(setup: Setup) -> None:
    setup.emulator.put_pod(vgpu_pod("p", 500, "2:500"))
    setup.emulator.fail_requests("patch", "pods", count=1, status=503)
    client = setup.client()
    try:
        [answer] = await client.allocate(ids_of(0, 500))
    finally:
        await client.close()
    assert answer.envs[DEVICES_ENV] == "2:500"
    assert setup.emulator.request_count("patch", "pods") == 2


# --- restarts ----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_deleted_socket_is_served_and_registered_again(setup: Setup) -> None:
    (setup.directory / SOCKET_NAME).unlink()
    await eventually(lambda: len(setup.kubelet.registrations) == 2)
    client = setup.client()
    try:
        assert len(await first_list(client)) == 4000
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_a_restarted_kubelet_gets_a_new_registration(setup: Setup) -> None:
    await setup.kubelet.stop()  # removes kubelet.sock and the plugin's socket
    restarted = FakeKubelet(setup.directory)
    await restarted.start()
    try:
        await eventually(lambda: len(restarted.registrations) == 1)
        assert restarted.registrations[0].endpoint == SOCKET_NAME
        client = setup.client()
        try:
            assert len(await first_list(client)) == 4000
        finally:
            await client.close()
    finally:
        await restarted.stop()


@pytest.mark.asyncio
async def test_a_new_kubelet_socket_alone_is_registered_with(setup: Setup) -> None:
    await setup.kubelet.stop(remove_plugin_sockets=False)
    restarted = FakeKubelet(setup.directory)
    await restarted.start()
    try:
        await eventually(lambda: len(restarted.registrations) == 1)
    finally:
        await restarted.stop()


@pytest.mark.asyncio
async def test_a_refused_registration_is_tried_again(plugin_dir: Path) -> None:
    refusal = "resource name already registered"
    async with running(plugin_dir, refuse=refusal, registered=False) as setup:
        await eventually(lambda: setup.kubelet.attempts >= 3)
        assert setup.kubelet.registrations == [] and setup.plugin.registrations == 0
        setup.kubelet.refuse = None
        await eventually(lambda: len(setup.kubelet.registrations) == 1)
        # The kubelet records the registration before its answer reaches the plugin.
        await eventually(lambda: setup.plugin.registrations == 1, "the plugin told")
        assert len(setup.kubelet.registrations) == 1


# --- granularity -------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_coarser_unit_advertises_fewer_share_devices(plugin_dir: Path) -> None:
    async with running(plugin_dir, unit=10) as setup:
        # 25 share-devices of 10 milli each: an assignment of 250 milli.
        setup.emulator.put_pod(vgpu_pod("p", 25, "1:250"))
        client = setup.client()
        try:
            devices = await first_list(client)
            assert len(devices) == 400 and devices[99].id == f"{UUIDS[0]}::99"
            assert devices[100].id == f"{UUIDS[1]}::0"
            [answer] = await client.allocate([d.id for d in devices[:25]])
        finally:
            await client.close()
        assert answer.envs[SHARE_ENV] == "250"
        assert handed(answer) == UUIDS[1]


# --- the command -------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_the_node_agent_command_serves_the_plugin_beside_the_publisher(
    plugin_dir: Path, tmp_path: Path
) -> None:
    async with KubeApiEmulator() as emulator:
        emulator.put_node(node_obj(NODE))
        emulator.put(SECRETS, node_agent_secret())
        emulator.put_pod(node_signed(vgpu_pod("p", 500, "1:500", uid="u-p")))
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        kubelet = FakeKubelet(plugin_dir)
        await kubelet.start()
        options = AgentOptions(node_name=NODE, kubeconfig=str(kubeconfig), interval=30)
        config = DevicePluginConfig(node_name="", directory=plugin_dir, watch_interval=0.02)
        agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX), config))
        client = PluginClient(plugin_dir / SOCKET_NAME)
        try:
            await eventually(lambda: len(kubelet.registrations) == 1)
            [answer] = await client.allocate(ids_of(0, 500))
            assert handed(answer) == UUIDS[1]
            await eventually(lambda: emulator.request_count("patch", "nodes") == 1)
        finally:
            await client.close()
            os.kill(os.getpid(), signal.SIGTERM)  # serve's handler stops both
            assert await asyncio.wait_for(agent, HANG) == 0
            await kubelet.stop()


@pytest.mark.asyncio
async def test_an_unusable_directory_is_reported_and_tried_again(
    plugin_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = plugin_dir / "not-a-directory"
    blocked.write_text("")
    async with (
        KubeApiEmulator() as emulator,
        KubeClient(await api_client(emulator.base_url)) as kube,
    ):
        config = DevicePluginConfig(node_name=NODE, directory=blocked, watch_interval=0.02)
        plugin = DevicePlugin(FakeNvml(PCIE_BOX), config, KubePodApi(kube))
        with caplog.at_level(logging.WARNING, "gang_scheduler.device_plugin"):
            task = asyncio.create_task(plugin.run())
            try:
                await eventually(lambda: "cannot serve on" in caplog.text)
                assert not task.done()
            finally:
                plugin.stop()
                await asyncio.wait_for(task, HANG)
        assert caplog.text.count("cannot serve on") == 1  # once, not at every check


@pytest.mark.asyncio
async def test_serve_refuses_a_unit_that_does_not_divide_a_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = DevicePluginConfig(node_name="", unit=3)
    assert await serve(AgentOptions(node_name=NODE), FakeNvml(PCIE_BOX), config) == 2
    assert "--vgpu-unit must divide 1000" in capsys.readouterr().err
