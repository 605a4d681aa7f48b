"""What the time-based replay measures of required topology (issue 30).

- `stranded_gangs`: at one instant, the waiting gangs that require one domain of a level
  while the cluster has enough free GPUs in total for them but no single domain of that
  level has: the gangs a domain choice that kept large domains whole might have started.
  Free is counted as each gang asks: whole free devices for a gang of whole GPUs, free
  GPU milli for one of shares. Resources other than GPUs are not counted.
- `domain_of`: the domain a placed gang occupies at its required level, or the error of
  a gang that spans several (which the core must never do).

Pure functions over the cache's nodes; the replay samples them (scheduler/sim/timeline.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cache.node import NodeInfo
from cache.resources import MILLI_PER_GPU
from scheduler.planner.required_domain import DomainChoice
from scheduler.sim.workload import Task

# The planner's choices among the domains of a required level
# (scheduler/planner/required_domain.py), by the name `--domain-choice` takes.
DOMAIN_CHOICES: dict[str, DomainChoice] = {
    "smallest": "smallest",
    "learnt": "learnt",
    "best-fit": "best-fit",
    "first-fit": "first-fit",
}


@dataclass(frozen=True, slots=True)
class FreeGpus:
    """Free GPUs of one domain (or of the whole cluster): whole devices, and milli."""

    whole: int = 0
    milli: int = 0

    def holds(self, task: Task) -> bool:
        """Whether this much free room could hold the task's GPUs, as it asks them."""
        whole = sum(role.replicas * role.gpus for role in task.roles)
        shares = sum(role.replicas * role.gpu_milli for role in task.roles)
        return whole <= self.whole and shares <= self.milli - whole * MILLI_PER_GPU


def free_gpus(nodes: Iterable[NodeInfo]) -> FreeGpus:
    whole = milli = 0
    for node in nodes:
        for free in node.gpu_free:
            milli += max(0, free)
            whole += free >= MILLI_PER_GPU
    return FreeGpus(whole, milli)


def free_by_domain(nodes: Iterable[NodeInfo], key: str) -> dict[str, FreeGpus]:
    """Free GPUs per value of the node label `key` (nodes without it are in none)."""
    members: dict[str, list[NodeInfo]] = {}
    for node in nodes:
        value = node.labels.get(key)
        if value is not None:
            members.setdefault(value, []).append(node)
    return {value: free_gpus(group) for value, group in members.items()}


def stranded_gangs(waiting: Iterable[Task], nodes: Iterable[NodeInfo]) -> int:
    """Waiting gangs with a required level that the cluster's free GPUs in total could
    hold but no single domain of that level's could."""
    required = [t for t in waiting if t.topology is not None and t.topology.required_key]
    if not required:
        return 0
    listed = list(nodes)
    total = free_gpus(listed)
    domains: dict[str, dict[str, FreeGpus]] = {}
    count = 0
    for task in required:
        key = task.topology.required_key if task.topology else None
        if key is None or not total.holds(task):
            continue
        per_domain = domains.get(key)
        if per_domain is None:
            per_domain = domains[key] = free_by_domain(listed, key)
        if not any(room.holds(task) for room in per_domain.values()):
            count += 1
    return count


def domain_of(
    key: str, nodes: Iterable[str], labels_of: Mapping[str, Mapping[str, str]]
) -> tuple[str | None, str | None]:
    """(the one domain of `key` the nodes are in, None) or (None, why not): a node
    without the label, or nodes in several domains."""
    seen: set[str] = set()
    for name in nodes:
        value = labels_of.get(name, {}).get(key)
        if value is None:
            return None, f"node {name} has no label {key}"
        seen.add(value)
    if len(seen) > 1:
        return None, f"its members are in {len(seen)} domains of {key}: {', '.join(sorted(seen))}"
    return (next(iter(seen)) if seen else None), None
