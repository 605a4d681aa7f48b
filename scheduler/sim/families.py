"""Generated openb traces: one bundled trace resampled so that one class of pods carries
a chosen part of the demand (more CPU-only work, more shared GPUs, more multi-GPU pods,
more model-pinned pods).

The four bundled traces are one trace of each family; a policy tuned on them may still
lose on a sibling (issue 14: on traces richer in multi-GPU pods). A family member is
made as the FGD paper's authors made theirs, by drawing pods of the base trace with
replacement, here with a fixed seed of its own (the replay's seed still orders
arrivals):

- `cpuNN`: CPU-only pods ask NN% of all the CPU the pods ask (default trace: 22.5%);
  every pod is drawn again, CPU-only from the CPU-only pods, GPU pods from the GPU pods.
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
    "cpu": Family("default", lambda pod: pod.num_gpu == 0, lambda pod: True, lambda p: p.cpu_milli),
    "gpushare": Family(
        "default", lambda pod: pod.num_gpu == 1 and pod.gpu_milli < 1000, _gpu, requested_gpu_milli
    ),
    "multigpu": Family("default", lambda pod: pod.num_gpu >= 2, _gpu, requested_gpu_milli),
    "gpuspec": Family("gpuspec33", lambda pod: pod.gpu_spec is not None, _gpu, _one),
}

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
    kept = [pod for pod in base_pods if not family.involved(pod)]
    involved = [pod for pod in base_pods if family.involved(pod)]
    in_class = [pod for pod in involved if family.in_class(pod)]
    rest = [pod for pod in involved if not family.in_class(pod)]
    total = sum(family.measure(pod) for pod in involved)
    rng = random.Random(f"{name}/{seed}")
    wanted = total * percent // 100
    drawn = _draw(in_class, wanted, family.measure, rng)
    drawn += _draw(rest, total - wanted, family.measure, rng)
    pods = kept + drawn
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
