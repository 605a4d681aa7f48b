"""Semantic versions (blang/semver v4 strict parse) and the device environment."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.dra.cel.env import DeviceEnv, Semver, parse_semver


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.2.3", Semver(1, 2, 3)),
        ("0.0.0", Semver(0, 0, 0)),
        ("1.0.0-alpha.1", Semver(1, 0, 0, ("alpha", 1))),
        ("1.0.0-rc-1+build.5", Semver(1, 0, 0, ("rc-1",), ("build", "5"))),
        ("550.54.15", Semver(550, 54, 15)),
    ],
)
def test_strict_parse_accepts(text: str, expected: Semver) -> None:
    parsed = parse_semver(text)
    assert parsed == expected
    assert (parsed.major, parsed.minor, parsed.patch, parsed.pre) == (
        expected.major,
        expected.minor,
        expected.patch,
        expected.pre,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1",
        "1.2",
        "v1.2.3",
        "01.2.3",
        "1.02.3",
        "1.2.03",
        "1.2.3-",
        "1.2.3-01",
        "1.2.3+",
        "1.2.3-a..b",
        "1.2.3-a_b",
        "a.b.c",
        "1.2.3.4",
        "18446744073709551616.0.0",
        " 1.2.3",
    ],
)
def test_strict_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_semver(text)


def test_precedence_follows_semver_rules() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    versions = [parse_semver(text) for text in ordered]
    assert sorted(reversed(versions)) == versions
    assert parse_semver("1.0.0+a") == parse_semver("1.0.0+b")  # build metadata ignored
    assert hash(parse_semver("1.0.0+a")) == hash(parse_semver("1.0.0"))


@given(st.text(max_size=30))
def test_parse_semver_raises_only_value_error(text: str) -> None:
    try:
        parsed = parse_semver(text)
    except ValueError:
        return
    assert parse_semver(str(parsed)) == parsed


def test_qualified_names_split_by_domain_with_driver_default() -> None:
    env = DeviceEnv.from_qualified_names(
        "gpu.nvidia.com",
        {"model": "H100", "example.com/rack": "r1"},
        {"memory": Fraction(1)},
    )
    assert env.attributes == {"gpu.nvidia.com": {"model": "H100"}, "example.com": {"rack": "r1"}}
    assert env.capacity == {"gpu.nvidia.com": {"memory": Fraction(1)}}
    assert env.allow_multiple_allocations is False
