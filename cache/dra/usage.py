"""How much of a device, and of its pool's counter sets, allocations use.

Consumable capacity (KEP-5075): a result with a shareID is one share of a device that
allows multiple allocations; its consumedCapacity counts against the device's
capacity. A result without a shareID takes its device whole. Partitionable devices
(KEP-4815): a device in use (whole or by any share) draws its consumesCounters from its
pool's counter sets once, as kube-scheduler's checkAvailableCounters counts allocated
devices. Pure functions over records; the store and the allocator both use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from cache.dra.claims import Allocation
from cache.dra.fields import format_quantity
from cache.dra.slices import Device, DeviceId

Counters = dict[str, dict[str, Fraction]]  # counter set -> counter -> amount


@dataclass(slots=True)
class DeviceUse:
    """What allocations take of one device: whole, and the sum of their shares."""

    whole: bool = False
    shares: int = 0
    consumed: dict[str, Fraction] = field(default_factory=dict)

    def add(self, other: DeviceUse) -> None:
        self.whole = self.whole or other.whole
        self.shares += other.shares
        for name, amount in other.consumed.items():
            self.consumed[name] = self.consumed.get(name, Fraction(0)) + amount

    @property
    def in_use(self) -> bool:
        return self.whole or self.shares > 0


def device_use(allocations: Iterable[Allocation], device: DeviceId) -> DeviceUse:
    """What `allocations` take of `device` (admin-access results take nothing)."""
    use = DeviceUse()
    for allocation in allocations:
        for result in allocation.results:
            if result.admin_access or result.device_id != device:
                continue
            if not result.share_id:
                use.whole = True
                continue
            use.shares += 1
            for name, amount in result.consumed:
                use.consumed[name] = use.consumed.get(name, Fraction(0)) + amount
    return use


def capacity_overrun(
    device: Device, used: Mapping[str, Fraction], adding: Mapping[str, Fraction]
) -> str:
    """Why `used` plus `adding` exceeds a capacity of the device ("" when it fits)."""
    for name, value in device.written_capacity.items():
        total = used.get(name, Fraction(0)) + adding.get(name, Fraction(0))
        if total > value:
            return (
                f"capacity {name} of device {device.name}: {format_quantity(total)} would be "
                f"consumed, more than its {format_quantity(value)}"
            )
    return ""


def draw(counters: Counters, device: Device, sign: int = 1) -> None:
    """Add (sign 1) or remove (-1) the device's consumesCounters to `counters`."""
    for consumption in device.consumes_counters:
        into = counters.setdefault(consumption.name, {})
        for name, amount in consumption.counters.items():
            into[name] = into.get(name, Fraction(0)) + sign * amount


def overdrawn(held: Mapping[str, Mapping[str, Fraction]], drawn: Counters) -> str:
    """The first counter drawn beyond what its set holds ("" when none is)."""
    for set_name, counters in drawn.items():
        available = held.get(set_name, {})
        for name, amount in counters.items():
            if amount > available.get(name, Fraction(0)):
                return (
                    f"counter {name} of counter set {set_name}: {format_quantity(amount)} drawn, "
                    f"the set holds {format_quantity(available.get(name, Fraction(0)))}"
                )
    return ""
