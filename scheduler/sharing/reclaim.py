"""Reclaim: a gang that stays within its quota's `min` takes back capacity other
namespaces borrowed (docs/quotas.md, "Reclaim").

Which gangs reclaim, and which may be evicted for them; the search itself, the hold on
the room and the evictions are priority preemption's (scheduler/sharing/preemption.py), so the
adapters carry a reclaim out as any other `Preemption`.

- The reclaimer: a gang whose namespace has a quota with a min, whose needed members
  keep the namespace within that min in every resource it guarantees (never reclaim to
  let a gang exceed its own min), and which asks for some resource the min guarantees.
  Its priority does not matter: a guarantee beats priority.
- The victims: running gangs of other namespaces with a quota, each holding some
  resource the reclaimer asks for that its namespace holds beyond its min; together
  they leave every such namespace at least its min (policies/guarantees.py), so only
  the borrowed part is taken back. Namespaces without a quota are outside the scheme:
  they lend nothing and nothing is reclaimed from them (priority preemption still
  applies to them).
- The order: fewest GPUs taken back, then lowest priority (policies/preemption.py,
  `FEWEST_GPUS`); and nothing unless the reclaimer is then placed and admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from cache import resources as res
from cache.dra.store import DraCache
from cache.pod import PodInfo
from cache.quota import GPU, QuotaBook
from policies.guarantees import Holding, borrowed, guarded, within_floors
from scheduler.gangs.gang import Gang
from scheduler.sharing.quotas import needed_usage, would_borrow


def reclaimed_resources(gang: Gang, book: QuotaBook, dra: DraCache | None = None) -> frozenset[str]:
    """The resources `gang` may reclaim (its min guarantees them and its needed members
    ask for them, within that min); empty when it does not reclaim. `dra`: where its
    members' claims are read (DRA devices reclaimed as any resource)."""
    quota = book.governing(gang.namespace)
    if quota is None or not quota.min or gang.needed == 0 or would_borrow(gang, book, dra):
        return frozenset()
    asked = needed_usage(gang, dra)
    return frozenset(dim for dim in quota.min if asked.get(dim, 0) > 0)


def anyone_borrows(book: QuotaBook, namespace: str, asked: frozenset[str]) -> bool:
    """Whether some other namespace holds more than its min of a resource in `asked`."""
    return any(borrowed(book, other, asked) for other in book.governed() if other != namespace)


def lenders(
    gang: Gang, asked: frozenset[str], namespaces: Iterable[str], book: QuotaBook
) -> set[str]:
    """The namespaces among `namespaces` whose gangs may be reclaimed from: another one
    than the gang's, with a quota, holding beyond its min some resource in `asked`."""
    return {
        namespace
        for namespace in namespaces
        if namespace != gang.namespace
        and guarded(book, namespace)
        and borrowed(book, namespace, asked)
    }


def holding(key: str, pods: Iterable[PodInfo]) -> Holding:
    """The gang as the guarantee rule weighs it: the sum of its members' `usage_of`,
    added up in one pass (thousands of gangs are weighed per search)."""
    namespace, gpu, cpu, memory = "", 0, 0, 0
    for pod in pods:
        namespace = namespace or pod.namespace
        gpu += pod.gpu.total_milli
        cpu += pod.requests.get(res.CPU, 0)
        memory += pod.requests.get(res.MEMORY, 0)
    return holding_of(key, namespace, gpu, cpu, memory)


def holding_of(
    key: str,
    namespace: str,
    gpu_milli: int,
    cpu: int,
    memory: int,
    devices: Mapping[str, int] | None = None,
) -> Holding:
    """A gang holding these sums of its members' GPU milli, cpu and memory requests
    (the dimensions `usage_of` counts, zero ones left out), and `devices`: what the DRA
    claims reserved for its members count (quotas.claims_held)."""
    usage = ((GPU, gpu_milli), (res.CPU, cpu), (res.MEMORY, memory))
    held = {dim: amount for dim, amount in usage if amount}
    held.update({dim: amount for dim, amount in (devices or {}).items() if amount})
    return Holding(key, namespace, held)


def reclaimable(
    gang: Gang, asked: frozenset[str], running: Mapping[str, Holding], book: QuotaBook
) -> list[str]:
    """The running gangs that may be evicted for `gang` reclaiming `asked`: of another
    namespace with a quota, part of what that namespace borrows in `asked`."""
    takes = taker(book, gang.namespace, asked)
    lending: dict[str, bool] = {}  # per namespace, read once
    found = []
    for key, gone in running.items():
        lends = lending.get(gone.namespace)
        if lends is None:
            lends = lending[gone.namespace] = bool(lenders(gang, asked, [gone.namespace], book))
        if lends and takes(gone):
            found.append(key)
    return found


def taker(
    book: QuotaBook, preemptor_namespace: str, asked: Iterable[str]
) -> Callable[[Holding], bool]:
    """`policies.guarantees.may_take` for many gangs of one preemptor: what each
    namespace borrows is read from the ledger once, not once per gang."""
    asked = frozenset(asked)
    over: dict[str, frozenset[str]] = {}

    def takes(gone: Holding) -> bool:
        if gone.namespace == preemptor_namespace or not guarded(book, gone.namespace):
            return True
        dims = over.get(gone.namespace)
        if dims is None:
            dims = over[gone.namespace] = borrowed(book, gone.namespace, asked)
        return any(gone.usage.get(dim, 0) > 0 for dim in dims)

    return takes


def floors_kept(
    gang: Gang, holdings: Mapping[str, Holding], book: QuotaBook
) -> Callable[[frozenset[str]], bool]:
    """Whether a victim set keeps every other namespace at least at its min where it
    borrows (the search's `admissible`)."""

    def admissible(keys: frozenset[str]) -> bool:
        return within_floors(book, gang.namespace, (holdings[key] for key in keys))

    return admissible
