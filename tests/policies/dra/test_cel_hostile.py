"""Hostile selectors: huge, deep, costly, invalid, wrong-typed. Each gets the right
CelError (asserted on the error, never on time), and nothing else escapes."""

from __future__ import annotations

import pytest

from policies.dra.cel import selector as selector_module
from policies.dra.cel.limits import MAX_EXPRESSION_LENGTH
from policies.dra.cel.selector import (
    CelCompileError,
    CelCostExceeded,
    CelEvaluationError,
    compile_selector,
    compile_uncached,
)
from tests.policies.dra.cel_helpers import device, run


def test_expression_longer_than_the_kubernetes_limit_is_refused_unparsed() -> None:
    expression = "true || " * (MAX_EXPRESSION_LENGTH // 8) + "true"
    assert len(expression) > MAX_EXPRESSION_LENGTH
    with pytest.raises(CelCompileError, match="more than the limit of 10240"):
        compile_selector(expression)
    at_limit = "true || " * 1279 + "true"
    assert len(at_limit) <= MAX_EXPRESSION_LENGTH
    assert compile_selector(at_limit).matches(device()) is True


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 100_000 + "true" + ")" * 100_000,
        "[" * 100_000 + "]" * 100_000,
        "{" * 100_000,
        "!" * 100_000 + "true",
        "-" * 100_000 + "1 > 0",
        "true ? " * 50_000 + "true",
        "f(" * 100_000,
        "a." * 50_000 + "b",
        "x[" * 100_000,
    ],
)
def test_deep_nesting_is_a_compile_error_not_a_recursion_error(expression: str) -> None:
    # Longer than the length limit too: the nesting bound is checked by compiling
    # without the length check being the reason.
    with pytest.raises(CelCompileError):
        compile_selector(expression)
    text = expression[: MAX_EXPRESSION_LENGTH - 10]
    with pytest.raises(CelCompileError, match=r"nested|Syntax error|too many|undeclared"):
        compile_selector(text)


def test_long_flat_chains_stay_shallow_and_compile() -> None:
    conjunction = " && ".join(["true"] * 1200)
    assert run(conjunction, device()) is True
    with pytest.raises(CelCompileError, match="nested more than"):
        compile_selector(" + ".join(["1"] * 2000) + " > 0")


@pytest.mark.parametrize(
    "expression",
    [
        # 10^7 steps of nested comprehensions.
        "lists.range(100).all(a, lists.range(100).all(b, lists.range(100).all(c, "
        "lists.range(10).all(d, a + b + c + d >= 0))))",
        # A string doubled forty times would be a terabyte: stopped by the size cost.
        "cel.bind(s0, 'xxxxxxxxxxxxxxxx', "
        + "".join(f"cel.bind(s{i}, s{i - 1} + s{i - 1}, " for i in range(1, 41))
        + "size(s40) > 0"
        + ")" * 41,
        "lists.range(1000000000).size() > 0",
        "'a'.replace('', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb')"
        ".replace('', 'cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc')"
        ".replace('', 'dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd')"
        ".replace('', 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee').size() > 0",
        "lists.range(2000).map(x, lists.range(2000)).flatten().size() > 0",
    ],
)
def test_costly_expressions_stop_at_the_cost_limit(expression: str) -> None:
    with pytest.raises(CelCostExceeded, match="actual cost limit exceeded"):
        run(expression, device())


def test_a_catastrophic_backtracking_pattern_is_answered_by_re2() -> None:
    # Python's re would backtrack 2^40 times here; RE2 is linear.
    subject = "a" * 40
    assert run(f"'{subject}'.matches('^(a|a)*b$')", device()) is False
    assert run(f"'{subject}'.matches('^(a+)+$')", device()) is True


@pytest.mark.parametrize(
    "pattern",
    ["(a)\\\\1", "(?=a)", "(?<!a)b", "a{1001}", "(?P=n)"],
)
def test_patterns_re2_refuses_are_compile_errors(pattern: str) -> None:
    with pytest.raises(CelCompileError, match="invalid regular expression"):
        compile_selector(f"'a'.matches('{pattern}')")
    with pytest.raises(CelEvaluationError, match="invalid regular expression"):
        run(f"'a'.matches(dyn('{pattern}'))", device())


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["dra.example.com"].n + 1 > 0',
        'device.attributes["dra.example.com"].n.sign() == 1',
        'device.attributes["dra.example.com"].n.isGreaterThan(semver("1.0.0"))',
        'device.attributes["dra.example.com"].n > 1',
        'device.attributes["dra.example.com"].n',
    ],
)
def test_an_attribute_of_the_wrong_type_is_a_runtime_error(expression: str) -> None:
    # "n" is a string on this device: the selector's author expected another type.
    env = device(attributes={"n": "text"})
    with pytest.raises(CelEvaluationError):
        run(expression, env)


def test_non_string_expressions_and_invalid_text_are_compile_errors() -> None:
    with pytest.raises(CelCompileError):
        compile_selector(None)  # type: ignore[arg-type]
    with pytest.raises(CelCompileError, match="UTF-8"):
        compile_selector("'\ud800' == ''")
    with pytest.raises(CelCompileError):
        compile_selector("")


def test_the_cost_limit_is_per_evaluation_and_configurable() -> None:
    expensive = compile_uncached("lists.range(500).all(x, x >= 0)", cost_limit=100)
    with pytest.raises(CelCostExceeded):
        expensive.matches(device())
    cheap = compile_selector("lists.range(500).all(x, x >= 0)")
    for _ in range(3):  # the meter starts afresh each time
        assert cheap.matches(device()) is True


def test_compiled_once_then_served_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = selector_module._SelectorCache(capacity=2)
    monkeypatch.setattr(selector_module, "_CACHE", cache)
    expression = 'device.driver == "dra.example.com"'
    first = compile_selector(expression)
    for _ in range(100):
        assert compile_selector(expression) is first
    assert cache.compilations == 1
    # A refusal is kept too: a tenant's broken selector is not re-parsed per device.
    for _ in range(5):
        with pytest.raises(CelCompileError):
            compile_selector("1 +")
    assert cache.compilations == 2
    # Bounded: the least recently used entry goes.
    compile_selector("true")
    compile_selector("false")
    assert compile_selector(expression) is not first
    assert cache.compilations == 5
