"""What the kubelet really allocated: the pod-resources API played by a test server
(grpcio, a real unix socket), the report on the Node through the API emulator, and the
scheduler correcting its books from it, end to end."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from cache.gpu import ASSIGNMENT_ANNOTATION, TOPOLOGY_ANNOTATION, parse_assignment
from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION
from scheduler.agent import podresources_api as api
from scheduler.agent.allocation import ALLOCATED_ANNOTATION
from scheduler.agent.podresources import (
    KubeletDeviceReporter,
    KubeletPodResources,
    KubeReporterApi,
    PodResourcesConfig,
    gpu_index,
    kubelet_devices,
)
from scheduler.agent.publisher import AgentOptions, serve
from scheduler.kube.client import KubeClient
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.podresources_server import FakePodResources, holding
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import bound, running
from tests.kubeapi import KubeApiEmulator, api_client, write_kubeconfig
from tests.waiting import HANG, eventually

NODE = "gpu-1"
UUIDS = [gpu.uuid for gpu in PCIE_BOX.gpus]
INDICES = {uuid: index for index, uuid in enumerate(UUIDS)}
GPU = "nvidia.com/gpu"


def api_pod(name: str, uid: str, **kwargs: Any) -> dict[str, Any]:
    return pod_obj(name, gpus=1, node_name=NODE, uid=uid, **kwargs)


# --- the report, pure --------------------------------------------------------------------------
def test_device_ids_as_nvidia_s_plugin_names_them_map_to_gpu_indices() -> None:
    assert gpu_index(UUIDS[2], INDICES, 4) == 2  # deviceIDStrategy uuid (its default)
    assert gpu_index(f"{UUIDS[3]}::7", INDICES, 4) == 3  # time-slicing replica
    assert gpu_index("1", INDICES, 4) == 1  # deviceIDStrategy index
    assert gpu_index("4", INDICES, 4) is None
    assert gpu_index("MIG-0c5f", INDICES, 4) is None
    assert gpu_index("¹", INDICES, 4) is None and gpu_index("9" * 5000, INDICES, 4) is None


def test_the_report_names_each_pod_by_uid_with_the_gpus_its_containers_hold() -> None:
    two = api.PodResources(
        "default",
        "two",
        (
            api.ContainerResources("a", (api.Devices(GPU, (UUIDS[3],)),)),
            api.ContainerResources(
                "b", (api.Devices(GPU, (UUIDS[1],)), api.Devices("example.com/nic", ("x",)))
            ),
        ),
    )
    listed = [
        two,
        holding("default", "served", GPU, UUIDS[0]),  # our plugin served it
        holding("default", "done", GPU, UUIDS[0]),  # finished
        holding("default", "mig", GPU, "MIG-1234"),  # names no GPU here
        holding("default", "shares", "nvidia.com/vgpu", f"{UUIDS[2]}::5"),  # not reported
        holding("default", "gone", GPU, UUIDS[2]),  # not in the API's list
        holding("other", "idx", GPU, "2"),
    ]
    pods = [
        api_pod("two", "u-two"),
        api_pod("served", "u-served", annotations={ALLOCATED_ANNOTATION: "main"}),
        api_pod("done", "u-done", phase="Succeeded"),
        api_pod("mig", "u-mig"),
        api_pod("shares", "u-shares"),
        api_pod("idx", "u-idx", namespace="other"),
        pod_obj("elsewhere", gpus=1, node_name="gpu-2", uid="u-else"),
    ]
    report = kubelet_devices(listed, pods, NODE, INDICES)
    assert report.devices == {"u-two": (1, 3), "u-idx": (2,)}
    assert report.unknown == ("default/mig: MIG-1234",)


# --- the gRPC API --------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_list_and_get_over_the_kubelet_s_socket(socket_dir: Path) -> None:
    server = FakePodResources(socket_dir / "kubelet.sock")
    server.pods = [holding("ml", "train-0", GPU, UUIDS[0], UUIDS[1])]
    await server.start()
    client = KubeletPodResources(server.socket)
    try:
        assert await client.list() == server.pods
        assert await client.get("ml", "train-0") == server.pods[0]
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await client.get("ml", "nope")
        assert missing.value.code() == grpc.StatusCode.UNKNOWN
    finally:
        await client.close()
        await server.stop()


# --- the reporter ------------------------------------------------------------------------------
@asynccontextmanager
async def reporting(
    socket_dir: Path,
) -> AsyncIterator[tuple[KubeApiEmulator, FakePodResources, KubeletDeviceReporter]]:
    server = FakePodResources(socket_dir / "kubelet.sock")
    await server.start()
    async with (
        KubeApiEmulator() as emulator,
        KubeClient(await api_client(emulator.base_url)) as kube,
    ):
        emulator.put_node(node_obj(NODE, gpus=4))
        client = KubeletPodResources(server.socket)
        reporter = KubeletDeviceReporter(
            PodResourcesConfig(NODE, server.socket, 0.05),
            client,
            KubeReporterApi(kube),
            lambda: INDICES,
        )
        try:
            yield emulator, server, reporter
        finally:
            await client.close()
            await server.stop()


def reported(emulator: KubeApiEmulator) -> dict[str, list[int]] | None:
    node = emulator.get_node(NODE) or {}
    text = (node.get("metadata", {}).get("annotations") or {}).get(KUBELET_DEVICES_ANNOTATION)
    return json.loads(text) if text is not None else None


@pytest.mark.asyncio
async def test_the_report_is_written_on_the_node_when_it_changes_only(socket_dir: Path) -> None:
    async with reporting(socket_dir) as (emulator, server, reporter):
        emulator.put_pod(api_pod("a", "u-a"))
        server.pods = [holding("default", "a", GPU, UUIDS[2])]
        assert await reporter.report()
        assert reported(emulator) == {"u-a": [2]}
        version = (emulator.get_node(NODE) or {})["metadata"]["resourceVersion"]
        assert await reporter.report()  # the same: not written again
        assert (emulator.get_node(NODE) or {})["metadata"]["resourceVersion"] == version
        server.pods = []  # the pod ended
        assert await reporter.report()
        assert reported(emulator) == {}


@pytest.mark.asyncio
async def test_no_pod_resources_socket_is_said_once_and_tried_again(
    socket_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with reporting(socket_dir) as (emulator, server, reporter):
        await server.stop()
        with caplog.at_level(logging.WARNING, "gang_scheduler.pod_resources"):
            assert not await reporter.report()
            assert not await reporter.report()
        notes = [r.message for r in caplog.records if "pod-resources API" in r.message]
        assert len(notes) == 1 and "UNAVAILABLE" in notes[0]
        assert reported(emulator) is None
        await server.start()
        emulator.put_pod(api_pod("a", "u-a"))
        server.pods = [holding("default", "a", GPU, UUIDS[1])]
        # The next pass reaches it: no reconnect backoff to wait out.
        assert await reporter.report()
        assert reported(emulator) == {"u-a": [1]}


# --- end to end: kubelet, agent, API server, scheduler -----------------------------------------
def assigned(pod: dict[str, Any]) -> list[int]:
    text = pod["metadata"]["annotations"][ASSIGNMENT_ANNOTATION]
    return sorted(index for index, _ in parse_assignment(text))


@pytest.mark.asyncio
async def test_the_scheduler_charges_the_gpus_the_kubelet_really_gave(
    tmp_path: Path, socket_dir: Path
) -> None:
    """The scheduler assigns pod a two GPUs; NVIDIA's plugin (the pod-resources API says)
    gave it the other two. The agent reports it on the Node, the scheduler corrects its
    books, and pod b gets the two GPUs that are really free (it would get a's real ones
    from the uncorrected books)."""

    async def scenario() -> None:
        server = FakePodResources(socket_dir / "kubelet.sock")
        await server.start()
        async with KubeApiEmulator() as emulator:
            emulator.put_node(node_obj(NODE, gpus=4))
            kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "agent-kubeconfig")
            options = AgentOptions(
                node_name=NODE,
                kubeconfig=str(kubeconfig),
                interval=3600,
                pod_resources_socket=str(server.socket),
                pod_resources_interval=0.05,
            )
            agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX)))

            def pods() -> dict[str, dict[str, Any]]:
                return {p["metadata"]["name"]: p for p in emulator.pods()}

            try:
                await eventually(
                    lambda: (
                        TOPOLOGY_ANNOTATION
                        in ((emulator.get_node(NODE) or {})["metadata"].get("annotations") or {})
                    ),
                    "the inventory published",
                )
                emulator.put_pod(pod_obj("a", gang="a", min_member=1, gpus=2))
                async with running(emulator, tmp_path):
                    await eventually(lambda: "a" in bound(emulator), "a bound")
                    a = pods()["a"]
                    planned = assigned(a)
                    really = [i for i in range(4) if i not in planned]
                    server.pods = [holding("default", "a", GPU, *(UUIDS[i] for i in really))]
                    uid = a["metadata"]["uid"]
                    await eventually(
                        lambda: reported(emulator) == {uid: really}, "the kubelet's word"
                    )
                    emulator.put_pod(pod_obj("b", gang="b", min_member=1, gpus=2))
                    await eventually(lambda: "b" in bound(emulator), "b bound")
                    assert assigned(pods()["b"]) == planned
            finally:
                agent.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await agent
                await server.stop()

    await asyncio.wait_for(scenario(), 4 * HANG)
