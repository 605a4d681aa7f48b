"""How a container is handed its GPUs in the Allocate answer: the isolation modes
(docs/device-plugin.md, "Isolation modes"). Pure: the GPUs and the environment in, the
kubelet's ContainerAllocation out.

- `envvar`: `NVIDIA_VISIBLE_DEVICES=<uuids>`; the NVIDIA container runtime (or its
  hook) mounts exactly those GPUs. The default, as in NVIDIA's own plugin.
- `device-nodes`: the GPUs' device nodes (`/dev/nvidia<minor>`) and the driver's
  control nodes as DeviceSpecs: the kubelet has the runtime create them and allow them
  in the container's device cgroup, whatever runtime runs it. The driver's user-space
  libraries are not device nodes: they come from the NVIDIA runtime (with `envvar`
  too: NVIDIA's `--pass-device-specs`) or from the image.
- `cdi`: CDI device names `nvidia.com/gpu=<uuid>` (the names `nvidia-ctk cdi generate`
  writes into the node's CDI spec); the runtime applies the spec's edits (device
  nodes, libraries, hooks). Needs a CDI-enabled runtime and the kubelet's CDI field.

Modes combine (`envvar` and `device-nodes` is NVIDIA's pass-device-specs setup). Without
`envvar`, `NVIDIA_VISIBLE_DEVICES` is set to `void`: CUDA images set it to `all` in
their environment, and a node whose default runtime is NVIDIA's would otherwise mount
every GPU of the node into the container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import VISIBLE_DEVICES_ENV, GpuState

ENVVAR = "envvar"
DEVICE_NODES = "device-nodes"
CDI = "cdi"
MODES = (ENVVAR, DEVICE_NODES, CDI)
DEFAULT_MODES = (ENVVAR,)

CDI_KIND = "nvidia.com/gpu"
# The driver's control nodes every CUDA process opens besides its GPUs' own (the same
# set NVIDIA's device plugin passes with --pass-device-specs).
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
NO_DEVICES = "void"


def mode_problems(modes: Iterable[str]) -> list[str]:
    chosen = list(modes)
    found = [
        f"unknown --isolation {m!r} (one of {', '.join(MODES)})" for m in chosen if m not in MODES
    ]
    if not chosen:
        found.append("at least one --isolation mode is needed")
    return found


def container_answer(
    env: Mapping[str, str], gpus: Sequence[GpuState], modes: Iterable[str]
) -> api.ContainerAllocation:
    """The Allocate answer for one container given `gpus`, with `env` (the plugin's
    variables, NVIDIA_VISIBLE_DEVICES included) adjusted to the modes. ValueError when
    a mode cannot be honoured (a GPU whose device node NVML did not report)."""
    chosen = set(modes)
    envs = dict(env)
    if ENVVAR not in chosen:
        envs[VISIBLE_DEVICES_ENV] = NO_DEVICES
    devices: tuple[api.DeviceSpec, ...] = ()
    if DEVICE_NODES in chosen:
        missing = [gpu.index for gpu in gpus if gpu.minor is None]
        if missing:
            raise ValueError(
                f"GPU {missing[0]}'s device node is unknown (nvmlDeviceGetMinorNumber "
                "failed): cannot hand it out as a device node"
            )
        nodes = [f"/dev/nvidia{gpu.minor}" for gpu in gpus] + list(CONTROL_NODES)
        devices = tuple(api.DeviceSpec(path, path, "rw") for path in nodes)
    cdi = tuple(f"{CDI_KIND}={gpu.uuid}" for gpu in gpus) if CDI in chosen else ()
    return api.ContainerAllocation(envs=envs, devices=devices, cdi_devices=cdi)
