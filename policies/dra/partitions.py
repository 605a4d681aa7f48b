"""Which partition first: among the devices that fit a request and draw on counter sets
(partitionable devices, KEP-4815), the one that leaves the largest useful remainder.

kube-scheduler 1.36 takes the first that fits in listing order. Here, before the search
walks a request's devices, those that consume counters are reordered (the others keep
their places): each is judged by the largest partition of its pool that could still be
allocated once it is taken (a partition's size: the sum of what it draws), largest
first, listing order among equals. That packs partitions onto GPUs already cut (an
untouched GPU keeps its whole-GPU partition allocatable: it stays whole) and, within a
GPU whose counters are positional (MIG-like memory slices), picks the slice that keeps
the larger neighbour free. Later alternatives still try every device, so the gang
search loses nothing; only the first choice changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

from cache.dra.slices import Device, DeviceId, PoolId
from cache.dra.store import Candidate
from cache.dra.usage import Counters, draw, overdrawn
from cache.dra.view import DeviceView

# Candidates judged per request, and devices looked at over all their judgements:
# beyond either the listing order is kept (a pool may hold thousands of partitions
# over many slices; judging must not cost more than the search it orders).
MAX_JUDGED = 64
MAX_LOOKS = 20_000


class _OverBudget(Exception):
    pass


def _size(device: Device) -> Fraction:
    amounts = (amount for c in device.consumes_counters for amount in c.counters.values())
    return sum(amounts, Fraction(0))


def by_remainder(
    fitting: Sequence[Candidate], cache: DeviceView, in_use: Iterable[DeviceId]
) -> list[Candidate]:
    """`fitting` with its counter-consuming devices reordered, largest useful remainder
    first. `in_use`: devices taken beyond the cache's (earlier gang members')."""
    drawing = [i for i, c in enumerate(fitting) if c.device.consumes_counters]
    if len(drawing) < 2 or len(drawing) > MAX_JUDGED:
        return list(fitting)
    taken = set(in_use)
    budget = [MAX_LOOKS]
    try:
        scores = {i: _remainder(fitting[i], cache, taken, budget) for i in drawing}
    except _OverBudget:
        return list(fitting)
    ordered = sorted(drawing, key=lambda i: (-scores[i], i))
    result = list(fitting)
    for slot, index in zip(drawing, ordered, strict=True):
        result[slot] = fitting[index]
    return result


def _remainder(
    candidate: Candidate, cache: DeviceView, taken: set[DeviceId], budget: list[int]
) -> Fraction:
    """The size of the largest partition of the candidate's pool still allocatable once
    the candidate is taken (-1 when none is)."""
    pool_id = PoolId(candidate.device_id.driver, candidate.device_id.pool)
    pool = cache.pool(pool_id)
    if pool is None:
        return Fraction(-1)
    drawn, counted = cache.counters_drawn(pool_id)
    total: Counters = {name: dict(c) for name, c in drawn.items()}
    busy = set(counted)
    for device_id in taken:
        if (device_id.driver, device_id.pool) == pool_id and device_id.device not in counted:
            device = pool.device(device_id.device)
            if device is not None:
                draw(total, device)
                busy.add(device.name)
    if candidate.device.name not in busy:
        draw(total, candidate.device)
        busy.add(candidate.device.name)
    best = Fraction(-1)
    for piece in pool.slices:
        budget[0] -= len(piece.devices)
        if budget[0] < 0:
            raise _OverBudget
        for other in piece.devices:
            if other.name in busy or other.refusal or not other.consumes_counters:
                continue
            size = _size(other)
            if size <= best:
                continue
            draw(total, other)
            if not overdrawn(pool.counters, total):
                best = size
            draw(total, other, -1)
    return best
