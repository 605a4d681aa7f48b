"""Generated openb traces: one bundled trace resampled so that one class of pods carries
a chosen part of the demand (more CPU-only work, more shared GPUs, more multi-GPU pods,
more model-pinned pods).

The four bundled traces are one trace of each family; a policy tuned on them may still
lose on a sibling (issue 14: on traces richer in multi-GPU pods). A family member is
made as the FGD paper's authors made theirs, by drawing pods of the base trace with
replacement, here with a fixed seed of its own (the replay's seed still orders
arrivals):

- `cpuNN`: CPU-only pods are NN% of the pods (default trace: 13.3%). Every GPU pod of
  the base is kept as it is and CPU-only pods are drawn from the base's CPU-only pods,
  as the paper's `openb_pod_list_cpu050` .. `cpu250` were made (their GPU pods are the
  default trace's, shape for shape; cpu050 = 5.0% of the pods CPU-only). So a member has
  the base's GPU demand and more (or less) CPU-only work on top: the node CPU the GPU
  pods need runs out sooner. (Before issue 32, `cpuNN` held the total CPU fixed and
  drew fewer GPU pods, so the protocol's clones, drawn from all originals, brought CPU
  far past the cluster's; a picture no real trace of the family shows.)
- `gpushareNN`: pods sharing one GPU (under 1000 milli) ask NN% of the GPU milli;
- `multigpuNN`: pods of 2 or more GPUs ask NN% of the GPU milli;
- `gpuspecNN`: NN% of the GPU pods are pinned to GPU models (base: gpuspec33, the
  only bundled trace with pinned pods, so the pinned shapes are real ones).
For the GPU families the CPU-only pods of the base are kept as they are and only its
GPU pods are drawn again. Each class is drawn until it reaches its part of the base's
total (CPU milli, GPU milli or GPU pod count), so a member has about as much demand as
its base, and the protocol's clones then fill the load as usual.

Pure: text in, text out; nothing here reads or writes a file.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.sim.openb import OpenbPod, load_pods, requested_gpu_milli

# The trace seed of every generated member: a family member is one fixed trace, like the
# bundled ones; the replay's --seed orders its arrivals.
TRACE_SEED = 14

_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"


@dataclass(frozen=True, slots=True)
class Family:
    """How the members of one family are drawn."""

    base: str  # the bundled trace it is drawn from
    # The pods the family is about; `involved` are the pods drawn again (the others kept).
    in_class: Callable[[OpenbPod], bool]
    involved: Callable[[OpenbPod], bool]
    # What the class's part is measured in.
    measure: Callable[[OpenbPod], int]


def _gpu(pod: OpenbPod) -> bool:
    return pod.num_gpu > 0


def _one(pod: OpenbPod) -> int:
    return 1


FAMILIES: dict[str, Family] = {
    # cpu: drawn by `_cpu_member` (a part of the pod count, GPU pods all kept).
    "cpu": Family("default", lambda pod: pod.num_gpu == 0, lambda pod: pod.num_gpu == 0, _one),
    "gpushare": Family(
        "default", lambda pod: pod.num_gpu == 1 and pod.gpu_milli < 1000, _gpu, requested_gpu_milli
    ),
    "multigpu": Family("default", lambda pod: pod.num_gpu >= 2, _gpu, requested_gpu_milli),
    "gpuspec": Family("gpuspec33", lambda pod: pod.gpu_spec is not None, _gpu, _one),
}


def _cpu_member(
    name: str, percent: int, base_pods: Sequence[OpenbPod], seed: int
) -> list[OpenbPod]:
    """The base's GPU pods, then CPU-only pods drawn from the base's CPU-only pods until
    they are `percent`% of all the pods (the last draw rounds up)."""
    gpu_pods = [pod for pod in base_pods if pod.num_gpu > 0]
    cpu_only = [pod for pod in base_pods if pod.num_gpu == 0]
    if not cpu_only:
        return gpu_pods
    # n / (n + G) >= percent / 100  <=>  n >= G x percent / (100 - percent)
    wanted = -(-len(gpu_pods) * percent // (100 - percent))
    rng = random.Random(f"{name}/{seed}")
    return gpu_pods + [rng.choice(cpu_only) for _ in range(wanted)]


_NAME = re.compile(r"^(cpu|gpushare|multigpu|gpuspec)(\d{1,2})$")


class UnknownFamily(ValueError):
    """A generated trace name that no family reads."""


def parse_member(name: str) -> tuple[str, int]:
    """("multigpu", 30) for "multigpu30"; the percent is 1..99."""
    match = _NAME.match(name)
    if match is None or not 0 < int(match.group(2)) < 100:
        raise UnknownFamily(
            f"generated trace {name!r}: expected cpuNN, gpushareNN, multigpuNN or gpuspecNN "
            "with NN in 1..99"
        )
    return match.group(1), int(match.group(2))


def _draw(
    pool: Sequence[OpenbPod], target: int, measure: Callable[[OpenbPod], int], rng: random.Random
) -> list[OpenbPod]:
    """Pods drawn from `pool` with replacement until their measure reaches `target`."""
    drawn: list[OpenbPod] = []
    total = 0
    if not pool or not any(measure(pod) > 0 for pod in pool):
        return drawn
    while total < target:
        pod = rng.choice(pool)
        drawn.append(pod)
        total += measure(pod)
    return drawn


def generate(name: str, base_pods: Sequence[OpenbPod], seed: int = TRACE_SEED) -> list[OpenbPod]:
    """The pods of member `name` (e.g. "multigpu30") drawn from `base_pods`, the pods of
    its family's base trace (`FAMILIES[family].base`). Names are renumbered
    `gen-<name>-<n>` in draw order."""
    family_name, percent = parse_member(name)
    family = FAMILIES[family_name]
    if family_name == "cpu":
        return _renamed(name, _cpu_member(name, percent, base_pods, seed))
    kept = [pod for pod in base_pods if not family.involved(pod)]
    involved = [pod for pod in base_pods if family.involved(pod)]
    in_class = [pod for pod in involved if family.in_class(pod)]
    rest = [pod for pod in involved if not family.in_class(pod)]
    total = sum(family.measure(pod) for pod in involved)
    rng = random.Random(f"{name}/{seed}")
    wanted = total * percent // 100
    drawn = _draw(in_class, wanted, family.measure, rng)
    drawn += _draw(rest, total - wanted, family.measure, rng)
    return _renamed(name, kept + drawn)


def _renamed(name: str, pods: Sequence[OpenbPod]) -> list[OpenbPod]:
    return [
        OpenbPod(
            f"gen-{name}-{index:05d}",
            pod.cpu_milli,
            pod.memory_mib,
            pod.num_gpu,
            pod.gpu_milli,
            pod.gpu_spec,
        )
        for index, pod in enumerate(pods)
    ]


def to_csv(pods: Sequence[OpenbPod]) -> str:
    """The openb pod-list format `load_pods` reads (first six columns)."""
    lines = [_HEADER]
    for pod in pods:
        spec = "|".join(sorted(pod.gpu_spec)) if pod.gpu_spec else ""
        lines.append(
            f"{pod.name},{pod.cpu_milli},{pod.memory_mib},{pod.num_gpu},{pod.gpu_milli},{spec}"
        )
    return "\n".join(lines) + "\n"


def generate_csv(name: str, base_text: str, seed: int = TRACE_SEED) -> str:
    """`generate` from the base trace's CSV text to the member's CSV text."""
    return to_csv(generate(name, load_pods(base_text), seed))
