"""Whether a device matches a list of CEL selectors: the one module that talks to the CEL
engine (policies/dra/cel/), so that the allocator never sees its types.

Each device's CEL environment (`DeviceEnv`) is built once and kept on the device record
(its `memo`, replaced with the record when its slice changes): 5,000 nodes of 8 devices
are matched each cycle. Each distinct selector text is compiled once. The result of a
list of selectors on a device is kept on the device too, up to MAX_RESULTS_PER_DEVICE
lists (a tenant writing ever new selectors cannot grow it further).

A selector that does not compile, or fails or runs out of cost on a device, is an error
of its class or claim (kube-scheduler aborts the allocation the same way): it raises
`SelectorError` with who wrote it and the engine's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from cache.dra.fields import split_qualified
from cache.dra.slices import Device
from policies.dra.cel.env import (
    AttributeValue,
    DeviceEnv,
    parse_semver,
)
from policies.dra.cel.selector import (
    CelError,
    CompiledSelector,
    compile_selector,
)

# Selector lists whose result is remembered per device.
MAX_RESULTS_PER_DEVICE = 256
# Compiled selectors remembered (by text); beyond this the memory starts over.
MAX_COMPILED = 4096
_ENV = "cel-env"
_NO_ENV = "cel-env-refused"


class SelectorError(Exception):
    """A selector that cannot be evaluated: the claim (or class) cannot be allocated."""


def device_env(driver: str, device: Device) -> DeviceEnv | None:
    """The device as selectors see it, built once per device record; None when one of
    its version attributes is not a semantic version the CEL engine accepts (such a
    device matches no selector, as kube-scheduler cannot evaluate one on it either)."""
    memo = device.memo
    env = memo.get(_ENV)
    if env is not None or _NO_ENV in memo:
        return env if isinstance(env, DeviceEnv) else None
    attributes: dict[str, dict[str, AttributeValue]] = {}
    capacity: dict[str, dict[str, Fraction]] = {}
    try:
        for name, attribute in device.attributes.items():
            domain, ident = split_qualified(name)
            value: AttributeValue = attribute.value
            if attribute.kind == "version":
                value = parse_semver(str(attribute.value))
            attributes.setdefault(domain, {})[ident] = value
    except ValueError as error:
        memo[_NO_ENV] = str(error)
        return None
    for name, amount in device.capacity.items():
        domain, ident = split_qualified(name)
        capacity.setdefault(domain, {})[ident] = amount
    built = DeviceEnv(driver, attributes, capacity, device.allow_multiple_allocations)
    memo[_ENV] = built
    return built


class Selectors:
    """Compiled selectors, shared by every allocation of a scheduler."""

    __slots__ = ("_compiled",)

    def __init__(self) -> None:
        self._compiled: dict[str, CompiledSelector | str] = {}

    def compile(self, text: str, who: str) -> CompiledSelector:
        found = self._compiled.get(text)
        if found is None:
            try:
                found = compile_selector(text)
            except CelError as error:
                found = f"CEL compile error: {error}"
            if len(self._compiled) >= MAX_COMPILED:
                self._compiled.clear()
            self._compiled[text] = found
        if isinstance(found, str):
            raise SelectorError(f"{who}: {found}")
        return found

    def match(self, selectors: Sequence[str], who: str, driver: str, device: Device) -> bool:
        """All of `selectors` (written by `who`, e.g. "class gpu") match the device."""
        if not selectors:
            return True
        key = ("selectors", tuple(selectors))
        memo = device.memo
        known = memo.get(key)
        if known is not None:
            return bool(known)
        env = device_env(driver, device)
        result = env is not None and self._evaluate(selectors, who, env)
        if len(memo) < MAX_RESULTS_PER_DEVICE:
            memo[key] = result
        return result

    def _evaluate(self, selectors: Sequence[str], who: str, env: DeviceEnv) -> bool:
        for index, text in enumerate(selectors):
            compiled = self.compile(text, f"{who}: selector #{index}")
            try:
                if not compiled.matches(env):
                    return False
            except CelError as error:
                raise SelectorError(
                    f"{who}: selector #{index}: CEL runtime error: {error}"
                ) from None
        return True
