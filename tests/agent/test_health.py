"""GPU faults from NVML events (scheduler/agent/health.py): the watcher thread, the
polling fallback, and what follows a fault at once: the device plugin's list, the
node's topology annotation, and the scheduler placing around the faulty GPU."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from cache.gpu import ASSIGNMENT_ANNOTATION, TOPOLOGY_ANNOTATION, parse_assignment
from scheduler.agent import kubelet_api as api
from scheduler.agent.deviceplugin import SOCKET_NAME, DevicePlugin, DevicePluginConfig
from scheduler.agent.discovery import discover
from scheduler.agent.health import EventWatcher, HealthBook, event_fault
from scheduler.agent.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    GPU_IS_LOST,
    NOT_SUPPORTED,
    NvmlEvent,
)
from scheduler.agent.publisher import AgentOptions, NodeAgent, serve
from tests.agent import DGX_A100, PCIE_BOX, FakeNvml, with_gpu
from tests.agent.kubelet import FakeKubelet, PluginClient
from tests.agent.test_publisher import FAST, FakeNodeApi, plain_node
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import bound, running, unschedulable_message
from tests.kubeapi import EVENTS, KubeApiEmulator, write_kubeconfig
from tests.waiting import HANG, cycles_pass, eventually

XID_FALLEN_OFF_BUS = 79  # "GPU has fallen off the bus": the GPU is gone until a reset
XID_PAGE_FAULT = 31  # a CUDA program's illegal memory access: the GPU is fine


def watching(nvml: FakeNvml, book: HealthBook, **options: float) -> EventWatcher:
    watcher = EventWatcher(nvml, book, wait_ms=20, **options)  # type: ignore[arg-type]
    watcher.start()
    assert watcher.ready.wait(HANG)
    return watcher


def wait_for(condition: object, what: str) -> None:
    """Poll a condition set by the watcher's thread (these tests are synchronous)."""
    done = threading.Event()
    deadline = time.monotonic() + HANG  # a hang fails the test; no measure of speed
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        done.wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# --- what an event means -----------------------------------------------------------------------
def test_critical_xids_and_double_bit_ecc_are_faults_application_xids_are_not() -> None:
    uuid = DGX_A100.gpus[0].uuid
    assert event_fault(NvmlEvent(uuid, EVENT_XID_CRITICAL, XID_FALLEN_OFF_BUS)) == (
        "XID 79 (critical error reported by the driver)"
    )
    assert event_fault(NvmlEvent(uuid, EVENT_XID_CRITICAL, 48)) is not None  # DBE XID
    assert event_fault(NvmlEvent(uuid, EVENT_XID_CRITICAL, XID_PAGE_FAULT)) is None
    assert event_fault(NvmlEvent(uuid, EVENT_XID_CRITICAL, 13)) is None
    assert event_fault(NvmlEvent(uuid, EVENT_DOUBLE_BIT_ECC, 0)) == (
        "double-bit (uncorrectable) ECC error"
    )
    assert event_fault(NvmlEvent(uuid, EVENT_SINGLE_BIT_ECC, 0)) is None  # corrected


# --- the watcher thread ------------------------------------------------------------------------
def test_an_xid_event_marks_only_its_gpu_at_once() -> None:
    nvml = FakeNvml(DGX_A100)
    book = HealthBook()
    woken = threading.Event()
    book.subscribe(woken.set)
    watcher = watching(nvml, book)
    try:
        assert watcher.registered == {gpu.uuid for gpu in DGX_A100.gpus}
        assert set(nvml.registered.values()) == {EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC}
        nvml.inject(3, EVENT_XID_CRITICAL, XID_PAGE_FAULT)  # ignored
        nvml.inject(5, EVENT_XID_CRITICAL, XID_FALLEN_OFF_BUS)
        assert woken.wait(5)
        assert book.faults() == {
            DGX_A100.gpus[5].uuid: ("XID 79 (critical error reported by the driver)",)
        }
        nvml.inject(5, EVENT_DOUBLE_BIT_ECC)
        wait_for(lambda: len(book.faults()[DGX_A100.gpus[5].uuid]) == 2, "a second fault")
    finally:
        watcher.stop(5)
    # NVML released: its init and shutdown balance (the publisher's passes are unaffected).
    assert nvml.initialised == 0
    assert "event_set_free" in nvml.calls


def test_a_gpu_without_events_is_polled_for_uncorrectable_ecc_errors() -> None:
    machine = with_gpu(PCIE_BOX, 2, events=0)  # e.g. a GPU passed through to a VM
    nvml = FakeNvml(machine)
    nvml.ecc_uncorrected[2] = 4  # errors from before the agent started: not new
    book = HealthBook()
    watcher = watching(nvml, book, poll_interval=0.02)
    try:
        assert [entry.uuid for entry in watcher.polled] == [machine.gpus[2].uuid]
        assert 2 not in nvml.registered
        wait_for(lambda: nvml.calls.count("uncorrected_ecc_errors") >= 3, "a few polls")
        assert book.faults() == {}
        nvml.ecc_uncorrected[2] = 5
        wait_for(lambda: machine.gpus[2].uuid in book.faults(), "the polled fault")
        assert book.faults()[machine.gpus[2].uuid] == ("1 new uncorrectable ECC error(s)",)
    finally:
        watcher.stop(5)


def test_without_an_event_set_every_gpu_is_polled() -> None:
    nvml = FakeNvml(PCIE_BOX, event_set_error=NOT_SUPPORTED)
    book = HealthBook()
    watcher = watching(nvml, book, poll_interval=0.02)
    try:
        assert len(watcher.polled) == 4 and watcher.registered == set()
        nvml.ecc_uncorrected[0] = 1
        wait_for(lambda: PCIE_BOX.gpus[0].uuid in book.faults(), "the polled fault")
    finally:
        watcher.stop(5)


def test_when_waiting_fails_every_gpu_is_polled_and_a_lost_one_found() -> None:
    nvml = FakeNvml(PCIE_BOX)
    book = HealthBook()
    watcher = watching(nvml, book, poll_interval=0.02)
    try:
        assert len(watcher.registered) == 4
        nvml.failures[("wait_event", 0)] = GPU_IS_LOST  # the event set breaks
        nvml.failures[("uncorrected_ecc_errors", 2)] = GPU_IS_LOST  # GPU 2 fell off the bus
        # The watcher's thread records the fault while it moves the GPUs to polling:
        # wait for the whole hand-over, not the first sign of it.
        wait_for(
            lambda: (
                PCIE_BOX.gpus[2].uuid in book.faults()
                and not watcher.registered
                and len(watcher.polled) == 4
            ),
            "the lost GPU, every GPU polled",
        )
        assert set(book.faults()) == {PCIE_BOX.gpus[2].uuid}
    finally:
        watcher.stop(5)


def test_without_nvml_the_watcher_ends_quietly() -> None:
    nvml = FakeNvml(PCIE_BOX, library=False)
    watcher = watching(nvml, HealthBook())
    watcher.stop(5)
    assert watcher.registered == set() and watcher.polled == []


def test_a_fault_is_added_to_the_discovery_of_its_gpu() -> None:
    book = HealthBook()
    book.record(PCIE_BOX.gpus[1].uuid, "XID 79 (critical error reported by the driver)")
    found = discover(FakeNvml(PCIE_BOX)).with_faults(book.faults())
    assert [report.healthy for report in found.devices] == [True, False, True, True]
    annotation = found.annotation()
    assert annotation is not None
    devices = json.loads(annotation)["devices"]
    assert [device["healthy"] for device in devices] == [True, False, True, True]


# --- the publisher and the device plugin act at once ---------------------------------------
@pytest.mark.asyncio
async def test_a_fault_is_published_at_once_not_an_interval_later() -> None:
    nodes = FakeNodeApi(plain_node())
    book = HealthBook()
    options = AgentOptions(node_name="gpu-1", interval=3600)
    agent = NodeAgent(FakeNvml(PCIE_BOX), options, nodes, retry=FAST, health=book)
    task = asyncio.create_task(agent.run())
    try:
        await eventually(lambda: len(nodes.patches) == 1, "the first patch")
        # Recorded from another thread, as the watcher does.
        await asyncio.to_thread(book.record, PCIE_BOX.gpus[3].uuid, "XID 79")
        await eventually(lambda: len(nodes.patches) == 2, "a patch right after the fault")
        text = nodes.node["metadata"]["annotations"][TOPOLOGY_ANNOTATION]
        assert [d["healthy"] for d in json.loads(text)["devices"]] == [True, True, True, False]
    finally:
        agent.stop()
        assert await asyncio.wait_for(task, HANG) == 0


@pytest.mark.asyncio
async def test_the_device_plugin_lists_a_faulty_gpu_unhealthy_at_once(plugin_dir: Path) -> None:
    kubelet = FakeKubelet(plugin_dir)
    await kubelet.start()
    book = HealthBook()
    config = DevicePluginConfig(
        node_name="gpu-1", directory=plugin_dir, health_interval=3600, watch_interval=0.02
    )

    class NoPods:
        async def list_pods(self, node: str) -> list[dict[str, object]]:
            return []

        async def patch_pod(self, namespace: str, name: str, patch: object) -> dict[str, object]:
            raise AssertionError("no Allocate here")

    plugin = DevicePlugin(FakeNvml(PCIE_BOX), config, NoPods(), health=book)
    task = asyncio.create_task(plugin.run())
    client = PluginClient(plugin_dir / SOCKET_NAME)
    try:
        await eventually(lambda: len(kubelet.registrations) == 1, "registered")
        stream = client.list_and_watch()
        first = await anext(stream)
        assert {device.health for device in first} == {api.HEALTHY}
        await asyncio.to_thread(book.record, PCIE_BOX.gpus[2].uuid, "double-bit ECC")
        second = await asyncio.wait_for(anext(stream), HANG)
        unhealthy = {d.id.split("::")[0] for d in second if d.health == api.UNHEALTHY}
        assert unhealthy == {PCIE_BOX.gpus[2].uuid} and len(second) == 4000
        await stream.aclose()
    finally:
        await client.close()
        plugin.stop()
        await asyncio.wait_for(task, HANG)
        await kubelet.stop()


# --- end to end: agent, API server, scheduler ----------------------------------------------
@pytest.mark.asyncio
async def test_the_scheduler_places_around_a_gpu_an_xid_took_out(tmp_path: Path) -> None:
    """The node agent (fake NVML) publishes on a Node of the API emulator; an XID on GPU 1
    reaches the annotation at once; the scheduler then binds onto GPUs 0, 2 and 3 and
    leaves GPU 1 alone, and a fourth GPU is not to be had on that node."""

    async def scenario() -> None:
        async with KubeApiEmulator() as emulator:
            node = node_obj("gpu-1", gpus=4)
            node["metadata"]["annotations"] = {}
            emulator.put_node(node)
            kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "agent-kubeconfig")
            nvml = FakeNvml(PCIE_BOX)
            options = AgentOptions(node_name="gpu-1", kubeconfig=str(kubeconfig), interval=3600)
            agent = asyncio.create_task(serve(options, nvml))

            def published() -> list[bool]:
                stored = emulator.get_node("gpu-1") or {}
                annotations = stored.get("metadata", {}).get("annotations") or {}
                text = annotations.get(TOPOLOGY_ANNOTATION)
                return [d["healthy"] for d in json.loads(text)["devices"]] if text else []

            try:
                await eventually(lambda: published() == [True] * 4, "the inventory published")
                await eventually(lambda: 1 in nvml.registered, "GPU 1 watched for events")
                nvml.inject(1, EVENT_XID_CRITICAL, XID_FALLEN_OFF_BUS)
                await eventually(
                    lambda: published() == [True, False, True, True], "GPU 1 unhealthy"
                )
                for name in ("w0", "w1", "w2"):
                    emulator.put_pod(pod_obj(name, gang="train", min_member=3, gpus=1))
                async with running(emulator, tmp_path):
                    await eventually(lambda: len(bound(emulator, "w")) == 3, "gang bound")
                    used = sorted(
                        index
                        for pod in bound(emulator, "w").values()
                        for index, _ in parse_assignment(
                            pod["metadata"]["annotations"][ASSIGNMENT_ANNOTATION]
                        )
                    )
                    assert used == [0, 2, 3]
                    emulator.put_pod(pod_obj("x3", gang="more", min_member=1, gpus=1))

                    def x3_message() -> str:
                        pods = {p["metadata"]["name"]: p for p in emulator.pods()}
                        return unschedulable_message(pods["x3"])

                    await eventually(lambda: bool(x3_message()), "x3 unschedulable")
                    assert "x3" not in bound(emulator)
            finally:
                agent.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await agent

    await asyncio.wait_for(scenario(), 4 * HANG)


@pytest.mark.asyncio
async def test_a_gang_running_on_a_gpu_that_fails_gets_a_warning(tmp_path: Path) -> None:
    """A gang holds two GPUs when one of them takes an XID: the pod on it gets a
    GPUUnhealthy Warning (its gang mate on a healthy GPU does not), and the next gang
    goes onto the two healthy GPUs left, never onto the faulty one."""

    async def scenario() -> None:
        async with KubeApiEmulator() as emulator:
            node = node_obj("gpu-1", gpus=4)
            node["metadata"]["annotations"] = {}
            emulator.put_node(node)
            kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "agent-kubeconfig")
            nvml = FakeNvml(PCIE_BOX)
            options = AgentOptions(node_name="gpu-1", kubeconfig=str(kubeconfig), interval=3600)
            agent = asyncio.create_task(serve(options, nvml))

            def devices_of(prefix: str) -> dict[str, list[int]]:
                return {
                    name: [
                        i
                        for i, _ in parse_assignment(
                            pod["metadata"]["annotations"][ASSIGNMENT_ANNOTATION]
                        )
                    ]
                    for name, pod in bound(emulator, prefix).items()
                }

            def warned() -> set[str]:
                return {
                    str(event["involvedObject"]["name"])
                    for event in emulator.objects(EVENTS)
                    if event.get("reason") == "GPUUnhealthy" and event.get("type") == "Warning"
                }

            try:
                await eventually(lambda: 3 in nvml.registered, "the GPUs watched")
                for name in ("a0", "a1"):
                    emulator.put_pod(pod_obj(name, gang="first", min_member=2, gpus=1))
                async with running(emulator, tmp_path) as port:
                    await eventually(lambda: len(bound(emulator, "a")) == 2, "first gang bound")
                    held = devices_of("a")
                    faulty = held["a0"][0]
                    nvml.inject(faulty, EVENT_XID_CRITICAL, XID_FALLEN_OFF_BUS)
                    await eventually(lambda: warned() == {"a0"}, "a0 warned")
                    for name in ("b0", "b1"):
                        emulator.put_pod(pod_obj(name, gang="second", min_member=2, gpus=1))
                    await eventually(lambda: len(bound(emulator, "b")) == 2, "second bound")
                    second = sorted(i for ids in devices_of("b").values() for i in ids)
                    assert second == sorted({0, 1, 2, 3} - {held["a0"][0], held["a1"][0]})
                    # Cycles after the second gang bound: each checks the GPUs' health
                    # again; what they queued is written before the scheduler stops.
                    await cycles_pass(port)
                assert warned() == {"a0"}  # once, and only for the pod on that GPU
                messages = [
                    str(event["message"])
                    for event in emulator.objects(EVENTS)
                    if event.get("reason") == "GPUUnhealthy"
                ]
                assert len(messages) == 1
                assert f"GPU {faulty} ({PCIE_BOX.gpus[faulty].uuid})" in messages[0]
                assert "held by this pod of gang default/first" in messages[0]
            finally:
                agent.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await agent

    await asyncio.wait_for(scenario(), 4 * HANG)
