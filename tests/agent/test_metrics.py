"""The node agent's /metrics (DCGM exporter names, attribution to pods and containers)
and its probes, with NVML faked and the pods in the API emulator."""

from __future__ import annotations

import asyncio
import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from cache.gpu import ASSIGNMENT_ANNOTATION
from scheduler.agent import podresources_api
from scheduler.agent.allocation import ALLOCATED_ANNOTATION
from scheduler.agent.health import HealthBook
from scheduler.agent.metrics import DCGM_FIELDS, GpuCollector, Holding, agent_registry, holdings
from scheduler.agent.nvml import NOT_SUPPORTED
from scheduler.agent.podresources import container_gpus
from scheduler.agent.publisher import AgentOptions, serve
from scheduler.agent.server import AgentStatus
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.podresources_server import FakePodResources, holding
from tests.factories import pod_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.scrape import PROCESS_SERIES, Sample, parse, series
from tests.waiting import HANG, eventually, eventually_async, free_port

NODE = "gpu-1"


def vgpu_pod(name: str, assignment: str, containers: list[tuple[str, int]], **kw: Any) -> Any:
    pod = pod_obj(
        name, node_name=NODE, annotations={ASSIGNMENT_ANNOTATION: assignment}, phase="Running", **kw
    )
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = []
    for container, milli in containers:
        entry = copy.deepcopy(template)
        entry["name"] = container
        entry["resources"] = {
            "requests": {"nvidia.com/vgpu": str(milli)},
            "limits": {"nvidia.com/vgpu": str(milli)},
        }
        pod["spec"]["containers"].append(entry)
    return pod


def scrape(collector: GpuCollector) -> list[Sample]:
    registry = CollectorRegistry()
    registry.register(collector)
    return parse(generate_latest(registry).decode())


# --- attribution -------------------------------------------------------------------------------
def test_shares_are_attributed_per_container_as_the_device_plugin_hands_them_out() -> None:
    pods = [
        vgpu_pod("nb", "2:500", [("main", 500)], namespace="ml", gang="nb"),
        vgpu_pod("train", "0:1000,1:1000", [("a", 1000), ("b", 1000)], gang="t"),
        # Another scheduler's pod: the device plugin gives it nothing, nor do the metrics.
        vgpu_pod("other", "3:1000", [("x", 1000)], scheduler="default-scheduler"),
        # Finished: holds nothing any more.
        {**vgpu_pod("done", "3:1000", [("y", 1000)]), "status": {"phase": "Succeeded"}},
    ]
    assert holdings(pods, NODE, 1, ("gang-scheduler",)) == [
        Holding(2, 500, "ml", "nb", "main", "nb"),
        Holding(0, 1000, "default", "train", "a", "t"),
        Holding(1, 1000, "default", "train", "b", "t"),
    ]


def gpu_pod(name: str, gpus: int, assignment: str, **kw: Any) -> Any:
    return pod_obj(
        name,
        gpus=gpus,
        node_name=NODE,
        annotations={ASSIGNMENT_ANNOTATION: assignment, **kw.pop("annotations", {})},
        phase="Running",
        **kw,
    )


def test_whole_gpus_are_attributed_where_they_really_are() -> None:
    """Served by the agent's own plugin (the container's mark): the assigned GPUs, which
    the plugin handed out whatever IDs the kubelet recorded. Served by NVIDIA's plugin
    (no mark): the GPUs the kubelet's pod-resources API names, not the assignment."""
    ours = gpu_pod(
        "ours", 2, "1:1000,3:1000", gang="g1", annotations={ALLOCATED_ANNOTATION: "init,main"}
    )
    ours["spec"]["initContainers"] = [
        {"name": "init", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    theirs = gpu_pod("theirs", 1, "0:1000", namespace="ml", gang="g2")
    other = pod_obj("other", gpus=1, node_name=NODE, phase="Running", scheduler="default-scheduler")
    done = {**gpu_pod("done", 1, "0:1000"), "status": {"phase": "Succeeded"}}
    kubelet = {
        # The kubelet's record of our plugin's pod differs (it did not take the
        # preference): the container runs on the assigned GPUs all the same.
        ("default", "ours"): {"main": (0, 1), "init": (0,)},
        ("ml", "theirs"): {"main": (2,)},
        ("default", "other"): {"main": (0,)},
        ("default", "done"): {"main": (0,)},
    }
    found = holdings([ours, theirs, other, done], NODE, 1, ("gang-scheduler",), kubelet)
    assert sorted(found, key=lambda h: (h.pod, h.index)) == [
        Holding(0, 1000, "default", "other", "main", ""),
        Holding(1, 1000, "default", "ours", "main", "g1"),
        Holding(3, 1000, "default", "ours", "main", "g1"),
        Holding(2, 1000, "ml", "theirs", "main", "g2"),
    ]
    # Without the kubelet's report, only what the agent's plugin served is known.
    alone = holdings([ours, theirs, other], NODE, 1, ("gang-scheduler",))
    assert {(h.pod, h.index) for h in alone} == {("ours", 1), ("ours", 3)}


def test_the_kubelet_report_names_each_container_s_gpus() -> None:
    listed = [
        podresources_api.PodResources(
            "ml",
            "p",
            (
                podresources_api.ContainerResources(
                    "a",
                    (
                        podresources_api.Devices("nvidia.com/gpu", (PCIE_BOX.gpus[2].uuid, "1")),
                        podresources_api.Devices(
                            "nvidia.com/vgpu", (PCIE_BOX.gpus[0].uuid + "::0",)
                        ),
                    ),
                ),
                podresources_api.ContainerResources(
                    "b", (podresources_api.Devices("nvidia.com/gpu", ("MIG-x",)),)
                ),
            ),
        )
    ]
    indices = {gpu.uuid: i for i, gpu in enumerate(PCIE_BOX.gpus)}
    assert container_gpus(listed, indices) == {("ml", "p"): {"a": (1, 2)}}


# --- the collector -----------------------------------------------------------------------------
def test_every_gpu_is_exported_with_dcgm_names_labels_and_units() -> None:
    nvml = FakeNvml(PCIE_BOX)
    nvml.used_mib[0] = 12000
    nvml.util[0] = (87, 40)
    nvml.power_mw[0] = 251500
    nvml.temperature[0] = 71
    nvml.ecc_corrected[0] = 3
    nvml.ecc_uncorrected[0] = 1
    nvml.failures[("power_milliwatts", 1)] = NOT_SUPPORTED  # e.g. a GeForce board
    book = HealthBook()
    book.note_xid(PCIE_BOX.gpus[0].uuid, 31)
    book.note_xid(PCIE_BOX.gpus[0].uuid, 79)
    book.record(PCIE_BOX.gpus[0].uuid, "XID 79")
    held = [
        Holding(0, 300, "ml", "a", "main", "g"),
        Holding(0, 700, "ml", "b", "main", ""),
    ]
    samples = scrape(GpuCollector(nvml, NODE, holders=lambda: held, book=book))
    gpu0 = {
        "gpu": "0",
        "UUID": PCIE_BOX.gpus[0].uuid,
        "pci_bus_id": "0000:1a:00.0",
        "device": "nvidia0",
        "modelName": "Tesla V100-PCIE-32GB",
        "Hostname": NODE,
    }
    # A shared GPU: one series per holding container, as DCGM's exporter does.
    used = series(samples, "DCGM_FI_DEV_FB_USED", gpu="0")
    assert sorted((s[1]["pod"], s[1]["container"], s[1]["namespace"]) for s in used) == [
        ("a", "main", "ml"),
        ("b", "main", "ml"),
    ]
    assert all(s[2] == 12000 and gpu0.items() <= s[1].items() for s in used)
    one = {"gpu": "0", "pod": "a"}
    assert series(samples, "DCGM_FI_DEV_FB_TOTAL", **one)[0][2] == 32510
    assert series(samples, "DCGM_FI_DEV_FB_FREE", **one)[0][2] == 32510 - 12000
    assert series(samples, "DCGM_FI_DEV_GPU_UTIL", **one)[0][2] == 87
    assert series(samples, "DCGM_FI_DEV_MEM_COPY_UTIL", **one)[0][2] == 40
    assert series(samples, "DCGM_FI_DEV_POWER_USAGE", **one)[0][2] == 251.5
    assert series(samples, "DCGM_FI_DEV_GPU_TEMP", **one)[0][2] == 71
    assert series(samples, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", **one)[0][2] == 3
    assert series(samples, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **one)[0][2] == 1
    assert series(samples, "DCGM_FI_DEV_XID_ERRORS", **one)[0][2] == 79  # the last one
    # A GPU nobody holds: one series, empty pod labels.
    free = series(samples, "DCGM_FI_DEV_GPU_TEMP", gpu="2")
    assert len(free) == 1 and (free[0][1]["pod"], free[0][1]["container"]) == ("", "")
    # Not supported: left out, not 0.
    assert series(samples, "DCGM_FI_DEV_POWER_USAGE", gpu="1") == []
    assert len(series(samples, "DCGM_FI_DEV_GPU_TEMP", gpu="1")) == 1
    # The agent's own series: health, XID count, shares with the gang.
    assert series(samples, "gang_scheduler_node_agent_gpu_healthy", gpu="0")[0][2] == 0
    assert series(samples, "gang_scheduler_node_agent_gpu_healthy", gpu="1")[0][2] == 1
    assert series(samples, "gang_scheduler_node_agent_gpu_xid_errors", gpu="0")[0][2] == 2
    shares = series(samples, "gang_scheduler_node_agent_gpu_share_milli", gpu="0")
    assert sorted((s[1]["pod"], s[1]["gang"], s[2]) for s in shares) == [
        ("a", "g", 300),
        ("b", "", 700),
    ]
    assert {s[0] for s in samples} >= set(DCGM_FIELDS)


def test_without_nvml_there_is_nothing_to_export() -> None:
    samples = scrape(GpuCollector(FakeNvml(PCIE_BOX, library=False), NODE))
    assert samples == []


# --- probes ------------------------------------------------------------------------------------
def test_liveness_fails_when_passes_stop_readiness_waits_for_the_plugin() -> None:
    now = [1000.0]
    registered = [False]
    status = AgentStatus(60.0, clock=lambda: now[0], plugin_ready=lambda: registered[0])
    assert status.alive()[0] and not status.ready()[0]  # starting
    status.pass_done()
    assert status.alive()[0]
    assert status.ready() == (False, "the device plugin is not registered with the kubelet yet")
    registered[0] = True
    assert status.ready() == (True, "ok")
    now[0] += 3 * 60 + 59
    assert status.alive()[0]
    now[0] += 2
    assert not status.alive()[0]


# --- end to end --------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_the_agent_serves_metrics_attributed_from_the_api_and_its_probes(
    tmp_path: Path,
) -> None:
    async with KubeApiEmulator() as emulator:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
        emulator.put_node(node)
        emulator.put_pod(vgpu_pod("nb", "3:250", [("main", 250)], namespace="ml", gang="nb"))
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        port = free_port()
        options = AgentOptions(
            node_name=NODE,
            kubeconfig=str(kubeconfig),
            interval=3600,
            metrics_port=port,
            metrics_address="127.0.0.1",
            attribution_interval=0.05,
        )
        nvml = FakeNvml(PCIE_BOX)
        nvml.used_mib[3] = 2048
        agent = asyncio.create_task(serve(options, nvml))
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:

                async def get(path: str) -> tuple[int, str]:
                    try:
                        async with http.get(base + path) as response:
                            return response.status, await response.text()
                    except aiohttp.ClientConnectionError:
                        return 0, ""

                async def ready() -> bool:
                    return (await get("/readyz"))[0] == 200

                await eventually_async(ready, "the agent ready")
                assert (await get("/healthz"))[0] == 200
                samples: list[Sample] = []

                async def attributed() -> bool:
                    nonlocal samples
                    samples = parse((await get("/metrics"))[1])
                    return bool(series(samples, "DCGM_FI_DEV_FB_USED", gpu="3", pod="nb"))

                await eventually_async(attributed, "GPU 3's memory attributed to nb")
                held = series(samples, "DCGM_FI_DEV_FB_USED", gpu="3", pod="nb")
                assert held and held[0][1]["namespace"] == "ml" and held[0][2] == 2048
                assert held[0][1]["container"] == "main" and held[0][1]["Hostname"] == NODE
                assert len(series(samples, "DCGM_FI_DEV_FB_USED")) == 4
                assert series(samples, "process_resident_memory_bytes")  # the agent's own
                lists = [
                    r for r in emulator.request_log if r.verb == "list" and r.resource == "pods"
                ]
                assert lists  # attribution read the node's pods from the API
        finally:
            agent.cancel()
            with pytest.raises(asyncio.CancelledError):
                await agent
    await eventually(lambda: True, "done")


@pytest.mark.asyncio
async def test_a_metrics_port_in_use_is_a_deployment_error(tmp_path: Path) -> None:
    async with KubeApiEmulator() as emulator:
        emulator.put_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = taken.sockets[0].getsockname()[1]
        try:
            options = AgentOptions(
                node_name=NODE,
                kubeconfig=str(kubeconfig),
                interval=3600,
                metrics_port=port,
                metrics_address="127.0.0.1",
            )
            assert await asyncio.wait_for(serve(options, FakeNvml(PCIE_BOX)), HANG) == 2
        finally:
            taken.close()
            await taken.wait_closed()


# --- the agent's own process ---------------------------------------------------------------------
# Label names the process and Python collectors may carry: none names a tenant (the GPU
# series above do, as DCGM's do; these describe the agent's own process).
PROCESS_LABELS = frozenset(
    {"generation", "implementation", "major", "minor", "patchlevel", "version"}
)


def test_the_agent_registry_carries_process_and_python_collectors_without_tenant_labels() -> None:
    registry = agent_registry()
    registry.register(GpuCollector(FakeNvml(PCIE_BOX), NODE))
    samples = parse(generate_latest(registry).decode())
    names = {name for name, _, _ in samples}
    for wanted in PROCESS_SERIES:
        assert wanted in names, wanted
    own = [s for s in samples if s[0].startswith(("process_", "python_"))]
    assert own and all(set(labels) <= PROCESS_LABELS for _, labels, _ in own)
    assert series(samples, "DCGM_FI_DEV_GPU_TEMP", gpu="0")  # the GPUs beside them


@pytest.mark.asyncio
async def test_whole_gpu_pods_are_attributed_from_the_mark_and_the_kubelet_report(
    tmp_path: Path,
) -> None:
    """End to end: the agent's /metrics attribute a whole-GPU pod its own plugin served to
    its assigned GPUs, and one NVIDIA's plugin served to the GPU the kubelet's
    pod-resources API (a test server) names, not the one it was assigned."""
    socket_dir = Path(tempfile.mkdtemp(prefix="am", dir="/tmp"))
    kubelet = FakePodResources(socket_dir / "kubelet.sock")
    await kubelet.start()
    try:
        async with KubeApiEmulator() as emulator:
            emulator.put_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
            emulator.put_pod(
                gpu_pod("ours", 1, "1:1000", gang="g1", annotations={ALLOCATED_ANNOTATION: "main"})
            )
            emulator.put_pod(gpu_pod("theirs", 1, "0:1000", namespace="ml", gang="g2"))
            kubelet.pods = [holding("ml", "theirs", "nvidia.com/gpu", PCIE_BOX.gpus[2].uuid)]
            port = free_port()
            options = AgentOptions(
                node_name=NODE,
                kubeconfig=str(write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")),
                interval=3600,
                metrics_port=port,
                metrics_address="127.0.0.1",
                attribution_interval=3600,  # one LIST: the report alone must refresh it
                pod_resources_socket=str(socket_dir / "kubelet.sock"),
                pod_resources_interval=0.05,
            )
            agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX)))
            samples: list[Sample] = []
            try:
                async with aiohttp.ClientSession() as http:

                    async def attributed() -> bool:
                        nonlocal samples
                        try:
                            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                                samples = parse(await response.text())
                        except aiohttp.ClientConnectionError:
                            return False
                        return bool(series(samples, "DCGM_FI_DEV_GPU_TEMP", pod="theirs"))

                    await eventually_async(attributed, "the report attributes GPU 2")
            finally:
                agent.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await agent
    finally:
        await kubelet.stop()
        shutil.rmtree(socket_dir, ignore_errors=True)
    held = {
        (s[1]["gpu"], s[1]["namespace"], s[1]["pod"], s[1]["container"], s[1]["gang"], s[2])
        for s in series(samples, "gang_scheduler_node_agent_gpu_share_milli")
    }
    assert held == {
        ("1", "default", "ours", "main", "g1", 1000),
        ("2", "ml", "theirs", "main", "g2", 1000),
    }
    assert [s[1]["pod"] for s in series(samples, "DCGM_FI_DEV_GPU_TEMP", gpu="0")] == [""]
