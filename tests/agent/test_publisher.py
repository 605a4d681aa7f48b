"""Publishing the discovery on the Node: what is patched, when, and how failures pass."""

from __future__ import annotations

import asyncio
import ctypes.util
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from cache.gpu import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL, TOPOLOGY_ANNOTATION
from cache.node import node_from_api
from scheduler.agent.discovery import discover
from scheduler.agent.nvml import RemappedRows
from scheduler.agent.publisher import (
    GFD_TIMESTAMP_LABEL,
    AgentOptions,
    KubeNodeApi,
    NodeAgent,
    RetryPolicy,
    node_patch,
    serve,
)
from scheduler.cli.main import main
from scheduler.kube.client import ApiError, create_client
from tests.agent import DGX_A100, PCIE_BOX, FakeMachine, FakeNvml, with_gpu
from tests.factories import node_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.waiting import HANG, eventually

FAST = RetryPolicy(attempts=4, first_wait=0.001, max_wait=0.002)
NO_GPU = FakeMachine("no GPU", (), ())


class FakeNodeApi:
    """NodeApi keeping one node in memory, applying merge patches to its metadata;
    `errors` are raised by the next calls, first to last."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.gets = 0
        self.patches: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []

    def _maybe_fail(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    async def get_node(self, name: str) -> dict[str, Any]:
        self.gets += 1
        self._maybe_fail()
        assert name == self.node["metadata"]["name"]
        return json.loads(json.dumps(self.node))

    async def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self._maybe_fail()
        self.patches.append(patch)
        meta = self.node["metadata"]
        for key, values in patch["metadata"].items():
            meta.setdefault(key, {}).update(values)
        return self.node


def plain_node(name: str = "gpu-1") -> dict[str, Any]:
    node = node_obj(name)
    node["metadata"]["annotations"] = {}
    return node


def agent_for(
    machine: FakeMachine, api: FakeNodeApi | None, *, dry_run: bool = False, once: bool = False
) -> tuple[NodeAgent, FakeNvml, io.StringIO]:
    backend = FakeNvml(machine)
    out = io.StringIO()
    options = AgentOptions(node_name="gpu-1", interval=0.01, once=once, dry_run=dry_run)
    return NodeAgent(backend, options, api, out=out, retry=FAST), backend, out


# --- the patch ---------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_fresh_node_gets_the_annotation_and_the_labels() -> None:
    discovery = discover(FakeNvml(DGX_A100))
    patch = node_patch(plain_node(), discovery)
    assert patch == {
        "metadata": {
            "annotations": {TOPOLOGY_ANNOTATION: discovery.annotation()},
            "labels": {
                PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB",
                MEMORY_LABEL: "81920",
                COUNT_LABEL: "8",
            },
        }
    }


@pytest.mark.asyncio
async def test_an_equal_inventory_written_differently_is_left_alone() -> None:
    discovery = discover(FakeNvml(DGX_A100))
    node = plain_node()
    annotation = discovery.annotation()
    assert annotation is not None
    reformatted = json.dumps(json.loads(annotation), indent=4, sort_keys=True)
    assert reformatted != annotation
    node["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = reformatted
    node["metadata"]["labels"].update(discovery.gfd_labels())
    assert node_patch(node, discovery) == {}


@pytest.mark.asyncio
async def test_a_changed_device_rewrites_the_annotation_only() -> None:
    before = discover(FakeNvml(DGX_A100))
    node = plain_node()
    node["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = before.annotation()
    node["metadata"]["labels"].update(before.gfd_labels())
    after = discover(FakeNvml(with_gpu(DGX_A100, 3, mig=True)))
    assert node_patch(node, after) == {
        "metadata": {"annotations": {TOPOLOGY_ANNOTATION: after.annotation()}}
    }


@pytest.mark.asyncio
async def test_a_malformed_annotation_is_replaced() -> None:
    discovery = discover(FakeNvml(PCIE_BOX))
    node = plain_node()
    node["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = "{not json"
    node["metadata"]["labels"].update(discovery.gfd_labels())
    assert node_patch(node, discovery)["metadata"]["annotations"] == {
        TOPOLOGY_ANNOTATION: discovery.annotation()
    }


@pytest.mark.asyncio
async def test_only_missing_labels_are_added() -> None:
    node = plain_node()
    node["metadata"]["labels"][PRODUCT_LABEL] = "A100-80G"  # someone's own naming
    patch = node_patch(node, discover(FakeNvml(DGX_A100)))
    assert patch["metadata"]["labels"] == {MEMORY_LABEL: "81920", COUNT_LABEL: "8"}


@pytest.mark.asyncio
async def test_no_labels_while_gfd_runs() -> None:
    node = plain_node()
    node["metadata"]["labels"][GFD_TIMESTAMP_LABEL] = "1712345678"
    patch = node_patch(node, discover(FakeNvml(DGX_A100)))
    assert set(patch["metadata"]) == {"annotations"}


@pytest.mark.asyncio
async def test_nothing_is_written_or_removed_without_gpus() -> None:
    node = plain_node()
    node["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = "stale"
    assert node_patch(node, discover(FakeNvml(NO_GPU))) == {}
    assert node_patch(node, discover(FakeNvml(DGX_A100, library=False))) == {}


@pytest.mark.asyncio
async def test_a_node_without_metadata_maps() -> None:
    assert "annotations" in node_patch({"metadata": None}, discover(FakeNvml(PCIE_BOX)))["metadata"]


# --- the loop against a fake API ---------------------------------------------------------------
@pytest.mark.asyncio
async def test_writes_only_when_something_changed() -> None:
    api = FakeNodeApi(plain_node())
    agent, backend, _ = agent_for(DGX_A100, api)
    assert await agent.run_pass()
    assert await agent.run_pass()
    assert len(api.patches) == 1 and api.gets == 2
    backend.machine = with_gpu(DGX_A100, 6, rows=RemappedRows(0, 2, True, False))
    assert await agent.run_pass()
    assert len(api.patches) == 2
    written = node_from_api(api.node)
    assert [d.healthy for d in written.devices] == [True] * 6 + [False, True]
    assert written.labels[COUNT_LABEL] == "8"


@pytest.mark.asyncio
async def test_the_loop_runs_until_stopped() -> None:
    api = FakeNodeApi(plain_node())
    agent, backend, _ = agent_for(PCIE_BOX, api)

    async def stop_later() -> None:
        await eventually(lambda: api.gets >= 3, "three passes")
        agent.stop()

    stopper = asyncio.create_task(stop_later())
    assert await asyncio.wait_for(agent.run(), HANG) == 0
    await stopper
    assert api.gets >= 3 and len(api.patches) == 1
    assert backend.calls.count("init") == api.gets


@pytest.mark.asyncio
async def test_transient_api_errors_are_retried() -> None:
    api = FakeNodeApi(plain_node())
    api.errors = [ApiError(503, "ServiceUnavailable", "", {}), ConnectionResetError("reset")]
    api.errors.append(ApiError(429, "TooManyRequests", "", {}))
    agent, _, _ = agent_for(PCIE_BOX, api)
    assert await agent.run_pass()
    assert api.gets == 4 and len(api.patches) == 1  # three failures, then through


@pytest.mark.asyncio
async def test_retries_give_up_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeNodeApi(plain_node())
    api.errors = [ApiError(500, "InternalError", "etcd", {}) for _ in range(FAST.attempts)]
    agent, _, _ = agent_for(PCIE_BOX, api)
    with caplog.at_level(logging.WARNING, "gang_scheduler.node_agent"):
        assert not await agent.run_pass()
    assert api.gets == FAST.attempts and api.patches == []
    assert "trying again" in caplog.text
    assert await agent.run_pass()  # the API is back
    assert len(api.patches) == 1


@pytest.mark.asyncio
async def test_forbidden_is_not_retried_and_names_the_rbac(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeNodeApi(plain_node())
    api.errors = [ApiError(403, "Forbidden", 'nodes "gpu-1" is forbidden', {})]
    agent, _, _ = agent_for(PCIE_BOX, api)
    with caplog.at_level(logging.WARNING, "gang_scheduler.node_agent"):
        assert not await agent.run_pass()
    assert api.gets == 1
    assert "needs get and patch on nodes" in caplog.text


@pytest.mark.asyncio
async def test_no_gpu_is_one_line_and_no_api_call(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeNodeApi(plain_node())
    agent, _, _ = agent_for(NO_GPU, api)
    with caplog.at_level(logging.INFO, "gang_scheduler.node_agent"):
        for _ in range(3):
            assert await agent.run_pass()
    assert api.gets == 0 and api.patches == []
    lines = [r.getMessage() for r in caplog.records if r.name == "gang_scheduler.node_agent"]
    assert len(lines) == 1 and lines[0].startswith("no NVIDIA GPU found; nothing to publish")


@pytest.mark.asyncio
async def test_no_nvml_keeps_running(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeNodeApi(plain_node())
    agent, backend, _ = agent_for(DGX_A100, api)
    backend.library = False

    async def stop_later() -> None:
        await eventually(lambda: backend.calls.count("init") >= 3, "three passes")
        agent.stop()

    with caplog.at_level(logging.WARNING, "gang_scheduler.node_agent"):
        stopper = asyncio.create_task(stop_later())
        assert await asyncio.wait_for(agent.run(), HANG) == 0
        await stopper
    assert api.gets == 0
    assert caplog.text.count("NVML library not found") == 1


@pytest.mark.asyncio
async def test_unhealthy_devices_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeNodeApi(plain_node())
    agent, _, _ = agent_for(with_gpu(PCIE_BOX, 2, mig=True), api)
    with caplog.at_level(logging.WARNING, "gang_scheduler.node_agent"):
        assert await agent.run_pass()
    assert "GPU 2 (GPU-v100-0002" in caplog.text and "MIG mode is enabled" in caplog.text


# --- dry run -----------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_dry_run_prints_the_patch_and_writes_nothing() -> None:
    api = FakeNodeApi(plain_node())
    agent, _, out = agent_for(PCIE_BOX, api, dry_run=True, once=True)
    assert await agent.run() == 0
    assert api.patches == []
    printed = json.loads(out.getvalue())
    assert printed == node_patch(plain_node(), discover(FakeNvml(PCIE_BOX)))
    assert TOPOLOGY_ANNOTATION in printed["metadata"]["annotations"]


@pytest.mark.asyncio
async def test_dry_run_of_an_up_to_date_node_prints_an_empty_patch() -> None:
    api = FakeNodeApi(plain_node())
    await agent_for(PCIE_BOX, api)[0].run_pass()
    agent, _, out = agent_for(PCIE_BOX, api, dry_run=True, once=True)
    assert await agent.run() == 0
    assert json.loads(out.getvalue()) == {}


@pytest.mark.asyncio
async def test_serve_dry_run_without_a_node_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    options = AgentOptions(once=True, dry_run=True)
    assert await serve(options, FakeNvml(DGX_A100)) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["metadata"]["labels"][COUNT_LABEL] == "8"


@pytest.mark.asyncio
async def test_serve_needs_a_node_name_to_write(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert await serve(AgentOptions(once=True), FakeNvml(DGX_A100)) == 2
    assert "give --node-name or set NODE_NAME" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_serve_refuses_a_bad_interval(capsys: pytest.CaptureFixture[str]) -> None:
    assert await serve(AgentOptions(node_name="n", interval=0), FakeNvml(DGX_A100)) == 2
    assert "--interval must be > 0" in capsys.readouterr().err


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver"
)
def test_cli_once_dry_run_on_a_host_without_nvml(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "gang_scheduler.node_agent"):
        assert main(["node-agent", "--once", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    assert "NVML library not found: " in caplog.text


# --- over HTTP, against the API emulator -------------------------------------------------------
@pytest.mark.asyncio
async def test_publishes_through_the_real_client(tmp_path: Path) -> None:
    async with KubeApiEmulator() as emulator:
        emulator.put_node(plain_node("gpu-1"))
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        options = AgentOptions(node_name="gpu-1", kubeconfig=str(kubeconfig), once=True)

        assert await serve(options, FakeNvml(DGX_A100)) == 0
        stored = emulator.get_node("gpu-1")
        assert stored is not None
        info = node_from_api(stored)
        assert len(info.devices) == 8 and info.problems == ()
        assert info.pair_scores is not None and info.pair_scores[0][7] == 1200
        assert info.labels[PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"
        assert emulator.request_count("patch", "nodes") == 1

        assert await serve(options, FakeNvml(DGX_A100)) == 0
        assert emulator.request_count("patch", "nodes") == 1  # nothing changed
        assert emulator.request_count("get", "nodes") == 2


@pytest.mark.asyncio
async def test_retries_over_http(tmp_path: Path) -> None:
    async with KubeApiEmulator() as emulator:
        emulator.put_node(plain_node("gpu-1"))
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        emulator.fail_requests("patch", "nodes", count=2, status=503)
        client = await create_client(str(kubeconfig))
        async with client:
            options = AgentOptions(node_name="gpu-1", once=True)
            agent = NodeAgent(FakeNvml(PCIE_BOX), options, KubeNodeApi(client), retry=FAST)
            assert await agent.run() == 0
        assert emulator.request_count("patch", "nodes") == 3
        stored = emulator.get_node("gpu-1")
        assert stored is not None
        assert TOPOLOGY_ANNOTATION in stored["metadata"]["annotations"]


@pytest.mark.asyncio
async def test_a_missing_node_fails_the_single_pass(tmp_path: Path) -> None:
    async with KubeApiEmulator() as emulator:
        kubeconfig = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        options = AgentOptions(node_name="nowhere", kubeconfig=str(kubeconfig), once=True)
        assert await serve(options, FakeNvml(PCIE_BOX)) == 1
