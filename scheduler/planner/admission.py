"""A member's inter-pod constraints (required affinity, anti-affinity, hard topology
spread) as a test of nodes during its pick, in the attempt so far."""

from __future__ import annotations

from cache.pod import PodInfo
from cache.snapshot import PlanningView
from policies.pod_constraints import ConstraintAttempt


class Admission:
    """Whether a node passes a member's inter-pod constraints in the attempt so far;
    remembers whether it refused any (what another order of placement might change).
    Picks ask it only about a node that would beat their best so far: most candidates
    never need the question."""

    __slots__ = ("check_affinity", "pod", "refused", "state", "view")

    refused: set[str]

    def __init__(
        self, state: ConstraintAttempt, pod: PodInfo, view: PlanningView, check_affinity: bool
    ) -> None:
        self.state = state
        self.pod = pod
        self.view = view
        # False while the member's required affinity to fellow members is deferred
        # (the "affinity-anchors-first" attempt).
        self.check_affinity = check_affinity
        self.refused = set()

    def __call__(self, name: str) -> bool:
        reason = self.state.filter(self.pod, self.view.node(name), self.check_affinity)
        if reason is None:
            return True
        self.refused.add(reason)
        return False
