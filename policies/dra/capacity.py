"""Consumable capacity (KEP-5075): what one allocation of a device consumes for a request,
under each capacity's requestPolicy, as kube-scheduler 1.36's allocator computes it
(structured/internal/incubating/consumable_capacity.go):

- a capacity the request does not name consumes the policy's default, else the whole
  capacity value;
- a named one, with no policy, consumes what is asked; with validRange, what is asked
  rounded up: to `min` when below it, else to `min + k*step` (in whole units: the real
  code rounds with Quantity.Value(), which rounds up to an integer); with validValues,
  the first value not below what is asked;
- the result then must not violate the policy: above validRange's max, off its step,
  or not one of validValues (unless it is the default);
- a request naming a capacity the device does not have cannot use the device.

Whether the total fits the device (with the shares others hold) is usage.py's
`capacity_overrun`. `consumption` returns the consumed amounts, or why the request
cannot use the device, naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from cache.dra.fields import RequestPolicy, format_quantity
from cache.dra.slices import Device

Consumed = tuple[tuple[str, Fraction], ...]


def consumption(device: Device, requests: Mapping[str, Fraction], what: str) -> Consumed | str:
    """What one allocation of `device` consumes for a request with capacity `requests`
    (keyed as written), or why the request cannot use it. `what`: the request's field
    path, for the reason ("spec.devices.requests[gpu].exactly.capacity")."""
    for name in requests:
        if name not in device.written_capacity:
            return (
                f"{what}.requests[{name}]: device {device.name} has no capacity {name} "
                "(some requested capacity has not been defined)"
            )
    found: list[tuple[str, Fraction]] = []
    for name, value in device.written_capacity.items():
        policy = device.policies.get(name)
        asked = requests.get(name)
        amount = _consumed(asked, value, policy)
        violation = _violation(amount, policy) if policy is not None else ""
        if violation:
            return (
                f"{what}.requests[{name}] {format_quantity(amount)} is outside the requestPolicy "
                f"of device {device.name}: {violation}"
            )
        if amount > value:
            return (
                f"{what}.requests[{name}] {format_quantity(amount)} is more than device "
                f"{device.name} has ({format_quantity(value)})"
            )
        found.append((name, amount))
    return tuple(found)


def _consumed(asked: Fraction | None, value: Fraction, policy: RequestPolicy | None) -> Fraction:
    """calculateConsumedCapacity."""
    if asked is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return value
    if policy is None:
        return asked
    if policy.minimum is not None:
        return _round_up_range(asked, policy)
    if policy.valid_values:
        return next((v for v in policy.valid_values if asked <= v), asked)
    return asked


def _round_up_range(asked: Fraction, policy: RequestPolicy) -> Fraction:
    """roundUpRange: below min gives min; with a step, min plus whole steps, computed on
    the integer values (Quantity.Value() rounds up) as the real code does."""
    low = policy.minimum
    assert low is not None
    if asked < low:
        return low
    if policy.step is None:
        return asked
    step, start, wanted = math.ceil(policy.step), math.ceil(low), math.ceil(asked)
    steps = -((start - wanted) // step)  # ceil((wanted - start) / step)
    return Fraction(start + step * steps)


def _violation(amount: Fraction, policy: RequestPolicy) -> str:
    """violatesPolicy: "" when `amount` is allowed."""
    if policy.default is not None and amount == policy.default:
        return ""
    if policy.minimum is not None:
        if policy.maximum is not None and amount > policy.maximum:
            return f"validRange max is {format_quantity(policy.maximum)}"
        if policy.step is not None:
            step, start = math.ceil(policy.step), math.ceil(policy.minimum)
            if (math.ceil(amount) - start) % step:
                return (
                    f"not a multiple of validRange step {format_quantity(policy.step)} "
                    f"from min {format_quantity(policy.minimum)}"
                )
        return ""
    if policy.valid_values and amount not in policy.valid_values:
        shown = ", ".join(format_quantity(v) for v in policy.valid_values)
        return f"validValues are {shown}"
    return ""
