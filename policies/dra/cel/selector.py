"""The API the allocator uses: compile a selector once, match it against devices.

    selector = compile_selector('device.attributes["gpu.nvidia.com"].productName == "H100"')
    selector.matches(DeviceEnv(...))  # -> bool

What a device gets when its evaluation fails is kube-scheduler's answer
(dynamic-resource-allocation/structured allocator.go, selectorsMatch): a runtime
error or an exceeded cost is NOT "this device does not match". The allocator
returns the error ("claim ns/name: selector #i: CEL runtime error: ...") and the
whole allocation of that pod fails, so that a broken selector is visible instead of
silently skipping devices. `matches` raises CelEvaluationError / CelCostExceeded for
the caller to do the same. A compile error is the same kind of failure ("CEL compile
error"), raised by compile_selector as CelCompileError.

Compiled selectors (and refusals) are kept in an LRU cache keyed by the expression's
text, so the same expression on 5,000 nodes x 8 devices is parsed and checked once.
A CompiledSelector holds no per-evaluation state and may be shared freely.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from policies.dra.cel.compiler import Activation, Program, compile_tree
from policies.dra.cel.cost import Meter
from policies.dra.cel.env import DeviceEnv
from policies.dra.cel.errors import (
    CelCompileError,
    CelCostExceeded,
    CelError,
    CelEvaluationError,
)
from policies.dra.cel.limits import (
    COMPILE_CACHE_ENTRIES,
    MAX_EVALUATION_COST,
    MAX_EXPRESSION_LENGTH,
)
from policies.dra.cel.parser import parse

__all__ = [
    "CelCompileError",
    "CelCostExceeded",
    "CelError",
    "CelEvaluationError",
    "CompiledSelector",
    "compile_selector",
]


class CompiledSelector:
    """A selector that passed compilation: its expression and its program."""

    __slots__ = ("_program", "cost_limit", "expression")

    def __init__(self, expression: str, program: Program, cost_limit: int) -> None:
        self.expression = expression
        self._program = program
        self.cost_limit = cost_limit

    def matches(self, env: DeviceEnv) -> bool:
        """Whether the device is selected. Raises CelEvaluationError (runtime error:
        a missing attribute, an overflow, a result that is not bool...) or
        CelCostExceeded; never another exception."""
        return self.evaluate(env)[0]

    def evaluate(self, env: DeviceEnv) -> tuple[bool, int]:
        """(matches, actual cost) of one evaluation, for logs and tests."""
        program = self._program
        meter = Meter(self.cost_limit)
        act = Activation(env, program.slot_count, meter)
        try:
            result = program.evaluate(act)
        except CelError:
            raise
        except RecursionError:
            # Bounded depth makes this unreachable from a caller with normal stack
            # room; a caller already deep in its own recursion still gets an answer.
            raise CelEvaluationError("expression too deeply nested to evaluate") from None
        except (ArithmeticError, ValueError, TypeError, KeyError, IndexError, MemoryError) as error:
            # A library function met a value it was not written for (a DeviceEnv
            # built with values outside AttributeValue, say): an error of this
            # evaluation, never of the scheduler.
            raise CelEvaluationError(f"internal error: {type(error).__name__}") from None
        if type(result) is not bool:
            raise CelEvaluationError(
                f"CEL result of type {_kind(result)} could not be converted to bool"
            )
        return result, meter.spent


def _kind(value: object) -> str:
    from policies.dra.cel.values import type_name

    return type_name(value)


def _compile(expression: str, cost_limit: int) -> CompiledSelector:
    if not isinstance(expression, str):
        raise CelCompileError("compilation failed: the expression is not a string")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        # resource/v1 CELSelectorExpressionMaxLength: the API server refuses it too.
        raise CelCompileError(
            f"compilation failed: expression is {len(expression)} characters long, "
            f"more than the limit of {MAX_EXPRESSION_LENGTH}"
        )
    if any("\ud800" <= char <= "\udfff" for char in expression):
        raise CelCompileError("compilation failed: expression is not valid UTF-8")
    try:
        tree = parse(expression)
        program = compile_tree(expression, tree)
    except CelCompileError:
        raise
    except RecursionError:
        raise CelCompileError("compilation failed: expression nested too deeply") from None
    return CompiledSelector(expression, program, cost_limit)


class _SelectorCache:
    """LRU of compiled selectors and of refusals, by expression text."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, CompiledSelector | CelCompileError] = OrderedDict()
        self._lock = threading.Lock()
        self.compilations = 0

    def get(self, expression: str) -> CompiledSelector:
        with self._lock:
            entry = self._entries.get(expression)
            if entry is not None:
                self._entries.move_to_end(expression)
        if entry is None:
            self.compilations += 1
            try:
                entry = _compile(expression, MAX_EVALUATION_COST)
            except CelCompileError as error:
                entry = error
            with self._lock:
                self._entries[expression] = entry
                while len(self._entries) > self._capacity:
                    self._entries.popitem(last=False)
        if isinstance(entry, CelCompileError):
            raise CelCompileError(entry.message)
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_CACHE = _SelectorCache(COMPILE_CACHE_ENTRIES)


def compile_selector(expression: str) -> CompiledSelector:
    """The compiled selector of an expression (cached), or CelCompileError."""
    if not isinstance(expression, str):
        raise CelCompileError("compilation failed: the expression is not a string")
    return _CACHE.get(expression)


def compile_uncached(expression: str, cost_limit: int = MAX_EVALUATION_COST) -> CompiledSelector:
    """Compile without the cache, with another cost limit (tests, tools)."""
    return _compile(expression, cost_limit)
