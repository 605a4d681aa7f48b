"""Inter-pod constraints of a whole gang: required pod affinity and anti-affinity and
DoNotSchedule topology spread, judged against the running pods AND the gang's own
members placed earlier in the same plan.

Unlike the node filters (policies/filters), these depend on where other pods run, so
they are not memoised per node: `GangConstraints` computes, once per plan, the state
of each member class (members alike in namespace, labels and terms) from the
snapshot's pod index; each planning attempt takes a `ConstraintAttempt`, a copy that
every placed member updates (a member placed is a pod on its node, with its labels,
for every class).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import TERM_KINDS, string_labels
from cache.snapshot import Snapshot
from cache.terms import SpreadConstraint
from policies.filters.inter_pod_affinity import InterPodAffinityState
from policies.filters.pod_topology_spread import (
    PodTopologySpreadState,
    domains_signature,
    eligible_domains,
    hard_constraints,
)
from policies.scores.inter_pod_affinity import PreferredAffinityState
from policies.scores.pod_topology_spread import SoftSpreadState

_ANY_TERM = frozenset(TERM_KINDS)


def constraint_class(pod: PodInfo) -> Hashable:
    """Members with equal keys are judged alike by every inter-pod constraint."""
    return (
        pod.namespace,
        frozenset(string_labels(pod)),
        pod.pod_affinity,
        pod.spread,
        tuple(sorted(pod.node_selector.items())),
        pod.required_affinity,
        pod.tolerations,
    )


class DomainCache:
    """Eligible spread domains per (constraints, node inclusion) signature, kept while
    the snapshot's node labels and taints stay as they were (a pass over every node
    otherwise)."""

    def __init__(self, max_entries: int = 64) -> None:
        self._snapshot: Snapshot | None = None
        self._generation = -1
        self._entries: dict[Hashable, tuple[frozenset[str], ...]] = {}
        self.max_entries = max_entries

    def get(
        self, snapshot: Snapshot, pod: PodInfo, constraints: tuple[SpreadConstraint, ...]
    ) -> tuple[frozenset[str], ...]:
        if snapshot is not self._snapshot or snapshot.labels_generation != self._generation:
            self._entries.clear()
            self._snapshot = snapshot
            self._generation = snapshot.labels_generation
        signature = domains_signature(pod, constraints)
        found = self._entries.get(signature)
        if found is None:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            found = self._entries[signature] = eligible_domains(
                pod, constraints, snapshot.nodes.values()
            )
        return found


@dataclass(slots=True)
class MemberConstraints:
    """The inter-pod state of one member class: what filters it (required terms,
    DoNotSchedule) and what scores it (preferred terms, ScheduleAnyway)."""

    affinity: InterPodAffinityState | None
    spread: PodTopologySpreadState | None
    preferred: PreferredAffinityState | None = None
    soft_spread: SoftSpreadState | None = None

    def clone(self) -> MemberConstraints:
        return MemberConstraints(
            self.affinity.clone() if self.affinity else None,
            self.spread.clone() if self.spread else None,
            self.preferred.clone() if self.preferred else None,
            self.soft_spread.clone() if self.soft_spread else None,
        )

    @property
    def filters(self) -> bool:
        return self.affinity is not None or self.spread is not None

    @property
    def scores(self) -> bool:
        return self.preferred is not None or self.soft_spread is not None

    def filter(self, node: NodeInfo, check_affinity: bool = True) -> str | None:
        # kube-scheduler runs PodTopologySpread before InterPodAffinity.
        if self.spread is not None:
            reason = self.spread.filter(node)
            if reason is not None:
                return reason
        if self.affinity is not None:
            return self.affinity.filter(node, check_affinity)
        return None

    def add(self, other: PodInfo, node: NodeInfo, delta: int) -> None:
        if self.spread is not None:
            self.spread.add(other, node, delta)
        if self.affinity is not None:
            self.affinity.add(other, node, delta)
        if self.preferred is not None:
            self.preferred.add(other, node, delta)
        if self.soft_spread is not None:
            self.soft_spread.add(other, node, delta)


class GangConstraints:
    """The classes of a gang's members that some inter-pod constraint applies to."""

    def __init__(
        self, members: Sequence[PodInfo], snapshot: Snapshot, domains: DomainCache
    ) -> None:
        self.classes: dict[Hashable, MemberConstraints] = {}
        self.class_of: dict[str, Hashable] = {}
        index = snapshot.pods
        # A member's required anti-affinity can reach any other member once placed.
        gang_has_anti = any(
            p.pod_affinity is not None and p.pod_affinity.required_anti for p in members
        )
        # Likewise members' terms that score others: affinity (required ones count
        # hardPodAffinityWeight) and preferred anti-affinity.
        gang_has_terms = any(
            p.pod_affinity is not None
            and (
                p.pod_affinity.required or p.pod_affinity.preferred or p.pod_affinity.preferred_anti
            )
            for p in members
        )
        existing_terms = index.has_terms(_ANY_TERM)
        if not (existing_terms or any(p.has_pod_constraints for p in members)):
            return
        for pod in members:
            key = constraint_class(pod)
            self.class_of[pod.uid] = key
            if key in self.classes:
                continue
            affinity = InterPodAffinityState.compute(pod, index, snapshot.nodes)
            hard = hard_constraints(pod)
            spread = None
            if hard:
                spread = PodTopologySpreadState.compute(
                    pod, hard, domains.get(snapshot, pod, hard), index, snapshot.nodes
                )
            # A member without terms of its own still needs the state when another
            # member's (or a running pod's) anti-affinity may select it.
            needed = affinity.active or gang_has_anti
            preferred = PreferredAffinityState.compute(pod, index, snapshot.nodes)
            self.classes[key] = MemberConstraints(
                affinity if needed else None,
                spread,
                preferred if preferred.active or gang_has_terms else None,
                SoftSpreadState.compute(pod, index, snapshot.nodes),
            )

    def pods_constrained(self) -> frozenset[str]:
        """Uids of members some required inter-pod constraint applies to."""
        return frozenset(uid for uid, key in self.class_of.items() if self.classes[key].filters)

    def pods_scored(self) -> frozenset[str]:
        """Uids of members some preferred term or ScheduleAnyway constraint scores."""
        return frozenset(uid for uid, key in self.class_of.items() if self.classes[key].scores)

    def one_domain_unwanted(self, members: Sequence[PodInfo], narrower: Sequence[str]) -> bool:
        """Whether the whole gang inside one domain of a level of the network hierarchy
        goes against what a member asks: anti-affinity (required or preferred) between
        members, or a spread constraint (DoNotSchedule or ScheduleAnyway) with more
        matching members than maxSkew, whose topology key is not one of the levels
        `narrower` than that one (a key of that level or a broader one is one value
        for the whole domain; a key outside the hierarchy may be too). Such a gang is
        not kept in one domain."""
        finer = set(narrower)
        for pod in members:
            fellows = [other for other in members if other.uid != pod.uid]
            terms = pod.pod_affinity
            if terms is not None:
                for term in (*terms.required_anti, *terms.preferred_anti):
                    if term.topology_key not in finer and any(
                        term.matches(o.namespace, o.labels, {}) for o in fellows
                    ):
                        return True
            for constraint in pod.spread:
                if constraint.topology_key in finer:
                    continue
                matching = sum(1 for o in members if constraint.selector.matches(o.labels))
                if matching > constraint.max_skew:
                    return True
        return False

    def anchors(self, members: Sequence[PodInfo]) -> list[PodInfo]:
        """Members whose required affinity selects a fellow member: placed first with
        that affinity deferred, they give the others a place to join (a parameter
        server with affinity to its workers' hosts, say)."""
        found = []
        for pod in members:
            terms = pod.pod_affinity
            if terms is None or not terms.required:
                continue
            for other in members:
                if other.uid != pod.uid and all(
                    t.matches(other.namespace, other.labels, {}) for t in terms.required
                ):
                    found.append(pod)
                    break
        return found

    def start(self) -> ConstraintAttempt:
        return ConstraintAttempt(
            {key: state.clone() for key, state in self.classes.items()}, self.class_of
        )


class ConstraintAttempt:
    """The constraint state of one planning attempt: the snapshot's plus the members
    placed so far in it."""

    def __init__(
        self, classes: dict[Hashable, MemberConstraints], class_of: Mapping[str, Hashable]
    ) -> None:
        self.classes = classes
        self.class_of = class_of
        # uid -> its class's state, resolved once (class keys are costly to hash).
        self._of = {uid: classes[key] for uid, key in class_of.items()}

    def state_of(self, pod: PodInfo) -> MemberConstraints | None:
        return self._of.get(pod.uid)

    def filter(self, pod: PodInfo, node: NodeInfo, check_affinity: bool = True) -> str | None:
        state = self._of.get(pod.uid)
        if state is None:
            return None
        return state.filter(node, check_affinity)

    def excluded_for_good(self, pod: PodInfo, node: NodeInfo) -> str | None:
        """The anti-affinity reason, if any, that keeps `pod` off `node` whatever the
        rest of the gang does (more pods only add exclusions), unlike affinity or
        spread, which fellow members placed elsewhere may yet satisfy."""
        state = self._of.get(pod.uid)
        affinity = state.affinity if state is not None else None
        return affinity.filter(node, check_affinity=False) if affinity is not None else None

    def place(self, pod: PodInfo, node: NodeInfo, delta: int = 1) -> None:
        for state in self.classes.values():
            state.add(pod, node, delta)

    def violations(self, placed: Iterable[tuple[PodInfo, NodeInfo]]) -> dict[str, str]:
        """Members of a finished placement that break a constraint once every other
        member is there too, with the reason: each member is taken out, judged as the
        incoming pod against all the rest, and put back. (Greedy placement judges a
        member only against those placed before it; kube-scheduler would judge the
        gang's last pods against its first ones, and symmetric terms make the first
        ones' placement matter too.)"""
        found: dict[str, str] = {}
        for pod, node in placed:
            state = self._of.get(pod.uid)
            if state is None or not state.filters:
                continue
            self.place(pod, node, -1)
            reason = self.filter(pod, node)
            self.place(pod, node, 1)
            if reason is not None:
                found[pod.uid] = reason
        return found
