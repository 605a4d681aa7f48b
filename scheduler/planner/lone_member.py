"""The shortcuts for a gang with one plain member to place (every pod of a trace
replay, every one-pod gang of a cluster): what the "best-score" attempt would decide,
without an attempt's bookkeeping. The attempts stay the reference
(tests/scheduler/test_planner_lone_member.py and test_planner_ranking.py compare).

- Exhaustive mode: the head of the shape's ranking (ranking.py).
- Bounded mode: one walk of the capacity index that collects the candidates and picks
  among them at once; with a tight walk on a cache's snapshot, from the shape's window
  (window.py), which pays only for the nodes changed since.
"""

from __future__ import annotations

from cache.cluster import Placement
from cache.gpu import PRODUCT_LABEL
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU
from cache.snapshot import PlanningView
from policies.filters.gpu_fit import gpu_index_request
from policies.gpu_models import allowed_models
from scheduler.planner.node_choice import NodeChoice, Shape, kept_choice
from scheduler.planner.picks import Found
from scheduler.planner.reserve import NodeTest, reserve_tests
from scheduler.planner.result import Plan
from scheduler.planner.search import GangSearch
from scheduler.planner.window import Window


def ranking_alone(search: GangSearch) -> bool:
    """Whether the "best-score" attempt needs nothing but the exhaustive ranking:
    one plain member (no inter-pod constraint or score, no other kind of choice), which
    the ranking's head decides, so that its candidate list (every feasible node) is
    only made if a later attempt must walk it. A replay's every pod is one."""
    return (
        len(search.members) == 1
        and not search.kinds
        and not search.constrained
        and not search.scored
        and not search.topology_bound
    )


def plan_ranked_member(search: GangSearch) -> Plan | None:
    """What the "best-score" attempt decides for a lone plain member in exhaustive
    mode: the ranking's head, the gang having changed no node yet. None when the
    ranking is empty, or when the gang's roles or refused members need the general
    path, which then says why."""
    gang, planner = search.gang, search.planner
    if (
        search.refused
        or gang.role_needed
        or search.profile.preference is not None
        or planner.reserving(search.snapshot)
    ):
        return None  # the general path says why, or applies the preference or reserve
    shape = next(iter(search.shapes.values()))
    ranking = planner.ranking(shape.pod, search.snapshot)
    head = ranking.head()
    if head is None or gang.roles_missing(shape.members):
        return None
    name = head[2]
    choice = ranking.choices[name]
    return _plan(search, shape, name, choice)


def lone_shape(search: GangSearch) -> Shape | None:
    """The shape of a gang with one plain member to place (a one-pod gang, or the last
    member of a partly bound one), when `plan_lone_member` applies: bounded mode with
    kept choices, no inter-pod constraint or score, no other kind of choice, no role
    minimum and no refused member (whose reason the general path words); with a node
    preference or whole-node reserve, only from the window, whose pick applies them."""
    if len(search.members) != 1 or search.refused or search.kinds:
        return None
    if search.constrained or search.scored or search.gang.role_needed:
        return None
    if search.topology_bound:
        return None
    planner, profile = search.planner, search.profile
    if planner.exhaustive or not profile.candidate_limit:
        return None
    if not _window_applies(search) and (
        profile.preference is not None or planner.reserving(search.snapshot)
    ):
        return None  # the general path's pick applies them; the window's does too
    shape = next(iter(search.shapes.values()))
    shape.kept = planner.kept_choices(shape.pod, search.snapshot)
    return shape if shape.kept is not None else None


def plan_lone_member(search: GangSearch, shape: Shape) -> Plan | None:
    """What candidates.collect_candidates and then the "best-score" attempt decide for
    a lone member, in one walk of the capacity index: the same candidates (the first
    `candidate_limit` nodes passing the filters), the same kept choices, the same
    winner (best weighted score, then lower rank, then the earlier candidate). A
    one-pod gang pays this walk on every cycle, so it is written for speed. None when
    no candidate fits: the general path then explains why, with the candidates
    collected here."""
    found = _from_window(search, shape) if _window_applies(search) else _by_walk(search, shape)
    if found is None:
        return None
    name, choice = found
    return _plan(search, shape, name, choice)


def _plan(search: GangSearch, shape: Shape, name: str, choice: NodeChoice) -> Plan:
    return Plan(
        gang_key=search.gang.key,
        placements=(Placement(shape.pod.uid, name, choice.shares),),
        score=0.0 + choice.score,
        attempt="best-score",
    )


def _window_applies(search: GangSearch) -> bool:
    """Whether a lone member is planned from its shape's window: a tight walk, and a
    snapshot kept by a cache (whose change log catches the window up)."""
    return search.profile.prefers_tight and search.snapshot.generation > 0


def _by_walk(search: GangSearch, shape: Shape) -> Found | None:
    """The lone member's candidates and best choice from a walk of the index."""
    pod = shape.pod
    kept = shape.kept
    assert kept is not None
    profile, snapshot = search.profile, search.snapshot
    limit = max(profile.candidate_limit, 2)
    models = allowed_models(pod)
    nodes = snapshot.nodes
    memo = search.memo.for_shape(pod.filter_signature(), pod, nodes.keys())
    reach = pod.dra_reach
    candidates = shape.candidates
    ranks = profile.node_rank
    best_name = ""
    best_choice: NodeChoice | None = None
    best_key = (float("inf"), 0)
    for name in snapshot.candidates(
        *gpu_index_request(pod), pod.requests.get(CPU, 0), profile.prefers_tight
    ):
        node = nodes[name]
        if models is not None and node.labels.get(PRODUCT_LABEL) not in models:
            continue
        generation = node.generation
        entry = kept.get(name)
        if entry is not None and generation and entry[0] == generation and reach is None:
            # Kept choices are only ever stored for nodes that passed the filters at
            # that generation (candidates): no need to ask the memo again. Not for a
            # pod with a DRA reach: choices are shared by pods of other reaches
            # (node_choice.KeptChoices).
            choice = entry[1]
        else:
            if memo.first_failure(node) is not None:
                continue
            choice = kept_choice(profile, kept, pod, node)
        candidates.append(name)
        if choice.feasible:
            key = (-choice.score, ranks.get(name, 0) if ranks is not None else 0)
            if key < best_key:
                best_name, best_choice, best_key = name, choice, key
        if len(candidates) >= limit:
            break
    return None if best_choice is None else (best_name, best_choice)


def _from_window(search: GangSearch, shape: Shape) -> Found | None:
    """The lone member's best choice from its shape's window, built on first use and
    then caught up with the nodes changed since."""
    pod = shape.pod
    kept = shape.kept
    assert kept is not None
    profile, snapshot = search.profile, search.snapshot
    window = search.planner.window(pod, snapshot)
    models = allowed_models(pod)
    memo = search.memo.for_shape(pod.filter_signature(), pod, snapshot.nodes.keys())

    def choose(node: NodeInfo) -> NodeChoice | None:
        if models is not None and node.labels.get(PRODUCT_LABEL) not in models:
            return None
        if memo.first_failure(node) is not None:
            return None
        return kept_choice(profile, kept, pod, node)

    window.catch_up(
        snapshot,
        (*gpu_index_request(pod), pod.requests.get(CPU, 0)),
        max(profile.candidate_limit, 2),
        choose,
        search.planner.rank,
    )
    found = _pick_from_window(search, pod, window)
    if found is None:
        shape.candidates = [name for _, name in window.keys]
    return found


def _pick_from_window(search: GangSearch, pod: PodInfo, window: Window) -> Found | None:
    """What the "best-score" attempt's pick decides among the window's nodes: the best
    (score, then rank, then walk order) of the nodes Profile.preference admits, else of
    all, first among those that keep the whole-node reserve, then among those its last
    resort allows (search.GangSearch._pick_within_reserve)."""
    best = window.best
    prefer = search.picks.preference(pod)
    guard = None
    if search.profile.whole_node_reserve is not None:
        view = PlanningView(search.snapshot, search.versions)
        guard = search.guards.guard(pod, view)
    if guard is None and prefer is None:
        if not best:
            return None
        _, _, (_, name) = best[0]
        return name, window.entries[name][1]
    tests: list[NodeTest | None] = [None]
    if guard is not None:
        tests = list(reserve_tests(guard, view))
    for test in tests:
        fallback: Found | None = None
        for _, _, (_, name) in best:
            choice = window.entries[name][1]
            if test is not None and not test(name, choice):
                continue
            if prefer is None or prefer(name):
                return name, choice
            if fallback is None:  # the best node, kept in case none is preferred
                fallback = (name, choice)
        if fallback is not None:
            return fallback
    return None
