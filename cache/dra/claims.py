"""ResourceClaims as slim records: what is requested, how it is constrained and
configured, and the allocation (if any) with the consumers it is reserved for.

A request this scheduler cannot allocate as kube-scheduler would keeps a `refusal`
naming the field; the claim is then refused when a pod needs it, never allocated with
the field ignored. Capacity requests (consumable capacity) are read, keyed as written.
A claim whose structure cannot be read keeps its identity and a problem; its
allocation, when readable, is still charged (devices someone allocated are in use
whatever else the object says).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cache.dra import fields as f
from cache.dra.classes import cel_selectors
from cache.dra.slices import DeviceId
from cache.jsonobj import MALFORMED, mapping, metadata, text_field
from cache.terms import SelectorTerm

EXACT_COUNT = "ExactCount"
ALL = "All"
# The finalizer an allocator puts on a claim before writing its allocation: the
# resourceclaim controller deallocates (once nobody is reserved) only claims carrying it.
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
# Finalizers read before giving up on finding DELETE_PROTECTION.
MAX_FINALIZERS = 64


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """An `exactly` request or one `firstAvailable` sub-request (same fields, less
    adminAccess). `name` is the request's (or sub-request's own) name."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool | None = None
    tolerations: tuple[f.DeviceToleration, ...] = ()
    refusal: str = ""
    # capacity.requests (consumable capacity), keyed as written: a device's capacity of
    # the same key must cover each, within its requestPolicy.
    capacity: tuple[tuple[str, Fraction], ...] = ()


@dataclass(frozen=True, slots=True)
class Request:
    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[ExactRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class Constraint:
    """matchAttribute or distinctAttribute (`kind`) over the named requests (all when
    empty; "req" or "req/sub")."""

    kind: str  # "matchAttribute" or "distinctAttribute"
    attribute: str  # fully qualified
    requests: tuple[str, ...] = ()

    def applies(self, request: str, sub: str) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (bool(sub) and f"{request}/{sub}" in self.requests)


@dataclass(frozen=True, slots=True)
class ClaimConfig:
    requests: tuple[str, ...]
    config: f.OpaqueConfig


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One status.allocation.devices.results entry."""

    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""
    tolerations: tuple[f.DeviceToleration, ...] = ()
    # consumedCapacity of a share (keyed as the device's capacity is written).
    consumed: tuple[tuple[str, Fraction], ...] = ()

    @property
    def device_id(self) -> DeviceId:
        return DeviceId(self.driver, self.pool, self.device)

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access:
            body["adminAccess"] = True
        if self.share_id:
            body["shareID"] = self.share_id
        if self.tolerations:
            body["tolerations"] = [t.to_api() for t in self.tolerations]
        if self.consumed:
            body["consumedCapacity"] = {k: f.format_quantity(v) for k, v in self.consumed}
        return body


@dataclass(frozen=True, slots=True)
class AllocatedConfig:
    source: str  # "FromClass" or "FromClaim"
    requests: tuple[str, ...]
    config: f.OpaqueConfig

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {"source": self.source, **self.config.to_api()}
        if self.requests:
            body["requests"] = list(self.requests)
        return body


@dataclass(frozen=True, slots=True)
class Allocation:
    """status.allocation. `node_selector` None: usable from every node."""

    results: tuple[DeviceResult, ...] = ()
    config: tuple[AllocatedConfig, ...] = ()
    node_selector: tuple[SelectorTerm, ...] | None = None

    def charged(self) -> tuple[DeviceId, ...]:
        """The devices this allocation takes from others: every result but those with
        admin access (kube-scheduler's foreachAllocatedDevice skips them)."""
        return tuple(r.device_id for r in self.results if not r.admin_access)

    def whole(self) -> tuple[DeviceId, ...]:
        """The devices taken whole: charged results without a shareID."""
        return tuple(r.device_id for r in self.results if not r.admin_access and not r.share_id)

    def shares(self) -> tuple[DeviceResult, ...]:
        """The shares of devices it takes (results with a shareID, as kube-scheduler's
        AllocatedSharedDeviceIDs; their consumedCapacity counts against the device)."""
        return tuple(r for r in self.results if not r.admin_access and r.share_id)

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {"devices": {"results": [r.to_api() for r in self.results]}}
        if self.config:
            body["devices"]["config"] = [c.to_api() for c in self.config]
        if self.node_selector is not None:
            body["nodeSelector"] = f.selector_to_api(self.node_selector)
        return body


@dataclass(frozen=True, slots=True)
class Consumer:
    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    requests: tuple[Request, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    deleting: bool = False
    problems: tuple[str, ...] = ()
    # The uid of the object that controls the claim (ownerReferences with controller
    # true): the pod, for a claim the resourceclaim controller made from a template.
    owner_uid: str = ""
    # Whether the claim carries DELETE_PROTECTION: the resourceclaim controller then
    # removes its allocation once no consumer is left.
    protected: bool = False
    # Annotated resource.kubernetes.io/extended-resource-claim: "true": the claim a
    # scheduler created for a pod's DRA-backed extended resources (owned by the pod).
    extended: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# The annotation kube-scheduler (and this scheduler) puts on the claim it creates for a
# pod's DRA-backed extended resources (resource.k8s.io/v1 ExtendedResourceClaimAnnotation).
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"

# Owner references read before giving up on finding the controller.
MAX_OWNER_REFERENCES = 64


def _controller_uid(meta: Mapping[str, Any]) -> str:
    owners = meta.get("ownerReferences")
    if not isinstance(owners, list):
        return ""
    for owner in owners[:MAX_OWNER_REFERENCES]:
        entry = mapping(owner)
        if entry.get("controller") is True:
            return text_field(entry, "uid", 64)
    return ""


def _protected(meta: Mapping[str, Any]) -> bool:
    finalizers = meta.get("finalizers")
    if not isinstance(finalizers, list):
        return False
    return DELETE_PROTECTION in finalizers[:MAX_FINALIZERS]


def claim_from_api(obj: Mapping[str, Any]) -> Claim:
    """Never raises."""
    meta = metadata(obj)
    namespace = text_field(meta, "namespace", f.MAX_NAME, "default")
    name = text_field(meta, "name", f.MAX_NAME)
    identity: dict[str, Any] = {
        "namespace": namespace,
        "name": name,
        "uid": text_field(meta, "uid", 64),
        "resource_version": text_field(meta, "resourceVersion", 64),
        "deleting": bool(meta.get("deletionTimestamp")),
        "owner_uid": _controller_uid(meta),
        "protected": _protected(meta),
        "extended": mapping(meta.get("annotations")).get(EXTENDED_CLAIM_ANNOTATION) == "true",
    }
    status = mapping(mapping(obj).get("status"))
    problems: list[str] = []
    allocation = None
    reserved: tuple[Consumer, ...] = ()
    try:
        if status.get("allocation") is not None:
            allocation = _allocation(status["allocation"])
    except MALFORMED as error:
        problems.append(f"resourceclaim {namespace}/{name}: status.allocation: {error}")
    try:
        reserved = tuple(
            _consumer(item, f"status.reservedFor[{i}]")
            for i, item in enumerate(
                f.items(status.get("reservedFor"), "status.reservedFor", f.MAX_RESERVED_FOR)
            )
        )
    except MALFORMED as error:
        problems.append(f"resourceclaim {namespace}/{name}: {error}")
    spec = mapping(mapping(mapping(obj).get("spec")).get("devices"))
    try:
        requests = tuple(
            _request(item, f"spec.devices.requests[{i}]")
            for i, item in enumerate(
                f.items(spec.get("requests"), "spec.devices.requests", f.MAX_REQUESTS)
            )
        )
        names = [r.name for r in requests]
        if len(set(names)) != len(names):
            raise ValueError("spec.devices.requests: request names must be unique")
        constraints = tuple(
            _constraint(item, f"spec.devices.constraints[{i}]")
            for i, item in enumerate(
                f.items(spec.get("constraints"), "spec.devices.constraints", f.MAX_CONSTRAINTS)
            )
        )
        config = tuple(
            _claim_config(item, f"spec.devices.config[{i}]")
            for i, item in enumerate(
                f.items(spec.get("config"), "spec.devices.config", f.MAX_CONFIG)
            )
        )
    except MALFORMED as error:
        problems.append(f"resourceclaim {namespace}/{name}: {error}")
        return Claim(
            **identity, allocation=allocation, reserved_for=reserved, problems=tuple(problems)
        )
    return Claim(
        **identity,
        requests=requests,
        constraints=constraints,
        config=config,
        allocation=allocation,
        reserved_for=reserved,
        problems=tuple(problems),
    )


def _exact(body: Mapping[str, Any], name: str, what: str, sub: bool) -> ExactRequest:
    mode = f.text(body.get("allocationMode"), f"{what}.allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise ValueError(f"{what}.allocationMode {mode!r} is neither ExactCount nor All")
    raw_count = body.get("count")
    if mode == ALL:
        if raw_count not in (None, 0):
            raise ValueError(f"{what}.count must not be set with allocationMode All")
        count = 0
    else:
        count = 1 if raw_count is None else f.int64(raw_count, f"{what}.count", low=1)
    admin = None if sub else f.flag(body.get("adminAccess"), f"{what}.adminAccess")
    if sub and body.get("adminAccess") is not None:
        raise ValueError(f"{what}.adminAccess is not a field of a sub-request")
    capacity = _capacity_requests(body.get("capacity"), f"{what}.capacity")
    return ExactRequest(
        name=name,
        device_class=f.text(body.get("deviceClassName"), f"{what}.deviceClassName", required=True),
        selectors=cel_selectors(body.get("selectors"), f"{what}.selectors"),
        mode=mode,
        count=count,
        admin_access=admin,
        tolerations=f.tolerations(body.get("tolerations"), f"{what}.tolerations"),
        capacity=capacity,
    )


def _capacity_requests(raw: object, what: str) -> tuple[tuple[str, Fraction], ...]:
    """capacity.requests: name (as written) -> amount. A quantity that does not parse
    (a wrong unit) is a problem of the claim, as the API server refuses to decode it.
    A negative amount is refused too: the API server stores it, but kube-scheduler
    would then count a share that gives capacity back to the device."""
    body = mapping(raw)
    if raw is not None and not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be a map, not {type(raw).__name__}")
    requests = f.entries(body.get("requests"), f"{what}.requests", f.MAX_ATTRIBUTES_AND_CAPACITIES)
    found: list[tuple[str, Fraction]] = []
    for key, value in requests.items():
        name = f.text(key, f"{what}.requests key", limit=f.MAX_NAME + 1 + 32, required=True)
        amount = f.quantity(value, f"{what}.requests[{name}]")
        if amount < 0:
            raise ValueError(
                f"{what}.requests[{name}] is negative ({f.format_quantity(amount)}): a capacity "
                "request must not be negative"
            )
        found.append((name, amount))
    return tuple(sorted(found))


def _request(raw: object, what: str) -> Request:
    body = mapping(raw)
    name = f.text(body.get("name"), f"{what}.name", limit=63, required=True)
    exactly = body.get("exactly")
    first = f.items(body.get("firstAvailable"), f"{what}.firstAvailable", f.MAX_SUBREQUESTS)
    if (exactly is None) == (not first):
        raise ValueError(f"{what} must set exactly one of exactly, firstAvailable")
    if exactly is not None:
        return Request(name, exactly=_exact(mapping(exactly), name, f"{what}.exactly", sub=False))
    subs = []
    for index, item in enumerate(first):
        where = f"{what}.firstAvailable[{index}]"
        sub_name = f.text(mapping(item).get("name"), f"{where}.name", limit=63, required=True)
        subs.append(_exact(mapping(item), sub_name, where, sub=True))
    if len({s.name for s in subs}) != len(subs):
        raise ValueError(f"{what}.firstAvailable: sub-request names must be unique")
    return Request(name, first_available=tuple(subs))


def _constraint(raw: object, what: str) -> Constraint:
    body = mapping(raw)
    requests = tuple(
        f.text(item, f"{what}.requests[{i}]", required=True)
        for i, item in enumerate(f.items(body.get("requests"), f"{what}.requests", f.MAX_REQUESTS))
    )
    match = body.get("matchAttribute")
    distinct = body.get("distinctAttribute")
    if (match is None) == (distinct is None):
        raise ValueError(f"{what} must set exactly one of matchAttribute, distinctAttribute")
    kind = "matchAttribute" if match is not None else "distinctAttribute"
    name = f.text(match if match is not None else distinct, f"{what}.{kind}", required=True)
    domain, _, ident = name.partition("/")
    if not domain or not ident or "/" in ident:
        raise ValueError(f"{what}.{kind} {name!r} must be a fully qualified name")
    return Constraint(kind, name, requests)


def _claim_config(raw: object, what: str) -> ClaimConfig:
    body = mapping(raw)
    requests = tuple(
        f.text(item, f"{what}.requests[{i}]", required=True)
        for i, item in enumerate(f.items(body.get("requests"), f"{what}.requests", f.MAX_REQUESTS))
    )
    return ClaimConfig(requests, f.opaque_config(body, what))


def _allocation(raw: object) -> Allocation:
    body = mapping(raw)
    if not isinstance(raw, Mapping):
        raise ValueError("must be a map")
    devices = mapping(body.get("devices"))
    results = []
    for index, item in enumerate(f.items(devices.get("results"), "devices.results", f.MAX_RESULTS)):
        entry = mapping(item)
        where = f"devices.results[{index}]"
        results.append(
            DeviceResult(
                request=f.text(entry.get("request"), f"{where}.request", required=True),
                driver=f.text(entry.get("driver"), f"{where}.driver", required=True),
                pool=f.text(entry.get("pool"), f"{where}.pool", required=True),
                device=f.text(entry.get("device"), f"{where}.device", required=True),
                admin_access=bool(f.flag(entry.get("adminAccess"), f"{where}.adminAccess")),
                share_id=f.text(entry.get("shareID"), f"{where}.shareID", limit=64),
                tolerations=f.tolerations(entry.get("tolerations"), f"{where}.tolerations"),
                consumed=_consumed(entry.get("consumedCapacity"), f"{where}.consumedCapacity"),
            )
        )
    config = []
    for index, item in enumerate(f.items(devices.get("config"), "devices.config", f.MAX_CONFIG)):
        entry = mapping(item)
        where = f"devices.config[{index}]"
        config.append(
            AllocatedConfig(
                source=f.text(entry.get("source"), f"{where}.source", required=True),
                requests=tuple(
                    f.text(r, f"{where}.requests", required=True)
                    for r in f.items(entry.get("requests"), f"{where}.requests", f.MAX_REQUESTS)
                ),
                config=f.opaque_config(entry, where),
            )
        )
    selector = body.get("nodeSelector")
    return Allocation(
        results=tuple(results),
        config=tuple(config),
        node_selector=None if selector is None else f.node_selector(selector, "nodeSelector"),
    )


def _consumer(raw: object, what: str) -> Consumer:
    body = mapping(raw)
    return Consumer(
        resource=f.text(body.get("resource"), f"{what}.resource", required=True),
        name=f.text(body.get("name"), f"{what}.name", required=True),
        uid=f.text(body.get("uid"), f"{what}.uid", limit=64, required=True),
        api_group=f.text(body.get("apiGroup"), f"{what}.apiGroup"),
    )


def _consumed(raw: object, what: str) -> tuple[tuple[str, Fraction], ...]:
    """consumedCapacity of a result someone wrote. A negative amount is read as zero:
    it must never make room on the device for others."""
    found = []
    for key, value in f.entries(raw, what, f.MAX_ATTRIBUTES_AND_CAPACITIES).items():
        name = f.text(key, f"{what} key", limit=f.MAX_NAME + 1 + 32, required=True)
        found.append((name, max(Fraction(0), f.quantity(value, f"{what}[{name}]"))))
    return tuple(sorted(found))
