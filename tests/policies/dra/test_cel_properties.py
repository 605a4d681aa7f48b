"""Properties: nothing but CelError ever escapes, evaluation is deterministic, and
&& / || follow CEL's commutative error absorption."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.dra.cel.env import DeviceEnv, parse_semver
from policies.dra.cel.selector import CelCompileError, CelError, compile_uncached

DEVICE = DeviceEnv.from_qualified_names(
    "dra.example.com",
    {"name": "fish", "count": 3, "on": True, "version": parse_semver("1.2.3")},
    {"memory": Fraction(2**30)},
)


def outcome(expression: str) -> tuple[str, object]:
    """("ok", result) or (error class name, message); anything else fails the test."""
    try:
        selector = compile_uncached(expression)
    except CelCompileError as error:
        assert "internal error" not in error.message
        return ("CelCompileError", error.message)
    try:
        return ("ok", selector.evaluate(DEVICE))
    except CelError as error:
        assert "internal error" not in error.message, (expression, error.message)
        return (type(error).__name__, error.message)


ALPHABET = st.sampled_from(
    [*"()[]{}.,:?!<>=&|+-*/%\"'\\ _azAZ019xuebr\n\t", "device", "in", "has(", "all("]
)


@given(st.text(max_size=60))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_random_text_raises_only_cel_errors(text: str) -> None:
    assert outcome(text) == outcome(text)


@given(st.lists(ALPHABET, max_size=40).map("".join))
@settings(max_examples=300)
def test_random_token_soup_raises_only_cel_errors(text: str) -> None:
    assert outcome(text) == outcome(text)


LEAVES = st.sampled_from(
    [
        "true",
        "false",
        "0",
        "1",
        "-1",
        "9223372036854775807",
        "2u",
        "0u",
        "1.5",
        "0.0",
        "'fish'",
        "''",
        "b'x'",
        "null",
        "[]",
        "[1, 2]",
        "{}",
        "{'a': 1}",
        "device.driver",
        "device.allowMultipleAllocations",
        "device.attributes",
        "device.capacity",
        'device.attributes["dra.example.com"]',
        'device.attributes["dra.example.com"].name',
        'device.attributes["dra.example.com"].count',
        'device.attributes["dra.example.com"].on',
        'device.attributes["dra.example.com"].version',
        'device.attributes["dra.example.com"].missing',
        'device.attributes["other.com"]',
        'device.capacity["dra.example.com"].memory',
        "quantity('1Gi')",
        "semver('1.0.0')",
        "x",
        "dyn(1)",
        "dyn('s')",
    ]
)


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.sampled_from(
        ["&&", "||", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "%", "in"]
    )
    methods = st.sampled_from(
        [
            "size()",
            "startsWith('f')",
            "contains('i')",
            "matches('^f')",
            "isGreaterThan(semver('1.0.0'))",
            "compareTo(quantity('1'))",
            "split('i')",
            "all(x, x == x)",
            "exists(x, true)",
            "map(x, x)",
            "filter(x, false)",
            "exists_one(x, true)",
            "lowerAscii()",
            "sum()",
            "isSorted()",
            "sign()",
            "major()",
            "asInteger()",
            "substring(1)",
            "charAt(0)",
        ]
    )
    return st.one_of(
        st.tuples(children, binary, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, methods).map(lambda t: f"{t[0]}.{t[1]}"),
        children.map(lambda c: f"!{c}"),
        children.map(lambda c: f"-{c}"),
        children.map(lambda c: f"has({c}.name)"),
        children.map(lambda c: f"[{c}]"),
        children.map(lambda c: f"size({c})"),
        children.map(lambda c: f"int({c})"),
        children.map(lambda c: f"string({c})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(children, children).map(lambda t: f"cel.bind(x, {t[0]}, {t[1]})"),
        st.tuples(children, children).map(lambda t: f"{t[0]}.all(x, {t[1]})"),
    )


EXPRESSIONS = st.recursive(LEAVES, _extend, max_leaves=12)


@given(EXPRESSIONS)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_random_expressions_raise_only_cel_errors_and_are_deterministic(expression: str) -> None:
    first = outcome(expression)
    assert outcome(expression) == first


# Operands by what they evaluate to: true, false, a runtime error, a non-bool value.
OPERANDS = {
    "true": ["true", "1 == 1", 'device.attributes["dra.example.com"].on'],
    "false": ["false", "1 == 2", "!device.attributes['dra.example.com'].on"],
    "error": ["1 / 0 == 1", 'device.attributes["dra.example.com"].missing', "[1][5] == 1"],
    "non-bool": ["dyn(1)", 'device.attributes["dra.example.com"].count'],
}


def _expected(operator: str, left: str, right: str) -> str:
    decisive, other = ("false", "true") if operator == "&&" else ("true", "false")
    if decisive in (left, right):
        return decisive
    if left == other and right == other:
        return other
    return "error"


@given(
    st.sampled_from(["&&", "||"]),
    st.sampled_from(list(OPERANDS)),
    st.sampled_from(list(OPERANDS)),
    st.data(),
)
def test_logical_operators_absorb_errors_commutatively(
    operator: str, left_kind: str, right_kind: str, data: st.DataObject
) -> None:
    left = data.draw(st.sampled_from(OPERANDS[left_kind]))
    right = data.draw(st.sampled_from(OPERANDS[right_kind]))
    expected = _expected(operator, left_kind, right_kind)
    for expression in (f"({left}) {operator} ({right})", f"({right}) {operator} ({left})"):
        kind, value = outcome(expression)
        if expected == "error":
            assert kind == "CelEvaluationError", (expression, kind, value)
        else:
            assert (kind, value)[0] == "ok", (expression, kind, value)
            assert value[0] is (expected == "true")  # type: ignore[index]
