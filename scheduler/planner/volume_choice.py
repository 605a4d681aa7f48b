"""Volumes as a kind of member choice (member_choice.py): each member's unbound
WaitForFirstConsumer claims get a PV or provisioning on its node, never one PV to two
members, and CSI attach limits count the volumes the gang's members put on a node
(policies/filters/volume_binding.py decides; this adapts it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from functools import partial

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.filters.volume_binding import BIND_CONFLICT, GangVolumes, VolumeAssignment
from scheduler.planner.member_choice import Take
from scheduler.planner.result import Plan


class VolumeChoiceKind:
    """The gang's volume needs (GangVolumes), for one planning call."""

    __slots__ = ("volumes",)

    def __init__(self, volumes: GangVolumes) -> None:
        self.volumes = volumes

    def concerns(self, uid: str) -> bool:
        return self.volumes.concerns(uid)

    def start(self) -> VolumeChoices:
        return VolumeChoices(VolumeAssignment(self.volumes))

    def unmet(self, nodes: int, gang_key: str) -> str:
        return (
            f"0/{nodes} nodes are available: {nodes} {BIND_CONFLICT} or exceed max "
            f"volume count (the matching PersistentVolumes or the nodes' volume "
            f"attach limits were taken by other members of gang {gang_key})"
        )

    def detail(self, uid: str, reasons: Collection[str]) -> str:
        return ""


class VolumeChoices:
    """One attempt's volumes (VolumeAssignment)."""

    __slots__ = ("assignment",)

    def __init__(self, assignment: VolumeAssignment) -> None:
        self.assignment = assignment

    def offer(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        offer = self.assignment.offer(pod, node)
        return None if offer is None else partial(self.assignment.take, offer)

    def revisit(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        return None  # a PV one member took is never worth moving: another PV is as good

    def into_plan(self, plan: Plan, left_out: Collection[str]) -> Plan:
        """The plan with what PreBind writes for the placed members' claims."""
        by_pod = self.assignment.by_pod
        volumes = {uid: claims for uid, claims in by_pod.items() if uid not in left_out}
        return dataclasses.replace(plan, volumes=volumes)
