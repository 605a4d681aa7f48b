"""A stand-in for the CEL engine of policies/dra/cel/ (branch dra-cel), with exactly the
interface policies/dra/selection.py codes against, installed by `install()` only where
the real engine is absent. It evaluates the part of CEL that is also Python
(`device.attributes["gpu.example.com"].model == "a100"`, `&&`, `||`, true, false):
enough for the allocator's tests, which are about allocation, not CEL."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any


class CelError(Exception):
    pass


class CelCompileError(CelError):
    pass


class CelEvaluationError(CelError):
    pass


class CelCostExceeded(CelError):
    pass


@dataclass(frozen=True)
class Semver:
    text: str


def parse_semver(text: str) -> Semver:
    if text.count(".") < 2:
        raise ValueError("no Major.Minor.Patch elements found")
    return Semver(text)


AttributeValue = int | bool | str | Semver


@dataclass(frozen=True)
class DeviceEnv:
    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Fraction]]
    allow_multiple_allocations: bool = False


class _Fields:
    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._values:
            raise CelEvaluationError(f"no such key: {name}")
        return self._values[name]


class _Domains:
    def __init__(self, domains: Mapping[str, Mapping[str, Any]]) -> None:
        self._domains = domains

    def __getitem__(self, domain: str) -> _Fields:
        return _Fields(self._domains.get(domain, {}))


class _Device:
    def __init__(self, env: DeviceEnv) -> None:
        self.driver = env.driver
        self.attributes = _Domains(env.attributes)
        self.capacity = _Domains(env.capacity)
        self.allowMultipleAllocations = env.allow_multiple_allocations


class CompiledSelector:
    def __init__(self, text: str) -> None:
        python = text.replace("&&", " and ").replace("||", " or ").replace("!=", "\0")
        python = python.replace("!", " not ").replace("\0", "!=")
        try:
            self._code = compile(python, "<cel>", "eval")
        except SyntaxError as error:
            raise CelCompileError(str(error)) from None

    def matches(self, env: DeviceEnv) -> bool:
        scope = {"device": _Device(env), "true": True, "false": False}
        try:
            result = eval(self._code, {"__builtins__": {}}, scope)
        except CelError:
            raise
        except Exception as error:
            raise CelEvaluationError(str(error)) from None
        if not isinstance(result, bool):
            raise CelEvaluationError("selector is not a boolean")
        return result


def compile_selector(text: str) -> CompiledSelector:
    return CompiledSelector(text)


def install() -> None:
    """Make `policies.dra.cel.env` and `policies.dra.cel.selector` this double, unless
    the real engine is importable."""
    try:
        importlib.import_module("policies.dra.cel.selector")
        importlib.import_module("policies.dra.cel.env")
        return
    except ImportError:
        pass
    package = types.ModuleType("policies.dra.cel")
    package.__path__ = []
    env = types.ModuleType("policies.dra.cel.env")
    selector = types.ModuleType("policies.dra.cel.selector")
    for name in ("DeviceEnv", "Semver", "AttributeValue", "parse_semver"):
        setattr(env, name, globals()[name])
    for name in (
        "compile_selector",
        "CompiledSelector",
        "CelError",
        "CelCompileError",
        "CelEvaluationError",
        "CelCostExceeded",
    ):
        setattr(selector, name, globals()[name])
    sys.modules["policies.dra.cel"] = package
    sys.modules["policies.dra.cel.env"] = env
    sys.modules["policies.dra.cel.selector"] = selector
