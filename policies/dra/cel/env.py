"""What a CEL selector sees of a device: the `device` variable of kube-scheduler's DRA.

`device.driver` (string), `device.attributes` (domain -> id -> int, bool, string or
semver version), `device.capacity` (domain -> id -> quantity) and
`device.allowMultipleAllocations` (bool). A ResourceSlice names attributes as
qualified names ("gpu.nvidia.com/productName", or "productName" in the driver's own
domain): `DeviceEnv.from_qualified_names` splits them as Kubernetes does
(dynamic-resource-allocation/cel parseQualifiedName).

Quantities are exact `fractions.Fraction` (cache/quantity.py parses them); versions
are `Semver`, parsed with the rules of github.com/blang/semver/v4 `Parse` (strict:
MAJOR.MINOR.PATCH, no leading zeros, no "v" prefix). A ResourceSlice whose version
attribute does not parse is an error of that device in Kubernetes ("attribute X:
parse semantic version"): the caller decides that before building a DeviceEnv.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

_DIGITS = frozenset("0123456789")
_ALPHANUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-0123456789")
_UINT64_MAX = 2**64 - 1
# A version is at most DeviceAttributeMaxValueLength (64) characters in a slice; the
# CEL function semver() may be handed a longer string, which is simply not parsed.
_MAX_VERSION_TEXT = 1024


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Semver:
    """A semantic version. Ordered and compared by precedence (semver 2.0.0 section 11:
    build metadata is ignored), as blang/semver's Compare does."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1, as Version.Compare."""
        mine = (self.major, self.minor, self.patch)
        theirs = (other.major, other.minor, other.patch)
        if mine != theirs:
            return 1 if mine > theirs else -1
        if not self.pre or not other.pre:
            # A version without pre-release parts ranks above one with them.
            return (not self.pre) - (not other.pre)
        for left, right in zip(self.pre, other.pre, strict=False):
            order = _compare_pre(left, right)
            if order:
                return order
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(part) for part in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _compare_pre(left: int | str, right: int | str) -> int:
    # Numeric identifiers rank below alphanumeric ones; like kinds compare naturally.
    if isinstance(left, int) and isinstance(right, int):
        return (left > right) - (left < right)
    if isinstance(left, int):
        return -1
    if isinstance(right, int):
        return 1
    return (left > right) - (left < right)


def _number(text: str, what: str) -> int:
    if not text or not set(text) <= _DIGITS:
        raise ValueError(f"invalid character(s) found in {what} number {text[:40]!r}")
    if len(text) > 1 and text[0] == "0":
        raise ValueError(f"{what} number must not contain leading zeroes {text[:40]!r}")
    value = int(text) if len(text) <= 20 else _UINT64_MAX + 1
    if value > _UINT64_MAX:
        raise ValueError(f"{what} number {text[:40]!r} is out of range")
    return value


def parse_semver(text: str) -> Semver:
    """Parse a version as blang/semver/v4 Parse does; ValueError when it refuses."""
    if not isinstance(text, str):
        raise ValueError("a version must be a string")
    if not text:
        raise ValueError("version string empty")
    if len(text) > _MAX_VERSION_TEXT:
        raise ValueError(f"version string longer than {_MAX_VERSION_TEXT} characters")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("no Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: tuple[str, ...] = ()
    pre: tuple[int | str, ...] = ()
    if "+" in rest:
        rest, build_text = rest.split("+", 1)
        build = tuple(build_text.split("."))
    if "-" in rest:
        rest, pre_text = rest.split("-", 1)
        pre = tuple(_pre_release(part) for part in pre_text.split("."))
    patch = _number(rest, "patch")
    for part in build:
        if not part:
            raise ValueError("build meta data is empty")
        if not set(part) <= _ALPHANUM:
            raise ValueError(f"invalid character(s) found in build meta data {part[:40]!r}")
    return Semver(major, minor, patch, pre, build)


def _pre_release(part: str) -> int | str:
    if not part:
        raise ValueError("prerelease is empty")
    if set(part) <= _DIGITS:
        return _number(part, "numeric prerelease")
    if not set(part) <= _ALPHANUM:
        raise ValueError(f"invalid character(s) found in prerelease {part[:40]!r}")
    return part


AttributeValue = int | bool | str | Semver


@dataclass(frozen=True)
class DeviceEnv:
    """One device as the `device` variable of a selector shows it. Maps are read, never
    written: the same DeviceEnv may serve every selector of a cycle."""

    driver: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Fraction]]
    allow_multiple_allocations: bool = False

    @classmethod
    def from_qualified_names(
        cls,
        driver: str,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, Fraction],
        allow_multiple_allocations: bool = False,
    ) -> DeviceEnv:
        """Group a slice's qualified names by domain; a name without "/" belongs to
        the driver's domain (Kubernetes: parseQualifiedName(name, driver))."""
        grouped_attributes: dict[str, dict[str, AttributeValue]] = {}
        for name, value in attributes.items():
            domain, ident = split_qualified_name(name, driver)
            grouped_attributes.setdefault(domain, {})[ident] = value
        grouped_capacity: dict[str, dict[str, Fraction]] = {}
        for name, quantity in capacity.items():
            domain, ident = split_qualified_name(name, driver)
            grouped_capacity.setdefault(domain, {})[ident] = quantity
        return cls(driver, grouped_attributes, grouped_capacity, allow_multiple_allocations)


def split_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """("domain", "id") of "domain/id"; a bare "id" is in default_domain."""
    domain, slash, ident = name.partition("/")
    if not slash:
        return default_domain, name
    return domain, ident
