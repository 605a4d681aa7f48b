"""Shared devices and a one-call evaluator for the CEL selector tests."""

from __future__ import annotations

from fractions import Fraction

from policies.dra.cel.env import AttributeValue, DeviceEnv, parse_semver
from policies.dra.cel.selector import compile_selector

H100 = DeviceEnv.from_qualified_names(
    "gpu.nvidia.com",
    {
        "productName": "H100",
        "driverVersion": parse_semver("550.54.15"),
        "cudaComputeCapability": parse_semver("9.0.0"),
        "index": 3,
        "mig": False,
        "topology.example.com/numa": 1,
    },
    {"memory": Fraction(80 * 2**30), "cores": Fraction(132)},
    allow_multiple_allocations=True,
)


def device(
    driver: str = "dra.example.com",
    attributes: dict[str, AttributeValue] | None = None,
    capacity: dict[str, Fraction] | None = None,
    allow_multiple_allocations: bool = False,
) -> DeviceEnv:
    return DeviceEnv.from_qualified_names(
        driver, attributes or {}, capacity or {}, allow_multiple_allocations
    )


def run(expression: str, env: DeviceEnv = H100) -> bool:
    return compile_selector(expression).matches(env)
