"""NodeVolumeLimits (CSI): a node attaches at most `allocatable.count` volumes of a CSI
driver, as its CSINode says (kube-scheduler framework/plugins/nodevolumelimits/csi.go).

A volume is counted once per node however many pods mount it: a bound claim by its
PV's driver and `volumeHandle`; an unbound claim by its class's provisioner (the driver
that will create it) and the claim's own name. The pods counted on a node are those
bound or planned there. A driver without a CSINode entry, or with no count, has no
limit. In-tree volumes (and their CSI migration) are not counted.

`attached_volumes` and `headroom` run once per gang (in the scheduling core, only for
gangs with CSI volumes on drivers that have limits); `NodeVolumeLimits.filter` then
reads the nodes each member's volumes would overflow from the member itself, and
`volume_binding.VolumeAssignment` counts what the gang's own members add to a node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.volumes import VolumeCache

EXCEEDS = "node(s) exceed max volume count"


def pod_csi_volumes(pod: PodInfo, volumes: VolumeCache) -> dict[str, str]:
    """The CSI volumes the pod mounts: unique volume key -> driver."""
    found: dict[str, str] = {}
    for ref in pod.claims:
        claim = volumes.claim(pod.namespace, ref.name)
        if claim is None:
            continue
        if claim.volume_name:
            volume = volumes.volumes.get(claim.volume_name)
            if volume is not None and volume.csi_driver:
                found[f"{volume.csi_driver}/{volume.csi_handle}"] = volume.csi_driver
            continue
        klass = volumes.classes.get(claim.storage_class or "")
        if klass is not None and klass.provisions:
            found[f"{klass.provisioner}/claim:{claim.key}"] = klass.provisioner
    return found


@dataclass(frozen=True, slots=True)
class NodeVolumeUse:
    """One node's limits (driver -> count) and the volumes attached there per driver."""

    limits: Mapping[str, int]
    attached: Mapping[str, frozenset[str]]

    def overflows(
        self, new: Mapping[str, str], added: Mapping[str, set[str]] | None = None
    ) -> bool:
        """Whether attaching `new` (key -> driver), after `added` (driver -> keys the
        gang's members placed here already), exceeds a limit."""
        adding: dict[str, int] = {}
        for key, driver in new.items():
            if key in self.attached.get(driver, ()) or (added and key in added.get(driver, ())):
                continue
            adding[driver] = adding.get(driver, 0) + 1
        for driver, count in adding.items():
            limit = self.limits.get(driver)
            if limit is None:
                continue
            before = len(self.attached.get(driver, ())) + len(
                added.get(driver, ()) if added else ()
            )
            if before + count > limit:
                return True
        return False


def attached_volumes(
    drivers: set[str],
    volumes: VolumeCache,
    pods_on: Callable[[str], Iterable[PodInfo]],
) -> dict[str, NodeVolumeUse]:
    """For every node whose CSINode limits one of `drivers`: its limits and the
    volumes of those drivers its pods mount."""
    found: dict[str, NodeVolumeUse] = {}
    for name, csinode in volumes.csinodes.items():
        limits = {d: n for d, n in csinode.limits.items() if d in drivers}
        if not limits:
            continue
        attached: dict[str, set[str]] = {}
        for pod in pods_on(name):
            for key, driver in pod_csi_volumes(pod, volumes).items():
                if driver in limits:
                    attached.setdefault(driver, set()).add(key)
        found[name] = NodeVolumeUse(limits, {d: frozenset(k) for d, k in attached.items()})
    return found


def overflowing_nodes(new: Mapping[str, str], use: Mapping[str, NodeVolumeUse]) -> frozenset[str]:
    """The nodes where attaching the pod's volumes `new` alone exceeds a limit."""
    if not new:
        return frozenset()
    return frozenset(name for name, node in use.items() if node.overflows(new))


class NodeVolumeLimits:
    """The pod's CSI volumes fit under the node's attach limits (`volume_limited`: the
    nodes they would overflow, resolved before planning)."""

    name: str = "node-volume-limits"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        if node.name in pod.volume_limited:
            return EXCEEDS
        return None
