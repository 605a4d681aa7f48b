"""Isolation modes of the Allocate answer (scheduler/agent/isolation.py): environment,
device nodes, CDI names, alone and combined, and over the kubelet's gRPC API."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import VISIBLE_DEVICES_ENV, GpuState
from scheduler.agent.deviceplugin import DevicePluginConfig
from scheduler.agent.isolation import CONTROL_NODES, container_answer, mode_problems
from scheduler.cli.main import build_parser, device_plugin_config
from tests.agent.plugin_running import NODE, running
from tests.agent.test_deviceplugin import UUIDS, ids_of, vgpu_pod

GPUS = [GpuState(1, "GPU-b", True, 0, 5), GpuState(3, "GPU-d", True, 1, 7)]  # memory unknown
ENV = {VISIBLE_DEVICES_ENV: "GPU-b,GPU-d", "GANG_SCHEDULER_GPU_DEVICES": "1:1000,3:1000"}


def nodes(answer: api.ContainerAllocation) -> list[str]:
    return [device.host_path for device in answer.devices]


def test_envvar_is_the_environment_alone() -> None:
    answer = container_answer(ENV, GPUS, ["envvar"])
    assert answer == api.ContainerAllocation(envs=ENV)


def test_device_nodes_are_the_gpus_minors_and_the_control_nodes_nothing_else_visible() -> None:
    answer = container_answer(ENV, GPUS, ["device-nodes"])
    assert nodes(answer) == ["/dev/nvidia5", "/dev/nvidia7", *CONTROL_NODES]
    assert all(d.container_path == d.host_path and d.permissions == "rw" for d in answer.devices)
    # An image's NVIDIA_VISIBLE_DEVICES=all must not get every GPU from the runtime.
    assert answer.envs[VISIBLE_DEVICES_ENV] == "void"
    assert answer.envs["GANG_SCHEDULER_GPU_DEVICES"] == "1:1000,3:1000"
    assert answer.cdi_devices == ()


def test_cdi_names_the_gpus_by_uuid() -> None:
    answer = container_answer(ENV, GPUS, ["cdi"])
    assert answer.cdi_devices == ("nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-d")
    assert answer.envs[VISIBLE_DEVICES_ENV] == "void" and answer.devices == ()


def test_modes_combine() -> None:
    answer = container_answer(ENV, GPUS, ["envvar", "device-nodes"])
    assert answer.envs[VISIBLE_DEVICES_ENV] == "GPU-b,GPU-d"
    assert nodes(answer)[:2] == ["/dev/nvidia5", "/dev/nvidia7"]


def test_a_share_gets_its_memory_limit_and_with_mps_the_mps_client_limits() -> None:
    a100 = [GpuState(0, "GPU-a", True, 0, 0, 81920)]
    plain = container_answer(ENV, a100, ["envvar"], milli=250)
    assert plain.envs["GANG_SCHEDULER_GPU_MEMORY_LIMIT_MIB"] == "20480"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in plain.envs
    mps = container_answer(ENV, a100, ["envvar"], milli=250, mps=True)
    assert mps.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    assert mps.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # Whole GPUs: the whole memory, and no MPS limit to set.
    two = [GpuState(0, "GPU-a", True, 0, 0, 81920), GpuState(1, "GPU-b", True, 0, 1, 81920)]
    whole = container_answer(ENV, two, ["envvar"], milli=1000, mps=True)
    assert whole.envs["GANG_SCHEDULER_GPU_MEMORY_LIMIT_MIB"] == "81920"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in whole.envs
    # Memory unknown: no contract rather than a wrong one.
    assert "GANG_SCHEDULER_GPU_MEMORY_LIMIT_MIB" not in container_answer(ENV, GPUS, ["envvar"]).envs


def test_a_gpu_without_a_known_device_node_is_refused_in_that_mode() -> None:
    unknown = [GpuState(2, "GPU-c", True, 0, None)]
    with pytest.raises(ValueError, match="GPU 2's device node is unknown"):
        container_answer(ENV, unknown, ["device-nodes"])
    assert container_answer(ENV, unknown, ["cdi"]).cdi_devices == ("nvidia.com/gpu=GPU-c",)


def test_modes_are_checked_and_the_cli_passes_them() -> None:
    assert mode_problems(["cdi"]) == []
    assert mode_problems([]) == ["at least one --isolation mode is needed"]
    assert mode_problems(["mps"])[0].startswith("unknown --isolation 'mps'")
    config = DevicePluginConfig(node_name=NODE, isolation=("nvidia-docker",))
    assert config.problems() and "unknown --isolation" in config.problems()[0]
    args = build_parser().parse_args(
        ["node-agent", "--isolation", "cdi", "--isolation", "envvar", "--mps"]
    )
    assert args.isolation == ["cdi", "envvar"] and args.mps
    with pytest.raises(SystemExit):
        build_parser().parse_args(["node-agent", "--isolation", "privileged"])


def test_the_command_defaults_to_cdi_and_takes_envvar_only_when_asked() -> None:
    """Safe by default whatever starts the agent (docs/decisions.md): with no
    --isolation the plugin hands GPUs out as CDI devices, never by the variable that any
    container may set; envvar is the explicit fallback."""
    default = device_plugin_config(build_parser().parse_args(["node-agent"]))
    assert default is not None and default.isolation == ("cdi",)
    assert DevicePluginConfig(node_name=NODE).isolation == ("cdi",)
    answer = container_answer(ENV, GPUS, default.isolation)
    assert answer.envs[VISIBLE_DEVICES_ENV] == "void" and len(answer.cdi_devices) == 2
    fallback = device_plugin_config(
        build_parser().parse_args(["node-agent", "--isolation", "envvar"])
    )
    assert fallback is not None and fallback.isolation == ("envvar",)
    assert (
        device_plugin_config(build_parser().parse_args(["node-agent", "--no-device-plugin"]))
        is None
    )


@pytest.mark.asyncio
async def test_the_kubelet_receives_device_specs_and_cdi_names_of_the_assigned_gpu(
    plugin_dir: Path,
) -> None:
    async with running(plugin_dir, isolation=("device-nodes", "cdi")) as setup:
        setup.emulator.put_pod(vgpu_pod("nb", 500, "2:500"))
        client = setup.client()
        try:
            [answer] = await client.allocate(ids_of(0, 500))
        finally:
            await client.close()
        assert answer.cdi_devices == (f"nvidia.com/gpu={UUIDS[2]}",)
        assert nodes(answer) == ["/dev/nvidia2", *CONTROL_NODES]
        assert answer.envs[VISIBLE_DEVICES_ENV] == "void"
        assert answer.envs["GANG_SCHEDULER_GPU_DEVICES"] == "2:500"
