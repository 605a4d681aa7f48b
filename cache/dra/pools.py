"""Resource pools assembled from their slices, with the allocator's rules
(k8s.io/dynamic-resource-allocation/structured, GatherPools):

- only the newest generation of a pool counts; slices of older generations are ignored
  (a driver replacing its pool publishes the new generation before deleting the old);
- a pool is complete when all `resourceSliceCount` slices of that generation are seen;
  an incomplete pool's devices are not allocatable (and "All" requests cannot be
  satisfied while any pool the node reaches is incomplete);
- a pool whose slices disagree, repeat a device name or could not be read is invalid:
  none of its devices is allocatable or counted;
- partitionable devices: the pool's counter sets are its slices' sharedCounters; a set
  named twice, or a device consuming a set or counter that is not there, makes the pool
  invalid (validateDeviceCounterConsumption); a device drawing more from a set than the
  set holds gets a refusal (it could never fit; kube-scheduler just never picks it).

One difference, on the safe side: kube-scheduler judges a pool by the slices relevant
to the node at hand and may still use an older generation that is complete for that
node while a newer one appears elsewhere; this model always judges the whole pool by
its newest generation, so devices of a generation being replaced are never allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from cache.dra.fields import format_quantity
from cache.dra.slices import Device, PoolId, Slice


@dataclass(frozen=True, slots=True)
class Pool:
    pool_id: PoolId
    generation: int
    expected: int  # resourceSliceCount of the newest generation
    slices: tuple[Slice, ...]  # of the newest generation, by name
    problem: str = ""  # why the pool is invalid ("" when it is not)
    # sharedCounters of its slices: set name -> counter -> amount the set holds.
    counters: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)
    by_name: Mapping[str, Device] = field(default_factory=dict, compare=False, repr=False)

    def device(self, name: str) -> Device | None:
        return self.by_name.get(name)

    @property
    def complete(self) -> bool:
        return len(self.slices) == self.expected

    @property
    def usable(self) -> bool:
        return self.complete and not self.problem

    def why_unusable(self) -> str:
        """Why none of the pool's devices is allocatable ("" when they are)."""
        if self.problem:
            return f"pool {self.pool_id} is invalid: {self.problem}"
        if not self.complete:
            return (
                f"pool {self.pool_id} is incomplete: {len(self.slices)} of {self.expected} "
                f"slices of generation {self.generation} seen"
            )
        return ""


def assemble(pool_id: PoolId, slices: Iterable[Slice]) -> Pool | None:
    """The pool from all slices that name it (any generation); None when none does."""
    newest: list[Slice] = []
    generation = -1
    for piece in slices:
        if piece.generation > generation:
            generation, newest = piece.generation, [piece]
        elif piece.generation == generation:
            newest.append(piece)
    if not newest:
        return None
    newest.sort(key=lambda piece: piece.name)
    counts = {piece.slice_count for piece in newest}
    problem = ""
    problems = [p for piece in newest for p in piece.problems]
    if problems:
        problem = problems[0]
    elif len(counts) != 1:
        problem = f"its slices disagree on resourceSliceCount ({sorted(counts)})"
    elif len(newest) > max(counts):
        problem = (
            f"{len(newest)} slices of generation {generation}, resourceSliceCount {max(counts)}"
        )
    else:
        seen: set[str] = set()
        for piece in newest:
            for device in piece.devices:
                if device.name in seen:
                    problem = f"duplicate device name {device.name!r}"
                    break
                seen.add(device.name)
            if problem:
                break
    counters: dict[str, Mapping[str, Fraction]] = {}
    if not problem:
        problem, counters = _counter_sets(newest)
    if not problem and counters:
        newest = [_judge_consumption(piece, counters) for piece in newest]
    by_name = {} if problem else {d.name: d for piece in newest for d in piece.devices}
    return Pool(pool_id, generation, max(counts), tuple(newest), problem, counters, by_name)


def _counter_sets(slices: Iterable[Slice]) -> tuple[str, dict[str, Mapping[str, Fraction]]]:
    """The pool's counter sets, and why the pool is invalid ("" when it is not), as the
    allocator's getAndValidateCounterSets and validateDeviceCounterConsumption judge
    it: a set named twice, or a device consuming a set or a counter that is not there."""
    counters: dict[str, Mapping[str, Fraction]] = {}
    pieces = list(slices)
    for piece in pieces:
        for counter_set in piece.counter_sets:
            if counter_set.name in counters:
                return f"duplicate counter set name {counter_set.name}", {}
            counters[counter_set.name] = counter_set.counters
    for piece in pieces:
        for device in piece.devices:
            for consumption in device.consumes_counters:
                held = counters.get(consumption.name)
                if held is None:
                    return (
                        f"device {device.name}: consumesCounters names counter set "
                        f"{consumption.name}, which no slice of the pool has (counter set "
                        f"{consumption.name} not found)"
                    ), {}
                for counter in consumption.counters:
                    if counter not in held:
                        return (
                            f"device {device.name}: consumesCounters names counter {counter}, "
                            f"which counter set {consumption.name} does not have"
                        ), {}
    return "", counters


def _judge_consumption(piece: Slice, counters: Mapping[str, Mapping[str, Fraction]]) -> Slice:
    """The slice with a refusal on each device that draws more from a counter set than
    the set holds: it could never be allocated, and the reason says why."""
    judged: list[Device] = []
    changed = False
    for device in piece.devices:
        excess = [
            f"consumesCounters[{c.name}].counters[{name}] is {format_quantity(amount)}, more "
            f"than counter set {c.name} holds ({format_quantity(counters[c.name][name])})"
            for c in device.consumes_counters
            for name, amount in c.counters.items()
            if amount > counters[c.name][name]
        ]
        if excess and not device.refusal:
            device = replace(device, refusal="; ".join(excess), memo={})
            changed = True
        judged.append(device)
    return replace(piece, devices=tuple(judged)) if changed else piece
