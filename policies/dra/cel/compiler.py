"""Type-check a syntax tree and turn it into a program: one Python closure per node.

Checking follows cel-go's checker for what the DRA environment declares: undeclared
names and functions, calls with no matching overload, non-homogeneous literals,
field selection on a type without fields, a comprehension over a non-iterable, and
regular expression literals RE2 refuses are compile errors with their position.

Runtime errors are CelEvaluationError raised from the closures; `&&`, `||`, `all`
and `exists` absorb them as CEL's commutative logic says (an error on one side is
hidden by a deciding value on the other). CelCostExceeded is never absorbed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from policies.dra.cel import ast, library_core, library_kubernetes, library_strings
from policies.dra.cel import types as t
from policies.dra.cel.cost import LIST_CREATE_COST, MAP_CREATE_COST, Meter
from policies.dra.cel.device import DomainMap
from policies.dra.cel.env import DeviceEnv, Semver
from policies.dra.cel.errors import CelCompileError, CelEvaluationError
from policies.dra.cel.lexer import position
from policies.dra.cel.library import FUNCTIONS, Overload, accepts, no_overload
from policies.dra.cel.regex import check_pattern
from policies.dra.cel.values import CelUint, key_value, map_key, type_name

# The libraries register their functions on import.
_LIBRARIES = (library_core, library_strings, library_kubernetes)

# Functions Kubernetes enables that this scheduler does not implement: a selector
# using one is refused with this reason rather than "undeclared".
UNSUPPORTED = {
    "format": "string formatting (ext.Strings format)",
    "timestamp": "timestamps",
    "duration": "durations",
    "url": "the URL library",
    "isURL": "the URL library",
    "ip": "the IP library",
    "isIP": "the IP library",
    "cidr": "the CIDR library",
    "isCIDR": "the CIDR library",
    "type": "type values",
    "optional.of": "optional types",
    "optional.ofNonZeroValue": "optional types",
    "optional.none": "optional types",
    "first": "optional types (lists.first)",
    "last": "optional types (lists.last)",
    "sortBy": "the sortBy macro",
    "transformMapEntry": "the transformMapEntry macro",
}


class Activation:
    """The state of one evaluation: the device, comprehension variables, the meter."""

    __slots__ = ("device", "meter", "slots")

    def __init__(self, device: DeviceEnv, slot_count: int, meter: Meter) -> None:
        self.device = device
        self.slots: list[object] = [None] * slot_count
        self.meter = meter


Eval = Callable[[Activation], object]


@dataclass(frozen=True)
class Program:
    result_type: t.CelType
    evaluate: Eval
    slot_count: int


def compile_tree(text: str, tree: ast.Node) -> Program:
    compiler = _Compiler(text)
    result_type, evaluate = compiler.compile(tree, {})
    if result_type not in (t.BOOL, t.DYN):
        raise CelCompileError(
            f"compilation failed: must evaluate to bool or the unknown type, not {result_type}"
        )
    return Program(result_type, evaluate, compiler.slot_count)


Scope = Mapping[str, tuple[t.CelType, int]]


def _literal_type(value: object) -> t.CelType:
    kind = type(value)
    table = {
        bool: t.BOOL,
        int: t.INT,
        CelUint: t.UINT,
        float: t.DOUBLE,
        str: t.STRING,
        bytes: t.BYTES,
        type(None): t.NULL,
    }
    return table[kind]


class _Compiler:
    def __init__(self, text: str) -> None:
        self.text = text
        self.slot_count = 0

    def error(self, node: ast.Node, message: str) -> CelCompileError:
        return CelCompileError(f"compilation failed: {position(self.text, node.pos)}: {message}")

    def compile(self, node: ast.Node, scope: Scope) -> tuple[t.CelType, Eval]:
        if isinstance(node, ast.Literal):
            value = node.value
            return _literal_type(value), lambda act: value
        if isinstance(node, ast.Ident):
            return self.ident(node, scope)
        if isinstance(node, ast.Select):
            return self.select(node, scope)
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        if isinstance(node, ast.ListLiteral):
            return self.list_literal(node, scope)
        if isinstance(node, ast.MapLiteral):
            return self.map_literal(node, scope)
        if isinstance(node, ast.Comprehension):
            return self.comprehension(node, scope)
        raise self.error(node, f"unsupported expression {type(node).__name__}")  # pragma: no cover

    # -- names and fields ----------------------------------------------------------
    def ident(self, node: ast.Ident, scope: Scope) -> tuple[t.CelType, Eval]:
        bound = scope.get(node.name)
        if bound is not None:
            declared, slot = bound

            def variable(act: Activation) -> object:
                return act.slots[slot]

            return declared, variable
        if node.name == "device":
            return t.DEVICE, lambda act: act.device
        raise self.error(node, f"undeclared reference to '{node.name}'")

    def select(self, node: ast.Select, scope: Scope) -> tuple[t.CelType, Eval]:
        operand_type, operand = self.compile(node.operand, scope)
        name = node.field
        test_only = node.test_only
        if operand_type == t.DEVICE:
            if name not in t.DEVICE_FIELDS:
                raise self.error(node, f"undefined field '{name}'")
            if test_only:
                return t.BOOL, lambda act: True
            if (
                isinstance(node.operand, ast.Ident)
                and node.operand.name == "device"
                and ("device" not in scope)
            ):
                return t.DEVICE_FIELDS[name], _device_field(name)
            read = _device_field(name)

            def device_field(act: Activation) -> object:
                act.meter.spent += 1
                return read(act)

            return t.DEVICE_FIELDS[name], device_field
        if operand_type.name == "map":
            key_type, value_type = operand_type.params
            if key_type not in (t.STRING, t.DYN):
                raise self.error(node, f"type '{operand_type}' does not support field selection")
            result_type = t.BOOL if test_only else value_type
        elif operand_type == t.DYN:
            result_type = t.BOOL if test_only else t.DYN
        else:
            raise self.error(node, f"type '{operand_type}' does not support field selection")

        def select(act: Activation) -> object:
            act.meter.spent += 1
            return _select(operand(act), name, test_only)

        return result_type, select

    # -- calls ---------------------------------------------------------------------
    def call(self, node: ast.Call, scope: Scope) -> tuple[t.CelType, Eval]:
        name = node.function
        if name in ("_&&_", "_||_"):
            return self.logic(node, scope)
        if name == "_?_:_":
            return self.conditional(node, scope)
        operands = ((node.target,) if node.target is not None else ()) + node.args
        compiled = [self.compile(operand, scope) for operand in operands]
        arg_types = [c[0] for c in compiled]
        evaluators = [c[1] for c in compiled]
        if name in ("matches", "find", "findAll"):
            self.check_regex_literal(node)
        if name == "_[_]" and arg_types[0] in (t.ATTRIBUTE_MAP, t.CAPACITY_MAP, t.DYN):
            return self.index_domains(node, arg_types, evaluators)
        overloads = FUNCTIONS.get(name)
        if overloads is None:
            reason = UNSUPPORTED.get(name)
            if reason:
                raise self.error(node, f"'{name}' ({reason}) is not supported by this scheduler")
            raise self.error(node, f"undeclared reference to '{name}'")
        member = node.target is not None
        matching: list[tuple[Overload, t.CelType]] = []
        for overload in overloads:
            if overload.member != member or len(overload.params) != len(arg_types):
                continue
            bindings: dict[str, t.CelType] = {}
            if all(t.bind(p, a, bindings) for p, a in zip(overload.params, arg_types, strict=True)):
                matching.append((overload, t.substitute(overload.result, bindings)))
        if not matching:
            raise self.error(
                node,
                f"found no matching overload for '{name}' applied to "
                f"'{_signature(arg_types, member)}'",
            )
        result_types = {result for _, result in matching}
        result_type = result_types.pop() if len(result_types) == 1 else t.DYN
        if name in ("_==_", "_!=_") and t.join(arg_types[0], arg_types[1]) is None:
            raise self.error(
                node,
                f"found no matching overload for '{name}' applied to "
                f"'{_signature(arg_types, member)}'",
            )
        return result_type, self.invoke(name, [o for o, _ in matching], arg_types, evaluators)

    def invoke(
        self, name: str, overloads: list[Overload], arg_types: list[t.CelType], args: list[Eval]
    ) -> Eval:
        concrete = all(_concrete(arg) for arg in arg_types)
        if len(overloads) == 1 and concrete:
            impl = overloads[0].impl
            if len(args) == 1:
                (only,) = args

                def call1(act: Activation) -> object:
                    value = only(act)
                    act.meter.spent += 1
                    return impl(act.meter, value)

                return call1
            if len(args) == 2:
                first, second = args
                if name == "_==_" and arg_types[0] in (t.STRING, t.INT, t.BOOL):
                    # Both sides are known to be of this one type: plain equality.
                    def equal_same(act: Activation) -> object:
                        left = first(act)
                        right = second(act)
                        act.meter.spent += 1
                        return left == right

                    return equal_same

                def call2(act: Activation) -> object:
                    left = first(act)
                    right = second(act)
                    act.meter.spent += 1
                    return impl(act.meter, left, right)

                return call2

            def call_n(act: Activation) -> object:
                values = [arg(act) for arg in args]
                act.meter.spent += 1
                return impl(act.meter, *values)

            return call_n

        def dispatch(act: Activation) -> object:
            values = tuple(arg(act) for arg in args)
            act.meter.spent += 1
            for overload in overloads:
                if all(accepts(p, v) for p, v in zip(overload.params, values, strict=True)):
                    return overload.impl(act.meter, *values)
            raise no_overload(name, values)

        return dispatch

    def index_domains(
        self, node: ast.Call, arg_types: list[t.CelType], args: list[Eval]
    ) -> tuple[t.CelType, Eval]:
        container_type, key_type = arg_types
        container, key = args
        if container_type == t.DYN:
            result_type = t.DYN
        else:
            if key_type not in (t.STRING, t.DYN):
                raise self.error(
                    node,
                    f"found no matching overload for '_[_]' applied to "
                    f"'{_signature(arg_types, False)}'",
                )
            result_type = container_type.params[1]
        general = FUNCTIONS["_[_]"]

        def index(act: Activation) -> object:
            target = container(act)
            wanted = key(act)
            act.meter.spent += 1
            if type(target) is DomainMap:
                return target.lookup(wanted)
            for overload in general:
                if accepts(overload.params[0], target) and accepts(overload.params[1], wanted):
                    return overload.impl(act.meter, target, wanted)
            raise no_overload("_[_]", (target, wanted))

        return result_type, index

    def check_regex_literal(self, node: ast.Call) -> None:
        # Kubernetes validates regular expression literals at compile time
        # (cel.ValidateRegexLiterals, 1.29+).
        pattern = (
            node.args[-1] if node.function != "findAll" or len(node.args) == 1 else node.args[0]
        )
        if isinstance(pattern, ast.Literal) and type(pattern.value) is str:
            problem = check_pattern(pattern.value)
            if problem is not None:
                raise self.error(pattern, problem)

    def logic(self, node: ast.Call, scope: Scope) -> tuple[t.CelType, Eval]:
        (left_type, left), (right_type, right) = (self.compile(arg, scope) for arg in node.args)
        for operand_type in (left_type, right_type):
            if operand_type not in (t.BOOL, t.DYN):
                raise self.error(
                    node,
                    f"found no matching overload for '{node.function}' "
                    f"applied to '({left_type}, {right_type})'",
                )
        decisive = node.function == "_||_"  # the value that decides: true for ||, false for &&
        name = node.function

        def logical(act: Activation) -> object:
            problem: CelEvaluationError | None = None
            try:
                value = left(act)
                if value is decisive:
                    return decisive
                if type(value) is not bool:
                    problem = no_overload(name, (value,))
            except CelEvaluationError as error:
                problem = error
            try:
                other = right(act)
            except CelEvaluationError as error:
                raise (problem or error) from None
            if other is decisive:
                return decisive
            if problem is not None:
                raise problem
            if type(other) is not bool:
                raise no_overload(name, (other,))
            return not decisive

        return t.BOOL, logical

    def conditional(self, node: ast.Call, scope: Scope) -> tuple[t.CelType, Eval]:
        (cond_type, cond), (then_type, then), (else_type, otherwise) = (
            self.compile(arg, scope) for arg in node.args
        )
        result_type = t.join(then_type, else_type)
        if cond_type not in (t.BOOL, t.DYN) or result_type is None:
            raise self.error(
                node,
                "found no matching overload for '_?_:_' applied to "
                f"'({cond_type}, {then_type}, {else_type})'",
            )

        def choose(act: Activation) -> object:
            decision = cond(act)
            if decision is True:
                return then(act)
            if decision is False:
                return otherwise(act)
            raise no_overload("_?_:_", (decision,))

        return result_type, choose

    # -- literals ------------------------------------------------------------------
    def homogeneous(self, node: ast.Node, types: list[t.CelType]) -> t.CelType:
        # HomogeneousAggregateLiterals: every element of one type (dyn(x) lets a
        # writer mix on purpose).
        if not types:
            return t.DYN
        joined = types[0]
        for other in types[1:]:
            if joined == t.DYN or other == t.DYN:
                joined = t.DYN if other == t.DYN and joined != t.DYN else joined
                continue
            if other != joined:
                raise self.error(node, f"expected type '{joined}' but found '{other}'")
        return joined

    def list_literal(self, node: ast.ListLiteral, scope: Scope) -> tuple[t.CelType, Eval]:
        compiled = [self.compile(element, scope) for element in node.elements]
        element_type = self.homogeneous(node, [c[0] for c in compiled])
        elements = [c[1] for c in compiled]

        def build(act: Activation) -> object:
            act.meter.charge(LIST_CREATE_COST)
            return tuple(element(act) for element in elements)

        return t.list_of(element_type), build

    def map_literal(self, node: ast.MapLiteral, scope: Scope) -> tuple[t.CelType, Eval]:
        keys = [self.compile(key, scope) for key, _ in node.entries]
        values = [self.compile(value, scope) for _, value in node.entries]
        key_type = self.homogeneous(node, [k[0] for k in keys])
        for key_node, (one_type, _) in zip((k for k, _ in node.entries), keys, strict=True):
            if one_type not in (t.INT, t.UINT, t.BOOL, t.STRING, t.DYN):
                raise self.error(key_node, f"unsupported map key type: {one_type}")
        value_type = self.homogeneous(node, [v[0] for v in values])
        pairs = [(k[1], v[1]) for k, v in zip(keys, values, strict=True)]

        def build(act: Activation) -> object:
            act.meter.charge(MAP_CREATE_COST)
            result: dict[object, object] = {}
            for key, value in pairs:
                try:
                    stored = map_key(key(act))
                except ValueError as error:
                    raise CelEvaluationError(str(error)) from None
                if stored in result:
                    raise CelEvaluationError(
                        f"Failed with repeated key: {key_value(stored)!r}"[:120]
                    )
                result[stored] = value(act)
            return result

        return t.map_of(key_type, value_type), build

    # -- comprehensions --------------------------------------------------------------
    def comprehension(self, node: ast.Comprehension, scope: Scope) -> tuple[t.CelType, Eval]:
        range_type, source = self.compile(node.range, scope)
        kind = node.kind
        if kind == "bind":
            slot = self.new_slot()
            body_type, body = self.compile(node.body, {**scope, node.var: (range_type, slot)})

            def bind(act: Activation) -> object:
                act.slots[slot] = source(act)
                return body(act)

            return body_type, bind
        first_type, second_type = _iteration_types(range_type, node.var2 is not None)
        if first_type is None:
            raise self.error(
                node,
                f"expression of type '{range_type}' cannot be the range of a "
                "comprehension (must be list, map, or dynamic)",
            )
        first_slot = self.new_slot()
        inner = {**scope, node.var: (first_type, first_slot)}
        second_slot = -1
        if node.var2 is not None:
            second_slot = self.new_slot()
            inner[node.var2] = (second_type, second_slot)  # type: ignore[assignment]
        body_type, body = self.compile(node.body, inner)
        predicate: Eval | None = None
        if node.predicate is not None:
            predicate_type, predicate = self.compile(node.predicate, inner)
            self.require_bool(node, predicate_type)
        if kind in ("all", "exists", "exists_one", "all2", "exists2", "exists_one2", "filter"):
            self.require_bool(node, body_type)
        loop = _Loop(source, first_slot, second_slot)
        if kind in ("all", "all2", "exists", "exists2"):
            return t.BOOL, _quantifier(loop, body, kind.startswith("exists"))
        if kind in ("exists_one", "exists_one2"):
            return t.BOOL, _exists_one(loop, body)
        if kind == "filter":
            return t.list_of(first_type), _filter(loop, body)
        if kind == "transform_map":
            if range_type.name != "map" and range_type != t.DYN:
                raise self.error(node, "transformMap() applies to maps only")
            key_type = range_type.params[0] if range_type.name == "map" else t.DYN
            return t.map_of(key_type, body_type), _transform_map(loop, body, predicate)
        return t.list_of(body_type), _map(loop, body, predicate)

    def require_bool(self, node: ast.Node, found: t.CelType) -> None:
        if found not in (t.BOOL, t.DYN):
            raise self.error(node, f"expected type 'bool' but found '{found}'")

    def new_slot(self) -> int:
        self.slot_count += 1
        return self.slot_count - 1


def _concrete(declared: t.CelType) -> bool:
    if declared == t.DYN:
        return False
    return all(_concrete(param) for param in declared.params)


def _signature(arg_types: list[t.CelType], member: bool) -> str:
    if member:
        receiver, *rest = arg_types
        return f"{receiver}.({', '.join(str(a) for a in rest)})"
    return f"({', '.join(str(a) for a in arg_types)})"


def _device_field(name: str) -> Eval:
    if name == "driver":
        return lambda act: act.device.driver
    if name == "attributes":
        return lambda act: DomainMap(act.device.attributes)
    if name == "capacity":
        return lambda act: DomainMap(act.device.capacity)
    return lambda act: act.device.allow_multiple_allocations


def _select(value: object, name: str, test_only: bool) -> object:
    if type(value) is DomainMap:
        return True if test_only else value.lookup(name)
    if isinstance(value, Mapping):
        if test_only:
            return name in value
        found = value.get(name, _MISSING)
        if found is _MISSING:
            raise CelEvaluationError(f"no such key: {name}")
        return found
    if type(value) is DeviceEnv:
        if name not in t.DEVICE_FIELDS:
            raise CelEvaluationError(f"no such field: {name}")
        return True if test_only else _DEVICE_READERS[name](value)
    raise CelEvaluationError(f"type '{type_name(value)}' does not support field selection")


_MISSING = object()
_DEVICE_READERS: dict[str, Callable[[DeviceEnv], object]] = {
    "driver": lambda d: d.driver,
    "attributes": lambda d: DomainMap(d.attributes),
    "capacity": lambda d: DomainMap(d.capacity),
    "allowMultipleAllocations": lambda d: d.allow_multiple_allocations,
}


def _iteration_types(
    range_type: t.CelType, two_vars: bool
) -> tuple[t.CelType | None, t.CelType | None]:
    if range_type == t.DYN:
        return t.DYN, t.DYN
    if range_type.name == "list":
        return (t.INT, range_type.params[0]) if two_vars else (range_type.params[0], None)
    if range_type.name == "map":
        return range_type.params[0], range_type.params[1]
    return None, None


@dataclass(frozen=True, slots=True)
class _Loop:
    """The range of a comprehension and the slots of its variable(s)."""

    source: Eval
    first_slot: int
    second_slot: int  # -1 with one variable

    def items(self, act: Activation) -> list[object]:
        """The values of the loop variable(s), one entry per step (a pair with two)."""
        container = self.source(act)
        two = self.second_slot >= 0
        if type(container) is tuple:
            return list(enumerate(container)) if two else list(container)
        if isinstance(container, Mapping):
            if two:
                return [(key_value(key), container[key]) for key in container]
            return [key_value(key) for key in container]
        kind = {Fraction: "kubernetes.Quantity", Semver: "kubernetes.Semver"}.get(
            type(container), type_name(container)
        )
        raise CelEvaluationError(f"got '{kind}', expected iterable type")

    def step(self, act: Activation, item: object) -> None:
        """Pay for one step and set the variable(s)."""
        act.meter.charge(1)
        if self.second_slot >= 0:
            act.slots[self.first_slot], act.slots[self.second_slot] = item  # type: ignore[misc]
        else:
            act.slots[self.first_slot] = item


def _quantifier(loop: _Loop, body: Eval, exists: bool) -> Eval:
    # all: false wins over errors; exists: true wins over errors (CEL's logic).
    def run(act: Activation) -> object:
        problem: CelEvaluationError | None = None
        for item in loop.items(act):
            loop.step(act, item)
            try:
                value = body(act)
            except CelEvaluationError as error:
                problem = problem or error
                continue
            if value is exists:
                return exists
            if type(value) is not bool:
                problem = problem or no_overload("_&&_", (value,))
        if problem is not None:
            raise problem
        return not exists

    return run


def _exists_one(loop: _Loop, body: Eval) -> Eval:
    def run(act: Activation) -> object:
        count = 0
        for item in loop.items(act):
            loop.step(act, item)
            value = body(act)
            if type(value) is not bool:
                raise no_overload("exists_one", (value,))
            count += value
        return count == 1

    return run


def _filter(loop: _Loop, body: Eval) -> Eval:
    def run(act: Activation) -> object:
        kept: list[object] = []
        for item in loop.items(act):
            loop.step(act, item)
            value = body(act)
            if type(value) is not bool:
                raise no_overload("filter", (value,))
            if value:
                kept.append(item[0] if loop.second_slot >= 0 else item)  # type: ignore[index]
        return tuple(kept)

    return run


def _kept(act: Activation, predicate: Eval | None, function: str) -> bool:
    if predicate is None:
        return True
    keep = predicate(act)
    if type(keep) is not bool:
        raise no_overload(function, (keep,))
    return keep


def _map(loop: _Loop, body: Eval, predicate: Eval | None) -> Eval:
    def run(act: Activation) -> object:
        produced: list[object] = []
        for item in loop.items(act):
            loop.step(act, item)
            if _kept(act, predicate, "map"):
                produced.append(body(act))
        return tuple(produced)

    return run


def _transform_map(loop: _Loop, body: Eval, predicate: Eval | None) -> Eval:
    def run(act: Activation) -> object:
        produced: dict[object, object] = {}
        for item in loop.items(act):
            loop.step(act, item)
            if _kept(act, predicate, "transformMap"):
                produced[map_key(item[0])] = body(act)  # type: ignore[index]
        return produced

    return run
