"""ElasticQuota records (scheduling.x-k8s.io/v1alpha1, as kubernetes-sigs/scheduler-plugins'
CapacityScheduling) and what each namespace uses against them. Pure: no I/O, no clock.

A quota is per namespace: `spec.min` is guaranteed, `spec.max` is the limit, both
ResourceLists. Three dimensions are accounted (docs/quotas.md):
- GPU, in milli of a GPU: `nvidia.com/gpu` (whole GPUs, 1000 each) and `nvidia.com/vgpu`
  (shares, `fractionalGPU.unitsPerGPU` applied) are one dimension, since both take the
  same physical devices. A quota may name either; naming both is a problem (the smaller
  value is enforced, the safe side of an ambiguous limit).
- cpu (milli-cores) and memory (bytes).
- DRA devices per DeviceClass, and the capacity their shares consume, under the names
  of cache/dra/quota.py (`gpu.deviceclass.resource.k8s.io/devices`), in thousandths.
A dimension absent from `max` is not limited; absent from `min`, nothing is guaranteed.

Usage is charged per pod by the cache (`QuotaLedger`): every pod bound and not finished,
and every pod assumed by a plan, whoever scheduled it, counts for its namespace; and per
ResourceClaim (cache/dra/store.py): every claim allocated, by its status or by a plan
this scheduler holds, counts once for its namespace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cache import resources as res
from cache.dra.fields import format_quantity
from cache.dra.quota import DEVICE_CLASS_DOMAIN, DEVICES, dra_resource_problem, is_dra_resource
from cache.gpu import GpuRequest
from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import shown
from cache.pod import parse_time
from cache.quantity import to_milli
from cache.shared_values import shared_mapping

QUOTA_GROUP = "scheduling.x-k8s.io"
QUOTA_VERSION = "v1alpha1"
QUOTA_PLURAL = "elasticquotas"

# How a namespace's share of borrowable capacity is weighed (docs/quotas.md); default 1.
WEIGHT_ANNOTATION = "gang-scheduler.io/quota-weight"
DEFAULT_WEIGHT = 1.0
MAX_WEIGHT = 1_000_000.0

# The internal name of the GPU dimension (milli of a GPU); shown to users as WHOLE_GPU.
GPU = "gpu"
# The dimensions accounted, in the order a refusal names the first one exceeded.
DIMENSIONS = (GPU, res.CPU, res.MEMORY)
# DRA resources one ResourceList of a quota may name (the rest are not enforced): each
# is a dimension every check walks.
MAX_DRA_RESOURCES = 64
DEVICES_SUFFIX = DEVICE_CLASS_DOMAIN + DEVICES

Amounts = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    namespace: str
    name: str
    min: Amounts
    max: Amounts
    resource_version: str = ""
    uid: str = ""
    created: float = 0.0
    # What could not be read, or is read differently from how it is written.
    problems: tuple[str, ...] = ()
    weight: float = DEFAULT_WEIGHT

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _amounts(raw: object, share_milli: int, where: str, problems: list[str]) -> dict[str, int]:
    """A ResourceList of a quota in the accounted dimensions; other resources are not
    enforced (a problem says so). Never raises: an unreadable list counts as absent."""
    if raw is not None and not isinstance(raw, Mapping):
        problems.append(f"ElasticQuota {where} is not a resource list; not enforced")
    listed = dict(mapping(raw))
    try:
        devices = _dra_amounts(listed, where, problems)
        parsed = res.parse_resource_list(listed)
    except ValueError as error:
        problems.append(f"ElasticQuota {where}: {error}; not enforced")
        return {}
    amounts: dict[str, int] = {}
    whole = parsed.pop(res.WHOLE_GPU, None)
    shared = parsed.pop(res.SHARED_GPU, None)
    gpus = []
    if whole is not None:
        gpus.append(whole * res.MILLI_PER_GPU)
    if shared is not None:
        gpus.append(shared * share_milli)
    if len(gpus) == 2:
        problems.append(
            f"ElasticQuota {where} names both {res.WHOLE_GPU} and {res.SHARED_GPU}, one "
            "GPU dimension; the smaller is enforced"
        )
    if gpus:
        amounts[GPU] = min(gpus)
    for name in (res.CPU, res.MEMORY):
        if name in parsed:
            amounts[name] = parsed.pop(name)
    if parsed:
        names = ", ".join(sorted(shown(name) for name in parsed))
        problems.append(
            f"ElasticQuota {where}: {names} not enforced (only GPU, cpu, memory and DRA "
            "devices per DeviceClass)"
        )
    amounts.update(devices)
    return amounts


def _dra_amounts(listed: dict[Any, object], where: str, problems: list[str]) -> dict[str, int]:
    """Takes the DRA resources out of `listed`, in thousandths (ValueError: a value is
    malformed or negative). A name of the DRA family that is not one counted, and names
    beyond MAX_DRA_RESOURCES, are problems and not enforced."""
    named = sorted(name for name in listed if isinstance(name, str) and is_dra_resource(name))
    amounts: dict[str, int] = {}
    refused: list[str] = []
    for name in named:
        value = listed.pop(name)
        problem = dra_resource_problem(name)
        if problem:
            refused.append(f"{shown(name)} ({problem})")
            continue
        if len(amounts) == MAX_DRA_RESOURCES:
            refused.append(f"{shown(name)} (more than {MAX_DRA_RESOURCES} DRA resources)")
            continue
        try:
            amount = to_milli(value)
        except ValueError as error:
            raise ValueError(f"resource {shown(name)}: {error}") from None
        if amount < 0:
            raise ValueError(f"resource {shown(name)}: {shown(value)} must not be negative")
        amounts[name] = amount
    if refused:
        shown_names = ", ".join(refused[:8]) + (", ..." if len(refused) > 8 else "")
        problems.append(f"ElasticQuota {where}: {shown_names} not enforced")
    return amounts


def ordered(dims: Iterable[str]) -> list[str]:
    """Dimensions in the order a refusal names the first one exceeded: GPU, cpu, memory,
    then DRA resources by name."""
    present = set(dims)
    return [dim for dim in DIMENSIONS if dim in present] + sorted(present - set(DIMENSIONS))


def quota_names(obj: Mapping[str, Any]) -> tuple[str, str]:
    """An ElasticQuota's namespace and name. Only text is read: str() of a value a broken
    stream could carry (an integer of 5,000 digits, a list nested thousands deep) raises,
    and a quota whose namespace is not text governs no namespace (""), so it limits and
    guarantees nothing."""
    meta = metadata(obj)
    namespace, name = meta.get("namespace"), meta.get("name")
    if not namespace:
        namespace = "default"
    return (
        namespace if isinstance(namespace, str) else "",
        name if isinstance(name, str) else "",
    )


def quota_from_api(obj: Mapping[str, Any], share_milli: int = 1) -> QuotaInfo:
    """Build a QuotaInfo; never raises (what cannot be read becomes a problem and is not
    enforced). A `min` above `max` guarantees only `max`."""
    meta = metadata(obj)
    namespace, name = quota_names(obj)
    problems: list[str] = []
    try:
        spec = mapping(mapping(obj).get("spec"))
        maximum = _amounts(spec.get("max"), share_milli, "spec.max", problems)
        minimum = _amounts(spec.get("min"), share_milli, "spec.min", problems)
        for dim, amount in list(minimum.items()):
            if dim in maximum and amount > maximum[dim]:
                problems.append(f"ElasticQuota spec.min {display_name(dim)} is above spec.max")
                minimum[dim] = maximum[dim]
        weight = _weight(mapping(meta.get("annotations")).get(WEIGHT_ANNOTATION), problems)
        return QuotaInfo(
            namespace=namespace,
            name=name,
            weight=weight,
            min=minimum,
            max=maximum,
            resource_version=str(meta.get("resourceVersion") or ""),
            uid=str(meta.get("uid") or ""),
            created=parse_time(meta.get("creationTimestamp")),
            problems=tuple(problems),
        )
    except MALFORMED as error:
        return QuotaInfo(
            namespace, name, {}, {}, problems=(f"the ElasticQuota is malformed ({error!r})",)
        )


def _weight(text: object, problems: list[str]) -> float:
    """The weight annotation: a number above 0 and at most MAX_WEIGHT, else the default
    (and a problem)."""
    if text is None:
        return DEFAULT_WEIGHT
    try:
        weight = float(str(text))
    except ValueError:
        weight = math.nan
    if not 0 < weight <= MAX_WEIGHT:  # NaN fails too
        problems.append(
            f"annotation {WEIGHT_ANNOTATION}: {shown(text)} is not a number in (0, "
            f"{MAX_WEIGHT:g}]; the weight is {DEFAULT_WEIGHT:g}"
        )
        return DEFAULT_WEIGHT
    return weight


def usage_of(requests: Amounts, gpu: GpuRequest) -> dict[str, int]:
    """What one pod counts against its namespace's quota (zero dimensions left out)."""
    usage = {GPU: gpu.total_milli, res.CPU: requests.get(res.CPU, 0)}
    usage[res.MEMORY] = requests.get(res.MEMORY, 0)
    return {dim: amount for dim, amount in usage.items() if amount}


def display_name(dim: str) -> str:
    return res.WHOLE_GPU if dim == GPU else dim


def format_amount(dim: str, amount: int) -> str:
    """An amount as a user reads it: GPUs as a decimal count (12, 0.5), cpu and memory
    as Kubernetes quantities, DRA resources as quantities (kept in thousandths)."""
    if dim == GPU:
        whole, milli = divmod(amount, res.MILLI_PER_GPU)
        return f"{whole}.{milli:03d}".rstrip("0") if milli else str(whole)
    if is_dra_resource(dim):
        return _format_dra(dim, amount)
    return res.format_amount(dim, amount)


_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20))


def _format_dra(dim: str, milli: int) -> str:
    """A DRA amount (thousandths): a capacity that is a whole number of Mi or more with
    its binary suffix (20Gi, as capacities are written), else a plain quantity."""
    value = Fraction(milli, 1000)
    if not dim.endswith(DEVICES_SUFFIX) and value.denominator == 1 and value:
        for suffix, size in _BINARY_SUFFIXES:
            if value.numerator % size == 0:
                return f"{value.numerator // size}{suffix}"
    return format_quantity(value)


def as_resource_list(amounts: Amounts) -> dict[str, str]:
    """Amounts as a ResourceList for `status.used` (GPU as `nvidia.com/gpu`, whole when
    it is whole, else in milli as `nvidia.com/vgpu` 1000ths)."""
    listed: dict[str, str] = {}
    for dim in DIMENSIONS:
        amount = amounts.get(dim, 0)
        if dim == GPU:
            if amount % res.MILLI_PER_GPU:
                listed[res.SHARED_GPU] = str(amount)
            else:
                listed[res.WHOLE_GPU] = str(amount // res.MILLI_PER_GPU)
        else:
            listed[dim] = res.format_amount(dim, amount)
    for dim in ordered(amounts):
        if is_dra_resource(dim):
            listed[dim] = format_amount(dim, amounts[dim])
    return listed


@dataclass(frozen=True, slots=True)
class Excess:
    """A dimension a quota's max would be exceeded in."""

    dim: str
    used: int
    asked: int
    limit: int

    def describe(self) -> str:
        return (
            f"exceeds max {display_name(self.dim)}: {format_amount(self.dim, self.used)} "
            f"used + {format_amount(self.dim, self.asked)} asked > "
            f"{format_amount(self.dim, self.limit)}"
        )


def excess(quota: QuotaInfo, used: Amounts, asked: Amounts) -> Excess | None:
    """The first dimension (GPU, cpu, memory, DRA resources) where `used` plus `asked`
    is above max; None when the ask fits. A dimension not asked for is never exceeded by
    the ask, even when usage is already above max (max lowered below usage: running pods
    stay)."""
    for dim in ordered(quota.max):
        limit = quota.max.get(dim)
        want = asked.get(dim, 0)
        if limit is not None and want and used.get(dim, 0) + want > limit:
            return Excess(dim, used.get(dim, 0), want, limit)
    return None


class QuotaLedger:
    """What each namespace uses: the sum of its charged pods' usage, kept per pod so a
    charge is replaced or removed exactly (integers: charge then discharge restores the
    very same numbers)."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, Mapping[str, int]]] = {}
        self._used: dict[str, dict[str, int]] = {}
        # Namespaces whose usage changed since `take_changed` was last called: what the
        # queue re-orders borrowers by is recomputed for those only.
        self._changed: set[str] = set()

    def charge(self, uid: str, namespace: str, usage: Amounts) -> None:
        self.discharge(uid)
        # Pods of one workload hold one usage (cache/shared_values.py: memory).
        kept = shared_mapping(dict(usage))
        self._pods[uid] = (namespace, kept)
        if kept:
            res.add(self._used.setdefault(namespace, {}), kept)
            self._changed.add(namespace)

    def discharge(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is None:
            return
        namespace, usage = entry
        total = self._used.get(namespace)
        if total is None:  # nothing charged there (usages of zero)
            return
        res.subtract(total, usage)
        self._changed.add(namespace)
        if not total:
            del self._used[namespace]

    def take_changed(self) -> set[str]:
        """The namespaces whose usage changed since the last call (then forgotten)."""
        changed, self._changed = self._changed, set()
        return changed

    def used(self, namespace: str) -> Amounts:
        return self._used.get(namespace, {})

    def namespaces(self) -> Iterator[str]:
        return iter(self._used)


class QuotaBook:
    """The ElasticQuotas known (by namespace: the one that governs it) and the ledger.

    Several ElasticQuotas in one namespace: the oldest (then the first by name) governs,
    the others carry a problem; deleting it lets the next one govern.
    """

    def __init__(self, share_milli: int = 1) -> None:
        self.share_milli = share_milli
        self.ledger = QuotaLedger()
        self._quotas: dict[str, QuotaInfo] = {}  # namespace/name -> quota
        self._governing: dict[str, QuotaInfo] = {}  # namespace -> quota
        self.generation = 0  # bumped on every change of a governing quota
        self._guaranteed: tuple[int, dict[str, int]] = (0, {})  # (generation, total)

    def apply(self, event: str, obj: Mapping[str, Any]) -> QuotaInfo | None:
        """Apply a watch event; the stored record (None once deleted)."""
        quota = quota_from_api(obj, self.share_milli)
        old = self._quotas.get(quota.key)
        if old is not None and _is_older(old.resource_version, quota.resource_version):
            return old
        if event == "DELETED":
            self._quotas.pop(quota.key, None)
            self._regovern(quota.namespace)
            return None
        self._quotas[quota.key] = quota
        self._regovern(quota.namespace)
        return quota

    def remove(self, key: str) -> None:
        """A quota a relist no longer lists."""
        quota = self._quotas.pop(key, None)
        if quota is not None:
            self._regovern(quota.namespace)

    def _regovern(self, namespace: str) -> None:
        candidates = [q for q in self._quotas.values() if q.namespace == namespace]
        best = min(candidates, key=lambda q: (q.created, q.name), default=None)
        if self._governing.get(namespace) is best:
            return
        self.generation += 1
        if best is None:
            del self._governing[namespace]
        else:
            self._governing[namespace] = best

    def quotas(self) -> Mapping[str, QuotaInfo]:
        """Every ElasticQuota known, by namespace/name."""
        return self._quotas

    def governing(self, namespace: str) -> QuotaInfo | None:
        return self._governing.get(namespace)

    def governed(self) -> Mapping[str, QuotaInfo]:
        """namespace -> the quota that governs it."""
        return self._governing

    def guaranteed(self) -> Amounts:
        """The sum of the governing quotas' mins: in each dimension, the most that can
        ever be borrowed (kept until a quota changes)."""
        generation, total = self._guaranteed
        if generation != self.generation:
            total = res.total_of(q.min for q in self._governing.values())
            self._guaranteed = (self.generation, total)
        return total

    def problems(self, quota: QuotaInfo) -> tuple[str, ...]:
        """The quota's own problems, and whether another one governs its namespace."""
        ruler = self._governing.get(quota.namespace)
        if ruler is not None and ruler.key != quota.key:
            return (*quota.problems, f"ElasticQuota {ruler.key} governs this namespace")
        return quota.problems


def _is_older(stored: str, incoming: str) -> bool:
    """As cache.cluster.is_older (not imported: cluster imports this module)."""
    if not (stored.isascii() and stored.isdigit() and incoming.isascii() and incoming.isdigit()):
        return False
    stored, incoming = stored.lstrip("0"), incoming.lstrip("0")
    return (len(incoming), incoming) < (len(stored), stored)
