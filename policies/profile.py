"""A scheduling profile: which filters, which device chooser, which scores with what
weights. `scheduler.process.config` builds one from the operator's YAML; the planner reads it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from cache.node import NodeInfo
from policies.cpu_bound import LearnedCpuBound
from policies.devices import TopologyChooser
from policies.filters import default_filters
from policies.interface import DeviceChooser, Filter, NodePreference, Score
from policies.model_reserve import LearnedModelReserve, ModelReserve
from policies.scores.fill_fragmentation import FillFragmentation
from policies.scores.fragmentation import Fragmentation, OnlineWorkload, WorkloadProvider
from policies.scores.gpu_topology import GpuTopology
from policies.scores.least_allocated import LeastAllocated
from policies.scores.most_allocated import MostAllocated
from policies.scores.network_topology import NetworkTopology
from policies.scores.node_affinity import PreferredNodeAffinity
from policies.scores.share_completion import LearnedShareCompletion
from policies.scores.taint_toleration import PreferNoScheduleTaints
from policies.scores.truncated import Truncated
from policies.whole_node_reserve import (
    MEASURED_MARGIN,
    LearnedWholeNodeReserve,
    ReserveSource,
    WholeNodeReserve,
)

DEFAULT_CANDIDATE_LIMIT = 128
DEFAULT_TOPOLOGY_KEYS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")


@dataclass(frozen=True)
class Profile:
    filters: Sequence[Filter]
    chooser: DeviceChooser
    # Scores of a (pod, node, devices) choice alone; the planner caches them per node
    # state. Weighted: the planner maximises sum(weight x score).
    node_scores: Sequence[tuple[Score, float]] = ()
    # Scores that also read where the gang's other members went (network topology);
    # evaluated afresh for every member.
    gang_scores: Sequence[tuple[Score, float]] = ()
    # Label keys of the network hierarchy, broadest first; a gang prefers few domains.
    topology_keys: tuple[str, ...] = DEFAULT_TOPOLOGY_KEYS
    # Feasible nodes looked at per member shape, as kube-scheduler's
    # percentageOfNodesToScore bounds its work; 0 means every node. Nodes come from
    # the free-capacity index best first, so the bound costs little placement quality.
    candidate_limit: int = DEFAULT_CANDIDATE_LIMIT
    # Tie-break between equal totals: the lower rank wins (the paper's simulator ranks
    # nodes at random from its seed). None: the candidate walk's order decides.
    node_rank: Mapping[str, int] | None = None
    # The workload the fragmentation scores judge against; an OnlineWorkload is fed
    # every pending pod by the scheduling core.
    workload: WorkloadProvider | None = None
    # Weights of the inter-pod scores (preferred pod affinity and anti-affinity,
    # ScheduleAnyway spread constraints), each 0..100 like the node scores; 2 as in
    # kube-scheduler's default profile, where resource scores weigh 1. They score only
    # pods that carry such terms (or that running pods' terms select).
    pod_affinity_weight: float = 2.0
    topology_spread_weight: float = 2.0
    # A key equal for two nodes (or one node at two moments) that every filter and node
    # score answers alike for any pod of one shape, or None (nodes are told apart by
    # name and generation). With it the planner's rankings evaluate each (shape, node
    # state) once however many nodes share it: a replay of 10^4 pods on 10^3 nodes
    # whose nodes differ only in name. The caller vouches that nothing read by its
    # filters and scores is left out of the key.
    node_state: Callable[[NodeInfo], Hashable] | None = None
    # A cluster-level preference among the nodes the scores rank (policies/interface.py
    # NodePreference; e.g. policies/model_reserve.py): the best ranked node it admits
    # wins, else the best ranked node. None: the ranking alone decides. It orders each
    # member's node in the score-driven attempts; which topology domain a gang tries
    # first is not its call.
    preference: NodePreference | None = None
    # A reserve of whole nodes for the largest request (policies/whole_node_reserve.py):
    # the planner picks, among the nodes its scores rank, the best one that leaves
    # every short class its nodes (when none does, what the reserve's last resort
    # allows). None: no reserve. A fixed WholeNodeReserve (the simulator's, from the
    # trace), or a LearnedWholeNodeReserve (the Kubernetes `fgd-complete-reserve`).
    whole_node_reserve: ReserveSource | None = None
    # Where the learnt workload runs the cluster out of CPU before GPU, the profile to
    # plan with instead (policies/cpu_bound.py): `fgd-complete-reserve` steps aside for
    # FGD's score alone. None: never.
    step_aside: LearnedCpuBound | None = None

    @property
    def memoizable(self) -> bool:
        """Whether node scores depend only on (pod shape, node state), so that answers
        may be kept across planning calls (a random score may not)."""
        return all(getattr(score, "memoizable", True) for score, _ in self.node_scores)

    def learning_step(self) -> tuple[int, ...]:
        """Where the node scores learnt from the pods seen stand (each rebuilt in steps,
        policies/scores/fragmentation.py `rebuild_due`): answers a planner keeps are
        valid while it stays the same. () for scores that learn nothing."""
        steps = []
        for score, _ in self.node_scores:
            step = getattr(score, "learning_step", None)
            if step is not None:
                steps.append(int(step()))
        return tuple(steps)

    @property
    def prefers_tight(self) -> bool:
        """Walk the capacity index from the tightest fit unless spreading weighs more."""
        tight = sum(w for s, w in self.node_scores if s.candidate_order == "tight")
        roomy = sum(w for s, w in self.node_scores if s.candidate_order == "roomy")
        return tight >= roomy


# What the pod's author asked for softly (preferred node affinity, PreferNoSchedule
# taints), with kube-scheduler's default weights (NodeAffinity 2, TaintToleration 3
# against NodeResourcesFit 1): a stated preference outweighs packing, as it does
# there. Pods and nodes without them score alike everywhere, so the policies'
# placements are unchanged for them (the simulator's traces have none).
USER_PREFERENCES: dict[str, float] = {"node-affinity": 2.0, "taint-toleration": 3.0}

# Named policies: node scores and their weights. "binpack" is the default: packing
# keeps whole nodes and well-joined GPU sets free for the big gangs that need them.
POLICIES: dict[str, dict[str, float]] = {
    "binpack": {"most-allocated": 1.0, "gpu-topology": 1.0, **USER_PREFERENCES},
    "spread": {"least-allocated": 1.0, "gpu-topology": 1.0, **USER_PREFERENCES},
    # FGD's integer score, ties broken by fill fragmentation: what the openb
    # experiment measured best (docs/benchmarks.md); the small weight keeps it a tie-break.
    "fgd": {"fragmentation": 1.0, "fill-fragmentation": 0.001, **USER_PREFERENCES},
    # As fgd, FGD's ties broken first by share completion (what the open holes of
    # shared devices will waste), then by fill fragmentation: the simulator's
    # fgd-complete without its whole-node tie-break (docs/policies.md).
    "fgd-complete": {
        "fragmentation": 1.0,
        "share-completion": 0.001,
        "fill-fragmentation": 0.000001,
        **USER_PREFERENCES,
    },
    # fgd-complete, each pod placed where it leaves the nodes that the largest
    # whole-GPU requests seen so far are expected to need (policies/whole_node_reserve.py)
    # and, for pods free to run on any GPU model, off the models that pods pinned to
    # them are expected to need (policies/model_reserve.py): the simulator's
    # fgd-complete-reserve, learnt online (RESERVING_POLICIES, docs/policies.md).
    "fgd-complete-reserve": {
        "fragmentation": 1.0,
        "share-completion": 0.001,
        "fill-fragmentation": 0.000001,
        **USER_PREFERENCES,
    },
}

# Named policies that keep a reserve of whole nodes and a reserve per GPU model, both
# learnt from the pods seen. The whole-node reserve's last resort is "any": when every
# node that fits a pod would break the reserve, the pod still goes to the best of them;
# the model reserve is a preference, which never makes a pod fail either. A learnt
# estimate, which tenants' own pods shape, never holds back a pod that fits (the
# simulator's "no-stranding" placed the same on the openb default trace,
# docs/benchmarks.md).
RESERVING_POLICIES = frozenset({"fgd-complete-reserve"})


def score_plugin(name: str, workload: WorkloadProvider) -> Score:
    """A node score by its configuration name. "fragmentation" is FGD's score as the
    paper's simulator reads it, an integer: the exact float ranks worse (the openb
    experiment in docs/benchmarks.md)."""
    if name == "most-allocated":
        return MostAllocated()
    if name == "least-allocated":
        return LeastAllocated()
    if name == "gpu-topology":
        return GpuTopology()
    if name == "fragmentation":
        return Truncated(Fragmentation(workload))
    if name == "fill-fragmentation":
        return FillFragmentation(workload)
    if name == "share-completion":
        return LearnedShareCompletion(workload)
    if name == "node-affinity":
        return PreferredNodeAffinity()
    if name == "taint-toleration":
        return PreferNoScheduleTaints()
    raise ValueError(
        f"unknown score {name!r}; known: fill-fragmentation, fragmentation, gpu-topology, "
        "least-allocated, most-allocated, node-affinity, share-completion, taint-toleration"
    )


def build_profile(
    policy: str = "binpack",
    *,
    weights: Mapping[str, float] | None = None,
    topology_keys: Sequence[str] = DEFAULT_TOPOLOGY_KEYS,
    network_weight: float = 1.0,
    candidate_limit: int = DEFAULT_CANDIDATE_LIMIT,
    workload: WorkloadProvider | None = None,
    pod_affinity_weight: float = 2.0,
    topology_spread_weight: float = 2.0,
) -> Profile:
    """A profile from a named policy, or from explicit score weights when given.

    `workload` feeds the fragmentation score (a TargetWorkload from history, or an
    OnlineWorkload learning from the pods seen); without one it learns online.
    """
    if weights is None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; known: {', '.join(sorted(POLICIES))}")
        weights = POLICIES[policy]
    for name, weight in weights.items():
        if not weight >= 0:
            raise ValueError(f"score {name}: weight must be a number >= 0, got {weight!r}")
    if candidate_limit < 0:
        raise ValueError(f"candidate limit must be >= 0 (0 = all nodes), got {candidate_limit}")
    shared = workload if workload is not None else OnlineWorkload()
    reserve: ReserveSource | None = None
    preference: NodePreference | None = None
    if policy in RESERVING_POLICIES:
        # Learnt like the scores: online, or from a fixed workload's shares.
        if isinstance(shared, OnlineWorkload):
            reserve = LearnedWholeNodeReserve(shared, "any", MEASURED_MARGIN)
            preference = LearnedModelReserve(shared)
        else:
            shares = shared.current().shares
            reserve = WholeNodeReserve.from_shape_counts(shares, "any", MEASURED_MARGIN)
            preference = ModelReserve(shares)
    node_scores = [(score_plugin(name, shared), float(w)) for name, w in weights.items() if w]
    gang_scores: list[tuple[Score, float]] = []
    if topology_keys and network_weight:
        gang_scores.append((NetworkTopology(topology_keys), float(network_weight)))
    step_aside: LearnedCpuBound | None = None
    if policy in RESERVING_POLICIES and isinstance(shared, OnlineWorkload):
        # As the simulator's: where CPU runs out first, the `fgd` policy's choice, no
        # share completion, no reserve (issue 32). Its fill-fragmentation tie-break is
        # kept: without the simulator's random ranks, ties otherwise go to the walk's
        # order, which lost 1.3 points on a CPU-heavy cut (docs/decisions.md).
        fallback = build_profile(
            "fgd",
            topology_keys=topology_keys,
            network_weight=network_weight,
            candidate_limit=candidate_limit,
            workload=shared,
            pod_affinity_weight=pod_affinity_weight,
            topology_spread_weight=topology_spread_weight,
        )
        step_aside = LearnedCpuBound(shared, fallback)
    return Profile(
        filters=default_filters(),
        chooser=TopologyChooser(),
        node_scores=tuple(node_scores),
        gang_scores=tuple(gang_scores),
        topology_keys=tuple(topology_keys),
        candidate_limit=candidate_limit,
        workload=shared,
        pod_affinity_weight=pod_affinity_weight,
        topology_spread_weight=topology_spread_weight,
        preference=preference,
        whole_node_reserve=reserve,
        step_aside=step_aside,
    )
