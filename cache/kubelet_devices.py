"""The GPUs the kubelet really gave each pod, as the node agent reports them on its Node.

Where NVIDIA's device plugin serves `nvidia.com/gpu`, the kubelet and that plugin pick a
pod's GPUs, not the scheduler's `gang-scheduler.io/gpu-devices`. The node agent reads
what the kubelet allocated (its pod-resources API) and writes it on its own Node, in
the annotation below: a JSON object, pod uid -> the NVML indices of the GPUs the pod's
containers hold, sorted. The cache then charges those GPUs for the pod instead of the
ones it assigned or inferred (ClusterCache._rebuild_node). A Node, unlike a pod, is not
writable by tenants; the admission policy `gang-scheduler-node-agent` keeps each agent
to its own Node (docs/security.md).

Pure: parsing and formatting only, bounded as every value read from an object is
(cache.limits). A malformed value is a problem of the node and counts for nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cache.limits import MAX_GPUS_PER_NODE, MAX_TOPOLOGY_TEXT, shown

KUBELET_DEVICES_ANNOTATION = "gang-scheduler.io/gpu-kubelet-devices"

# pod uid -> the GPU indices the kubelet gave it.
KubeletDevices = Mapping[str, tuple[int, ...]]


def format_kubelet_devices(devices: KubeletDevices) -> str:
    """The annotation's value: compact JSON, keys and indices sorted, so that an equal
    report is an equal text and the agent writes only when something changed."""
    ordered = {uid: sorted(set(devices[uid])) for uid in sorted(devices)}
    return json.dumps(ordered, separators=(",", ":"))


def parse_kubelet_devices(text: str) -> dict[str, tuple[int, ...]]:
    """The annotation's value read back; ValueError (with a shortened quote) when it is
    not an object of uid -> list of distinct device indices within the bounds."""
    if len(text) > MAX_TOPOLOGY_TEXT:
        raise ValueError(
            f"{KUBELET_DEVICES_ANNOTATION}: longer than {MAX_TOPOLOGY_TEXT} characters"
        )
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{KUBELET_DEVICES_ANNOTATION}: {shown(text)} is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{KUBELET_DEVICES_ANNOTATION}: {shown(text)} is not an object")
    if len(value) > MAX_GPUS_PER_NODE * 16:
        raise ValueError(f"{KUBELET_DEVICES_ANNOTATION}: more pods than a node can hold")
    found: dict[str, tuple[int, ...]] = {}
    for uid, indices in value.items():
        if (
            not isinstance(indices, list)
            or not indices
            or len(indices) > MAX_GPUS_PER_NODE
            or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < MAX_GPUS_PER_NODE
                for i in indices
            )
            or len(set(indices)) != len(indices)
        ):
            raise ValueError(
                f"{KUBELET_DEVICES_ANNOTATION}: pod {shown(uid)} has {shown(indices)}, not a "
                "list of distinct device indices"
            )
        found[str(uid)] = tuple(sorted(indices))
    return found
