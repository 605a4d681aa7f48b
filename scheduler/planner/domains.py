"""The first attempts of a gang of several: the whole gang inside one topology domain
(the gang's preferred levels, else Profile.topology_keys), most specific level first
(one host, then one rack, then one zone), the tightest domains that can hold it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from cache.pod import PodInfo
from policies.capacity import copies_that_fit
from scheduler.planner.search import Attempt, GangSearch


def domain_attempts(
    search: GangSearch,
    order: Sequence[PodInfo],
    keys: Sequence[str] | None = None,
    within: frozenset[str] | None = None,
) -> Iterator[Attempt]:
    """The whole gang inside one domain, most specific level first; at each level the
    two tightest domains that can hold every member (by resources alone). Yields the
    first attempt that places every member, and stops. `keys`: the levels, broadest
    first (None: the profile's); `within`: the nodes the domains are cut to (the
    gang's required domain)."""
    nodes = search.snapshot.nodes
    if keys is None:
        keys = search.profile.topology_keys
    # Shapes by position (their signatures are nested tuples, costly to hash per
    # node); copies per shape and candidate are the same at every level: counted once.
    shapes = list(search.shapes.values())
    wanted = [len(shape.members) for shape in shapes]
    copies_of: list[dict[str, int]] = [{} for _ in shapes]
    for level in reversed(range(len(keys))):
        key = keys[level]
        if (search.constrained or search.scored) and search.constraints.one_domain_unwanted(
            search.members, keys[level + 1 :]
        ):
            continue
        capacity: dict[str, list[int]] = {}
        members_of: dict[str, set[str]] = {}
        for position, shape in enumerate(shapes):
            counted = copies_of[position]
            for name in shape.candidates:
                if within is not None and name not in within:
                    continue
                domain = nodes[name].labels.get(key)
                if domain is None:
                    continue
                copies = counted.get(name)
                if copies is None:
                    copies = counted[name] = copies_that_fit(shape.pod, nodes[name])
                counts = capacity.get(domain)
                if counts is None:
                    counts = capacity[domain] = [0] * len(shapes)
                counts[position] += copies
                members_of.setdefault(domain, set()).add(name)
        fitting = [
            domain
            for domain, counts in capacity.items()
            if all(have >= need for have, need in zip(counts, wanted, strict=True))
        ]
        preference = _preferred_domains(search, order[0], fitting, members_of)
        fitting.sort(key=lambda d: (-preference.get(d, 0), sum(capacity[d]), d))
        for domain in fitting[:2]:
            attempt = search.greedy(
                "domain", order, frozenset(members_of[domain]), search.picks.best_scored
            )
            if len(attempt.placements) == len(search.members):
                yield attempt
                return


def _preferred_domains(
    search: GangSearch, pod: PodInfo, domains: Sequence[str], members_of: dict[str, set[str]]
) -> dict[str, int]:
    """Per domain, the best raw preferred-affinity score of its nodes for `pod` (empty
    when no preferred term concerns the gang): a gang kept in one domain goes to the
    one its members prefer, the tightest among equals."""
    if pod.uid not in search.scored:
        return {}
    state = search.constraints.start().state_of(pod)
    if state is None or state.preferred is None or not state.preferred.scores:
        return {}
    nodes = search.snapshot.nodes
    raw = state.preferred.raw
    return {d: max(raw(nodes[name]) for name in members_of[d]) for d in domains}
