"""Gang definitions from APIs other than scheduler-plugins' PodGroup: Volcano's PodGroup
and Kubernetes' own (scheduling.k8s.io). Kept apart from ClusterCache.podgroups(), which
holds scheduler-plugins' PodGroups only (the ones whose status this scheduler writes),
so that a deletion in one API never removes a same-named object of another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cache.cluster import EventType, is_older
from cache.podgroup import PodGroupInfo

GroupParser = Callable[[Mapping[str, Any]], PodGroupInfo]


class GangGroupStore:
    """PodGroups by API group, then "ns/name"; applied in watch-stream order."""

    def __init__(self) -> None:
        self._by_api: dict[str, dict[str, PodGroupInfo]] = {}

    def apply(
        self, parse: GroupParser, event: EventType | str, obj: Mapping[str, Any]
    ) -> tuple[PodGroupInfo, PodGroupInfo | None]:
        """The object as read, and the record now held for it (None when it is gone)."""
        group = parse(obj)
        held = self._by_api.setdefault(group.api, {})
        old = held.get(group.key)
        if old is not None and is_older(old.resource_version, group.resource_version):
            return group, old
        if event == EventType.DELETED:
            held.pop(group.key, None)
            return group, None
        held[group.key] = group
        return group, group

    def remove(self, api: str, key: str) -> None:
        """Forget one object (a relist did not list it)."""
        self._by_api.get(api, {}).pop(key, None)

    def of(self, api: str) -> Mapping[str, PodGroupInfo]:
        return self._by_api.get(api, {})
