"""The runtime form of the `device` variable's maps."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

EMPTY_MAP: Mapping[str, object] = MappingProxyType({})


class DomainMap(Mapping[str, object]):
    """`device.attributes` and `device.capacity`: looking up a domain the device does
    not have gives an empty map, not an error (Kubernetes' mapper with a default in
    dynamic-resource-allocation/cel/compile.go), so that
    `device.attributes["other.com"].x` fails with "no such key: x" and
    `has(device.attributes["other.com"].x)` is false. `"other.com" in
    device.attributes`, iteration and size() see only the domains that exist."""

    __slots__ = ("_domains",)

    def __init__(self, domains: Mapping[str, object]) -> None:
        self._domains = domains

    def lookup(self, domain: object) -> object:
        if type(domain) is not str:
            return EMPTY_MAP
        found = self._domains.get(domain)
        return EMPTY_MAP if found is None else found

    def __getitem__(self, domain: str) -> object:
        return self._domains[domain]

    def __iter__(self) -> Iterator[str]:
        return iter(self._domains)

    def __len__(self) -> int:
        return len(self._domains)

    def __contains__(self, domain: object) -> bool:
        return type(domain) is str and domain in self._domains
