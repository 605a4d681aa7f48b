"""Why a pod fits nowhere, in kube-scheduler's FitError words.

Each node is charged to the first filter it fails, so the histogram counts every node
once and reads like kube-scheduler's: "0/12 nodes are available: 8 Insufficient
nvidia.com/gpu, 4 node(s) didn't match GPU type A100."
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import Filter

NO_NODES = "0/0 nodes are available: no nodes in the cluster."


def first_failure(filters: Sequence[Filter], pod: PodInfo, node: NodeInfo) -> str | None:
    """The reason of the first filter the node fails; None when it passes them all."""
    for check in filters:
        reason = check.filter(pod, node)
        if reason is not None:
            return reason
    return None


def diagnose(
    filters: Sequence[Filter], pod: PodInfo, nodes: Iterable[NodeInfo]
) -> tuple[int, Counter[str]]:
    """How many nodes the pod fits on, and how many fail for each reason."""
    fits = 0
    reasons: Counter[str] = Counter()
    for node in nodes:
        reason = first_failure(filters, pod, node)
        if reason is None:
            fits += 1
        else:
            reasons[reason] += 1
    return fits, reasons


def summarize(total_nodes: int, reasons: Counter[str]) -> str:
    """kube-scheduler's FitError message. Nodes not counted in `reasons` are the
    available ones (a gang member may fit on some nodes while its gang does not), so
    the message reads "3/12 nodes are available: 9 Insufficient cpu." in that case.
    Reasons are ordered by count, most common first, then alphabetically."""
    if total_nodes <= 0:
        return NO_NODES
    counted = sorted(
        ((count, reason) for reason, count in reasons.items() if count > 0),
        key=lambda item: (-item[0], item[1]),
    )
    failed = sum(count for count, _ in counted)
    available = max(0, total_nodes - failed)
    head = f"{available}/{total_nodes} nodes are available"
    if not counted:
        return head + "."
    return head + ": " + ", ".join(f"{count} {reason}" for count, reason in counted) + "."
