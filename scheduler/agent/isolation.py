"""How a container is handed its GPUs in the Allocate answer: the isolation modes
(docs/device-plugin.md, "Isolation modes"). Pure: the GPUs and the environment in, the
kubelet's ContainerAllocation out.

- `envvar`: `NVIDIA_VISIBLE_DEVICES=<uuids>`; the NVIDIA container runtime (or its
  hook) mounts exactly those GPUs. NVIDIA's own plugin's default; here the fallback for
  runtimes without CDI, since the runtime takes the same variable from any container.
- `device-nodes`: the GPUs' device nodes (`/dev/nvidia<minor>`) and the driver's
  control nodes as DeviceSpecs: the kubelet has the runtime create them and allow them
  in the container's device cgroup, whatever runtime runs it. The driver's user-space
  libraries are not device nodes: they come from the NVIDIA runtime (with `envvar`
  too: NVIDIA's `--pass-device-specs`) or from the image.
- `cdi` (the default): CDI device names `nvidia.com/gpu=<uuid>` (the names
  `nvidia-ctk cdi generate` writes into the node's CDI spec); the runtime applies the
  spec's edits (device nodes, libraries, hooks). Needs a CDI-enabled runtime and the
  kubelet's CDI field.

Modes combine (`envvar` and `device-nodes` is NVIDIA's pass-device-specs setup). Without
`envvar`, `NVIDIA_VISIBLE_DEVICES` is set to `void`: CUDA images set it to `all` in
their environment, and a node whose default runtime is NVIDIA's would otherwise mount
every GPU of the node into the container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from cache.resources import MILLI_PER_GPU
from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import VISIBLE_DEVICES_ENV, GpuState

ENVVAR = "envvar"
DEVICE_NODES = "device-nodes"
CDI = "cdi"
MODES = (ENVVAR, DEVICE_NODES, CDI)
# CDI by default: the runtime hands the container exactly the GPUs named, and a node
# whose runtime ignores NVIDIA_VISIBLE_DEVICES from unprivileged containers (the
# hardened toolkit) still works. Where CDI is missing a container gets no GPU rather than
# one it was not given; envvar is the explicit fallback (docs/decisions.md).
DEFAULT_MODES = (CDI,)

CDI_KIND = "nvidia.com/gpu"
# The driver's control nodes every CUDA process opens besides its GPUs' own (the same
# set NVIDIA's device plugin passes with --pass-device-specs).
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
NO_DEVICES = "void"
MEMORY_LIMIT_ENV = "GANG_SCHEDULER_GPU_MEMORY_LIMIT_MIB"
MPS_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def mode_problems(modes: Iterable[str]) -> list[str]:
    chosen = list(modes)
    found = [
        f"unknown --isolation {m!r} (one of {', '.join(MODES)})" for m in chosen if m not in MODES
    ]
    if not chosen:
        found.append("at least one --isolation mode is needed")
    return found


def share_env(gpus: Sequence[GpuState], milli: int, mps: bool) -> dict[str, str]:
    """The memory contract of a share: `GANG_SCHEDULER_GPU_MEMORY_LIMIT_MIB`, the
    container's part of each of its GPUs' memory (the smallest GPU's when they differ;
    left out when NVML did not report the memory), and with `mps` the CUDA MPS client's
    own limits, which an MPS server enforces: memory per device (indices as the
    container sees them: 0 for its first GPU) and the share of the SMs."""
    memories = [gpu.memory_mib for gpu in gpus if gpu.memory_mib > 0]
    if not memories or len(memories) != len(gpus):
        return {}
    limit = min(memories) * milli // MILLI_PER_GPU
    env = {MEMORY_LIMIT_ENV: str(limit)}
    if mps and milli < MILLI_PER_GPU:
        env[MPS_MEMORY_ENV] = ",".join(f"{i}={limit}M" for i in range(len(gpus)))
        env[MPS_THREADS_ENV] = str(max(1, milli // 10))
    return env


def container_answer(
    env: Mapping[str, str],
    gpus: Sequence[GpuState],
    modes: Iterable[str],
    *,
    milli: int = MILLI_PER_GPU,
    mps: bool = False,
) -> api.ContainerAllocation:
    """The Allocate answer for one container given `gpus` (each at `milli`), with `env`
    (the plugin's variables, NVIDIA_VISIBLE_DEVICES included) adjusted to the modes and
    the share's memory contract added. ValueError when a mode cannot be honoured (a GPU
    whose device node NVML did not report)."""
    chosen = set(modes)
    envs = dict(env) | share_env(gpus, milli, mps)
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
