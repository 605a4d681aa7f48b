"""Why a pod fits nowhere, in kube-scheduler's FitError words.

Each node is charged to the first filter it fails, so the histogram counts every node
once and reads like kube-scheduler's: "0/12 nodes are available: 8 Insufficient
nvidia.com/gpu, 4 node(s) didn't match GPU type A100."
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Collection, Hashable, Iterable, Sequence

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


# Answers about nodes that are gone kept beyond twice the nodes present.
_GONE_KEPT = 64


class FilterMemo:
    """First-failure answers per pod shape and node generation, kept across planning
    calls. A node whose generation has not moved fails (or passes) a shape exactly as
    it did last time, so a diagnosis over 5,000 nodes becomes 5,000 look-ups once the
    shape has been seen. Only nodes as the cache has them may be asked: a node
    changed by a tentative placement keeps its generation, and is filtered directly.

    A filter whose answer rests on what the pod's signature leaves out
    (`kept_by_signature = False`: DynamicResources reads the pod's DRA reach, new
    with every gang that takes devices, `PodInfo.filter_signature`) is asked afresh
    each time, in its place in the order: the table keeps, per node, which of the
    other filters fails first, so the answer is the one all the filters give in order.
    """

    def __init__(self, filters: Sequence[Filter], max_shapes: int = 32) -> None:
        self.filters = filters
        self.max_shapes = max_shapes
        self._kept = tuple(f for f in filters if getattr(f, "kept_by_signature", True))
        # Each filter asked afresh, with how many kept filters come before it.
        self._fresh = tuple(
            (sum(1 for f in filters[:at] if getattr(f, "kept_by_signature", True)), check)
            for at, check in enumerate(filters)
            if not getattr(check, "kept_by_signature", True)
        )
        self._tables: OrderedDict[Hashable, dict[str, tuple[int, int, str | None]]] = OrderedDict()

    def for_shape(
        self, signature: Hashable, pod: PodInfo, nodes: Collection[str] | None = None
    ) -> ShapeMemo:
        """The answers for one shape (`pod` stands for every pod of that signature,
        `PodInfo.filter_signature`, but for what the fresh filters read).
        `nodes`, the names present now, lets the answers about nodes that are gone be
        forgotten once they outnumber the present ones (nodes with unique names come
        and go all day)."""
        table = self._tables.get(signature)
        if table is None:
            table = self._tables[signature] = {}
            if len(self._tables) > self.max_shapes:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(signature)
            if nodes is not None and len(table) > 2 * len(nodes) + _GONE_KEPT:
                for name in [name for name in table if name not in nodes]:
                    del table[name]
        return ShapeMemo(self._kept, self._fresh, pod, table)


class ShapeMemo:
    __slots__ = ("_table", "filters", "fresh", "pod")

    def __init__(
        self,
        filters: Sequence[Filter],
        fresh: Sequence[tuple[int, Filter]],
        pod: PodInfo,
        table: dict[str, tuple[int, int, str | None]],
    ) -> None:
        self.filters = filters
        self.fresh = fresh
        self.pod = pod
        self._table = table

    def first_failure(self, node: NodeInfo) -> str | None:
        known = self._table.get(node.name)
        if known is not None and known[0] == node.generation:
            _, failed_at, reason = known
        else:
            failed_at, reason = self._first_kept_failure(node)
            self._table[node.name] = (node.generation, failed_at, reason)
        for before, check in self.fresh:
            if before > failed_at:
                break  # after the kept filter that fails: never reached
            fresh_reason = check.filter(self.pod, node)
            if fresh_reason is not None:
                return fresh_reason
        return reason

    def _first_kept_failure(self, node: NodeInfo) -> tuple[int, str | None]:
        """Which kept filter fails first (its index, or their number when none does)
        and its reason."""
        for at, check in enumerate(self.filters):
            reason = check.filter(self.pod, node)
            if reason is not None:
                return at, reason
        return len(self.filters), None
