"""Selectors as Kubernetes evaluates them: the cases of dynamic-resource-allocation's
cel/compile_test.go (rewritten) and the examples of the DRA documentation."""

from __future__ import annotations

from fractions import Fraction

import pytest

from policies.dra.cel.env import parse_semver
from policies.dra.cel.selector import (
    CelCompileError,
    CelCostExceeded,
    CelEvaluationError,
    compile_selector,
)
from tests.policies.dra.cel_helpers import H100, device, run

EXAMPLE = "dra.example.com"


@pytest.mark.parametrize(
    ("expression", "env", "expected"),
    [
        ("true", device(), True),
        ("false", device(), False),
        ('"no-such-domain" in device.attributes', device(), False),
        ('"dra.example.com" in device.attributes', device(attributes={"x": True}), True),
        ('device.driver == ""', device(driver=""), True),
        ('device.driver == "dra.example.com"', device(), True),
        ('device.attributes["dra.example.com"].name', device(attributes={"name": True}), True),
        ('device.attributes["dra.example.com"]["name"]', device(attributes={"name": True}), True),
        (
            'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
            device(attributes={"name": True}),
            True,
        ),
        (
            'device.attributes["other.example.com"].name',
            device(attributes={"other.example.com/name": True}),
            True,
        ),
        ('device.attributes["dra.example.com"].name > 0', device(attributes={"name": 1}), True),
        (
            'device.attributes["dra.example.com"].name == "fish"',
            device(attributes={"name": "fish"}),
            True,
        ),
        (
            'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
            device(attributes={"name": parse_semver("1.0.0")}),
            True,
        ),
        (
            'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true))'
            ' && isSemver("v1.0.0", true)',
            device(attributes={"name": parse_semver("1.0.0")}),
            True,
        ),
        (
            'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
            device(capacity={"name": Fraction(2**20)}),
            True,
        ),
        (
            '"name" in device.capacity["dra.example.com"] && '
            'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
            device(capacity={"name": Fraction(2**20)}),
            True,
        ),
        (
            '!("name" in device.capacity["dra.example.com"]) || '
            'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
            device(),
            True,
        ),
        (
            'device.attributes.exists_one(x, x == "dra.example.com")',
            device(attributes={"services": "x"}),
            True,
        ),
        (
            'device.attributes["dra.example.com"].exists_one(x, x == "services")',
            device(attributes={"services": "x"}),
            True,
        ),
        (
            'device.attributes["dra.example.com"].services.split("example").size() >= 2',
            device(attributes={"services": "some_example_value_example"}),
            True,
        ),
        (
            'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
            device(attributes={"services": "asymmetric"}),
            True,
        ),
        (
            'device.capacity.exists_one(x, x == "dra.example.com")',
            device(capacity={"memory": Fraction(2**20)}),
            True,
        ),
        (
            'device.capacity["dra.example.com"].exists_one(x, x == "memory")',
            device(capacity={"memory": Fraction(2**20)}),
            True,
        ),
        ("device.allowMultipleAllocations == true", device(allow_multiple_allocations=True), True),
        ("device.allowMultipleAllocations == false", device(), True),
    ],
)
def test_compile_test_cases_match(expression: str, env: object, expected: bool) -> None:
    assert compile_selector(expression).matches(env) is expected  # type: ignore[arg-type]


def test_all_attribute_kinds_in_one_expression() -> None:
    env = device(
        attributes={"bool": True, "int": 1, "string": "fish", "version": parse_semver("1.0.0")},
        capacity={"quantity": Fraction(2**20)},
    )
    expression = """
        device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
        device.attributes["dra.example.com"].bool &&
        device.attributes["dra.example.com"].int > 0 &&
        device.attributes["dra.example.com"].string == "fish" &&
        device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
        device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) &&
        device.attributes["dra.example.com"]["bool"] &&
        device.attributes["dra.example.com"]["int"] > 0 &&
        device.attributes["dra.example.com"]["string"] == "fish" &&
        device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))
    """
    assert run(expression, env)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("?!", "Syntax error"),
        ("1", "must evaluate to bool or the unknown type, not int"),
        ('device.attributes["dra.example.com"].name.includes("fish")', "undeclared reference"),
        ("device.noSuchField == 1", "undefined field 'noSuchField'"),
    ],
)
def test_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError, match=message.replace("(", r"\(")):
        compile_selector(expression)


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
    ],
)
def test_missing_domain_is_an_empty_map_and_missing_attribute_an_error(expression: str) -> None:
    # Kubernetes: a missing domain gives an empty map, the missing id then fails with
    # "no such key" (a runtime error, which fails the allocation, not the device).
    with pytest.raises(CelEvaluationError, match="no such key: noSuchAttr"):
        run(expression, device())


def test_has_on_a_missing_domain_is_false_not_an_error() -> None:
    assert run('has(device.attributes["x.com"].y)', device()) is False
    assert run('has(device.attributes["dra.example.com"].y)', device(attributes={"y": 1}))


def test_exists_on_a_scalar_attribute_is_a_runtime_error() -> None:
    with pytest.raises(CelEvaluationError, match="got 'int', expected iterable type"):
        run(
            'device.attributes["dra.example.com"].name.exists(x, x > 0)',
            device(attributes={"name": 1}),
        )
    with pytest.raises(CelEvaluationError, match=r"got 'kubernetes\.Semver', expected iterable"):
        run(
            'device.attributes["dra.example.com"].name.exists(x, x.isGreaterThan(semver("0.0.1")))',
            device(attributes={"name": parse_semver("1.0.0")}),
        )


def test_the_expensive_nested_comprehension_exceeds_the_cost_limit() -> None:
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    inner = "int('1'.find('[0-9]*')) < 100"
    expression = inner
    for var in reversed(["x", "y", "z", "z2", "z3", "z4", "z5"]):
        expression = f"{ten}.all({var}, {expression})"
    with pytest.raises(CelCostExceeded, match="actual cost limit exceeded"):
        run(expression, device())


# The documentation's examples (kubernetes.io "Dynamic Resource Allocation" and the
# issue's): each must select the H100 and refuse a device that lacks what it wants.
@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "gpu.nvidia.com"',
        'device.driver == "gpu.nvidia.com" && '
        'device.attributes["gpu.nvidia.com"].productName == "H100"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
        'device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
        '"gpu.nvidia.com" in device.attributes',
        'device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("8.0.0")) >= 0',
        'device.attributes["topology.example.com"].numa == 1',
        'cel.bind(gpu, device.attributes["gpu.nvidia.com"], gpu.productName.startsWith("H") && '
        "!gpu.mig)",
    ],
)
def test_documented_examples(expression: str) -> None:
    assert run(expression, H100) is True
    other = device(driver="other.example.com", attributes={"productName": "A100"})
    try:
        assert run(expression, other) is False
    except CelEvaluationError as error:
        assert "no such key" in error.message
