"""Resource pools assembled from their slices, with the allocator's rules
(k8s.io/dynamic-resource-allocation/structured, GatherPools):

- only the newest generation of a pool counts; slices of older generations are ignored
  (a driver replacing its pool publishes the new generation before deleting the old);
- a pool is complete when all `resourceSliceCount` slices of that generation are seen;
  an incomplete pool's devices are not allocatable (and "All" requests cannot be
  satisfied while any pool the node reaches is incomplete);
- a pool whose slices disagree, repeat a device name or could not be read is invalid:
  none of its devices is allocatable or counted.

One difference, on the safe side: kube-scheduler judges a pool by the slices relevant
to the node at hand and may still use an older generation that is complete for that
node while a newer one appears elsewhere; this model always judges the whole pool by
its newest generation, so devices of a generation being replaced are never allocated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cache.dra.slices import PoolId, Slice


@dataclass(frozen=True, slots=True)
class Pool:
    pool_id: PoolId
    generation: int
    expected: int  # resourceSliceCount of the newest generation
    slices: tuple[Slice, ...]  # of the newest generation, by name
    problem: str = ""  # why the pool is invalid ("" when it is not)

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
    return Pool(pool_id, generation, max(counts), tuple(newest), problem)
