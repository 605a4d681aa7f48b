"""Resource names and the integer units this project counts them in.

A `Resources` mapping holds CPU in milli-cores and every other resource in whole
units (memory and ephemeral-storage in bytes, pods and extended resources as counts).
Integers keep accounting exact: assume then forget restores the very same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cache.limits import shown
from cache.quantity import QuantityError, to_milli, to_units

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
WHOLE_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/vgpu"
MILLI_PER_GPU = 1000

# GPU resources are accounted per device (cache.gpu), not as node-level scalars.
GPU_RESOURCES = frozenset({WHOLE_GPU, SHARED_GPU})

Resources = dict[str, int]


def shares_in_milli(resources: Resources, share_milli: int) -> Resources:
    """`resources` with `nvidia.com/vgpu` counted in milli of a GPU, where one unit of it
    is worth `share_milli` milli: 1 when a GPU is advertised as 1000 units (the
    default), 10 when as 100 (a device plugin with a coarser unit). In place."""
    if share_milli != 1 and SHARED_GPU in resources:
        resources[SHARED_GPU] *= share_milli
    return resources


def parse_resource_list(raw: Mapping[str, object] | None) -> Resources:
    """A Kubernetes ResourceList (`{"cpu": "500m", "memory": "1Gi"}`) in integer units.

    Raises QuantityError (a ValueError) naming the resource when a value is malformed
    or negative (the API server refuses negative requests, limits and capacities; one
    that reached us anyway would give capacity back, or a device a negative share).
    """
    result: Resources = {}
    for name, value in (raw or {}).items():
        try:
            amount = to_milli(value) if name == CPU else to_units(value)
        except ValueError as error:
            raise ValueError(f"resource {name}: {error}") from None
        if amount < 0:
            raise QuantityError(f"resource {name}: {shown(value)} must not be negative")
        result[name] = amount
    return result


def add(total: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        total[name] = total.get(name, 0) + amount


def subtract(total: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        left = total.get(name, 0) - amount
        if left:
            total[name] = left
        else:
            total.pop(name, None)


def maximum(first: Mapping[str, int], second: Mapping[str, int]) -> Resources:
    result = dict(first)
    for name, amount in second.items():
        if amount > result.get(name, 0):
            result[name] = amount
    return result


def total_of(items: Iterable[Mapping[str, int]]) -> Resources:
    result: Resources = {}
    for item in items:
        add(result, item)
    return result


def format_amount(name: str, amount: int) -> str:
    """A human form of an integer amount, in the units Kubernetes users read."""
    if name == CPU:
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    if name in (MEMORY, EPHEMERAL_STORAGE):
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size and amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)
