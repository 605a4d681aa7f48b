"""Filters: may this pod go on this node, and if not, why.

`default_filters()` lists them in kube-scheduler's order, cheapest and most decisive
first; a node is charged to the first filter it fails, so the failure histogram
(policies.diagnosis) counts every node once.
"""

from __future__ import annotations

from policies.filters.dynamic_resources import DynamicResources
from policies.filters.gpu_fit import GpuFit
from policies.filters.gpu_type import GpuType
from policies.filters.node_affinity import NodeAffinity
from policies.filters.node_ports import NodePorts
from policies.filters.node_unschedulable import NodeUnschedulable
from policies.filters.node_volume_limits import NodeVolumeLimits
from policies.filters.resource_fit import ResourceFit
from policies.filters.taint_toleration import TaintToleration
from policies.filters.volume_binding import VolumeBinding
from policies.interface import Filter

__all__ = [
    "DynamicResources",
    "GpuFit",
    "GpuType",
    "NodeAffinity",
    "NodePorts",
    "NodeUnschedulable",
    "NodeVolumeLimits",
    "ResourceFit",
    "TaintToleration",
    "VolumeBinding",
    "default_filters",
]


def default_filters() -> list[Filter]:
    return [
        NodeUnschedulable(),
        TaintToleration(),
        GpuType(),
        NodeAffinity(),
        NodePorts(),
        ResourceFit(),
        GpuFit(),
        NodeVolumeLimits(),
        VolumeBinding(),
        DynamicResources(),
    ]
