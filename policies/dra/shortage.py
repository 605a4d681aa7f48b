"""Whether several pods' claims cannot all be allocated at once, told by counting
devices instead of searching (the planner's revisit, scheduler/planner/dra_choice.py).

A search that moves earlier members to other devices so that one more member fits
enumerates every combination of their allocations before it can say none works: on a
node whose free devices are fewer than the members on it need together, that is
thousands of allocations for a certain no. Each claim allocated takes at least so many
devices (the sum of its requests' counts, the least over a firstAvailable's
sub-requests), distinct ones (no two claims share a device), among the free devices
that fit one of its requests and that its pod's node reaches. So when the pods placed
on one node need more devices than are free and fitting there, or all of them more than
are free anywhere they reach, no search can succeed: `too_few_devices` says so.

It never says so where a search could succeed; where the count says nothing (a request
with admin access, which takes devices in use; a device several claims may share) it
answers False. tests/policies/dra/test_shortage.py checks it against the search.
"""

from __future__ import annotations

from collections.abc import Sequence

from cache.dra.slices import DeviceId
from policies.dra.allocator import ClaimAllocator, PodSearch
from policies.dra.gang import GangMember, Tentative


def too_few_devices(
    allocator: ClaimAllocator, members: Sequence[GangMember], tentative: Tentative
) -> bool:
    """True when `members`, allocated in this order against `tentative` (what other
    members hold), certainly cannot all get their devices; False when they might."""
    allocated: set[str] = set()  # claims an earlier member allocates (the later reuse them)
    need: dict[str, int] = {}  # node -> devices its members take at least
    usable: dict[str, set[DeviceId]] = {}  # node -> free fitting devices its members reach
    for member in members:
        demand = PodSearch(allocator, member, tentative, explain=False).demand(allocated)
        if demand is None:
            return True  # this member's claims cannot be allocated on its node at all
        if not demand.counted:
            return False
        for key, least in demand.least:
            allocated.add(key)
            need[member.node] = need.get(member.node, 0) + least
        usable.setdefault(member.node, set()).update(demand.usable)
    if any(need[node] > len(usable[node]) for node in need):
        return True
    everywhere: set[DeviceId] = set().union(*usable.values())
    return sum(need.values()) > len(everywhere)
