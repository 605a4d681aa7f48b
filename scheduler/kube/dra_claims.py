"""The DRA claim writes of a planned gang: every claim's status before any member is
bound, and their rollback when the gang breaks (docs/dra.md, "Writes and rollback").

For each `ClaimAllocation` of the plan (each claim once, however many members share
it), as kube-scheduler's DynamicResources PreBind (`bindClaim`) writes it:

1. a claim this scheduler allocates first gets the finalizer
   `resource.kubernetes.io/delete-protection` (a strategic merge patch of the claim,
   a set union): the resourceclaim controller deallocates only claims that carry it,
   once no consumer is left, and it keeps an allocated claim from vanishing under a
   running pod;
2. then `status.allocation` (`Allocation.to_api()`) and `status.reservedFor` (the
   claim's earlier consumers and the members that use it): a merge patch of the
   `status` subresource.

Both patches carry the resourceVersion the plan was made from (the second the one the
first returned), so a claim that changed since the plan (deleted, re-created,
allocated by someone else, reserved for another pod) is refused with 409 or 404 rather
than overwritten. A failure that may be transient (no answer, a dropped connection, a
5xx, a 429) is tried again under the call policy (call_policy.py), which is safe
because of the precondition; a 409 is never tried again: it means the claim changed
and the gang breaks. The one exception is a 409 after an earlier try whose answer was
lost: the first write may have landed and moved the version, so the claim is read and
the write counts as landed when the claim carries it (and as open, for the rollback to
look at, when the claim cannot be read back).

Rollback (a claim write failed, or a Binding did): for every claim whose write landed
or may have landed, the claim is read and the `reservedFor` entries of the members
released (those known not to be bound) are removed; the allocation is removed with
them only when it is ours (the devices this plan wrote) and no consumer is left. The
write carries the resourceVersion read; a 409 reads again (a bounded number of times).
Members that were bound keep their entry even when the undo deletes them: their pods
may still be running on the devices until they are gone, and the resourceclaim
controller removes an entry once its pod is gone, then deallocates the claim. The
finalizer stays: the controller removes it when the claim is deleted.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from cache.dra.claims import EXTENDED_CLAIM_ANNOTATION, Allocation, Claim, Consumer
from cache.dra.store import DraCache
from cache.group_claims import PODGROUP_CONSUMER_RESOURCE
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.client import ApiError, JsonObject, KubeClient, transient
from scheduler.planner.extended_claims import ExtendedClaim
from scheduler.planner.result import ClaimAllocation, Plan

DRA_API = "/apis/resource.k8s.io/v1"
# The finalizer kube-scheduler puts on every claim it allocates; the resourceclaim
# controller deallocates (and later lets go of) only claims that carry it.
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Re-reads of a claim whose rollback meets a 409 (someone wrote it meanwhile).
UNDO_ATTEMPTS = 3

# landed: the API accepted it; refused: it definitely did not land (nothing of ours is
# on the claim); open: the answer was lost, it may have landed.
WriteFate = Literal["landed", "refused", "open"]
ClaimLookup = Callable[[str], Claim | None]


def claim_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"{DRA_API}/namespaces/{namespace}/resourceclaims/{name}"
    return f"{path}/{subresource}" if subresource else path


def consumer_to_api(consumer: Consumer) -> JsonObject:
    body: JsonObject = {"resource": consumer.resource, "name": consumer.name, "uid": consumer.uid}
    if consumer.api_group:
        body["apiGroup"] = consumer.api_group
    return body


@dataclass(frozen=True)
class ClaimWrite:
    """What became of one claim's write."""

    claim: ClaimAllocation
    fate: WriteFate
    error: str = ""  # "" when it landed
    status: int = 0  # HTTP status of the answer that decided it, 0 when none came
    # For a claim of a pod's extended resources: the claim as created (its generated
    # name, uid), None when the create did not land or its answer was lost.
    created: ClaimAllocation | None = None

    @property
    def maybe_ours(self) -> bool:
        """Something of ours may be on the claim: the rollback looks at it."""
        return self.fate != "refused"


@dataclass(frozen=True)
class ClaimWrites:
    writes: tuple[ClaimWrite, ...] = ()

    @property
    def ok(self) -> bool:
        return all(write.fate == "landed" for write in self.writes)

    @property
    def reason(self) -> str:
        failed = [w for w in self.writes if w.fate != "landed"]
        return "; ".join(f"resourceclaim {w.claim.key}: {w.error}" for w in failed[:3])


@dataclass(frozen=True)
class ClaimUndo:
    """What the rollback did, claim by claim."""

    deallocated: tuple[str, ...] = ()  # our reservations and our allocation removed
    released: tuple[str, ...] = ()  # our reservations removed, the allocation stays
    kept: tuple[str, ...] = ()  # used by members left bound (or unknown): untouched
    clean: tuple[str, ...] = ()  # nothing of ours found on the claim (or it is gone)
    errors: Mapping[str, str] = field(default_factory=dict)  # claim key -> why not undone

    def describe(self) -> str:
        text = f"claims deallocated ({len(self.deallocated)}), released ({len(self.released)})"
        if self.kept:
            text += f", left to bound members ({len(self.kept)})"
        if self.errors:
            text += "; could not undo: " + "; ".join(
                f"resourceclaim {key}: {why}" for key, why in list(self.errors.items())[:3]
            )
        return text


class _Outcome(Exception):
    """Ends one claim's write with its fate."""

    def __init__(self, fate: WriteFate, error: str, status: int = 0) -> None:
        super().__init__(error)
        self.fate = fate
        self.error = error
        self.status = status


def _describe(err: BaseException) -> str:
    if isinstance(err, ApiError):
        return f"{err.status} {err.reason}: {err.message}" if err.message else str(err)
    return f"{type(err).__name__}: {err}"


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _reserved(obj: Mapping[str, Any]) -> list[Any]:
    entries = _status(obj).get("reservedFor")
    return list(entries) if isinstance(entries, list) else []


def _reserved_uids(obj: Mapping[str, Any]) -> set[str]:
    return {str(e.get("uid")) for e in _reserved(obj) if isinstance(e, Mapping)}


def _devices(raw: object) -> set[tuple[str, str, str, str, str]]:
    """(request, driver, pool, device, shareID) of an allocation as the API has it: a
    share is told apart by its shareID (another allocation of the same shares of a
    device is not ours)."""
    body = raw if isinstance(raw, Mapping) else {}
    devices = body.get("devices")
    results = devices.get("results") if isinstance(devices, Mapping) else None
    found = set()
    for entry in results if isinstance(results, list) else []:
        if isinstance(entry, Mapping):
            keys = ("request", "driver", "pool", "device", "shareID")
            found.add(tuple(str(entry.get(k, "")) for k in keys))
    return found  # type: ignore[return-value]


def allocation_is(raw: object, allocation: Allocation) -> bool:
    """The allocation on a claim is the one this plan wrote (same devices for the same
    requests; allocations are immutable once set)."""
    if not isinstance(raw, Mapping):
        return False
    return _devices(raw) == _devices(allocation.to_api())


def carries_write(obj: Mapping[str, Any], claim: ClaimAllocation) -> bool:
    """The claim as read carries this plan's status write."""
    if _uid(obj) != claim.uid:
        return False
    if not {c.uid for c in claim.reserved_for} <= _reserved_uids(obj):
        return False
    allocation = _status(obj).get("allocation")
    return claim.allocation is None or allocation_is(allocation, claim.allocation)


def _carries_finalizer(obj: Mapping[str, Any], claim: ClaimAllocation) -> bool:
    meta = obj.get("metadata")
    finalizers = meta.get("finalizers") if isinstance(meta, Mapping) else None
    return (
        _uid(obj) == claim.uid
        and isinstance(finalizers, list)
        and DELETE_PROTECTION_FINALIZER in finalizers
        and _status(obj).get("allocation") is None
    )


class ClaimWriter:
    """The claim writes and rollbacks of planned gangs, over one KubeClient, for the
    core's DRA cache `dra` (the claims the plans were made from, and the holds to
    settle). Time limits and retries are the client's call policy (`client.policy`)."""

    def __init__(
        self, client: KubeClient, dra: DraCache, *, undo_attempts: int = UNDO_ATTEMPTS
    ) -> None:
        self.client = client
        self.dra = dra
        self.undo_attempts = max(1, undo_attempts)

    # --- writes -------------------------------------------------------------------------
    async def write(self, claims: Sequence[ClaimAllocation]) -> ClaimWrites:
        """Write every claim at once; a failure is reported, never raised."""
        lookup = self.dra.claims.get
        writes = await asyncio.gather(*(self._write(claim, lookup) for claim in claims))
        return ClaimWrites(tuple(writes))

    async def _write(self, claim: ClaimAllocation, lookup: ClaimLookup) -> ClaimWrite:
        if claim.extended is not None:
            return await self._write_extended(claim, claim.extended)
        try:
            reserved = self._reservations(claim, lookup)
            version = claim.resource_version
            if claim.allocation is not None:
                version = await self._protect(claim)
            status: JsonObject = {"reservedFor": reserved}
            if claim.allocation is not None:
                status["allocation"] = claim.allocation.to_api()
            body = {"metadata": {"resourceVersion": version}, "status": status}
            await self._guarded_patch(
                claim_path(claim.namespace, claim.name, "status"),
                body,
                MERGE_PATCH,
                lambda obj: carries_write(obj, claim),
            )
        except _Outcome as outcome:
            return ClaimWrite(claim, outcome.fate, outcome.error, outcome.status)
        return ClaimWrite(claim, "landed")

    @staticmethod
    def _reservations(claim: ClaimAllocation, lookup: ClaimLookup) -> list[JsonObject]:
        """The claim's reservedFor after the write: the entries it had at the plan's
        version, then the members. No request is sent for a claim the cache no longer
        has at that version: it was deleted or changed since the plan, so the write
        would be refused anyway (or, the cache lagging, overwrite what it lacks)."""
        known = lookup(claim.key)
        if known is None or (known.uid and known.uid != claim.uid):
            raise _Outcome("refused", "the claim was deleted since the plan")
        if known.resource_version != claim.resource_version:
            raise _Outcome(
                "refused",
                f"the claim changed since the plan (resourceVersion "
                f"{claim.resource_version}, now {known.resource_version})",
            )
        if claim.allocation is not None and known.allocation is not None:
            raise _Outcome("refused", "the claim was allocated by someone else")
        entries = [consumer_to_api(c) for c in known.reserved_for]
        present = {c.uid for c in known.reserved_for}
        entries += [consumer_to_api(c) for c in claim.reserved_for if c.uid not in present]
        return entries

    async def _protect(self, claim: ClaimAllocation) -> str:
        """Add the delete-protection finalizer; the claim's new resourceVersion."""
        body = {
            "metadata": {
                "resourceVersion": claim.resource_version,
                "finalizers": [DELETE_PROTECTION_FINALIZER],
            }
        }
        answer = await self._guarded_patch(
            claim_path(claim.namespace, claim.name),
            body,
            STRATEGIC_MERGE_PATCH,
            lambda obj: _carries_finalizer(obj, claim),
        )
        version = _version(answer)
        if not version:
            raise _Outcome("refused", "the claim's answer carries no resourceVersion")
        return version

    async def _guarded_patch(
        self,
        path: str,
        body: JsonObject,
        content_type: str,
        carries: Callable[[Mapping[str, Any]], bool],
    ) -> JsonObject:
        """A patch guarded by its resourceVersion, tried again on a transient failure;
        the answer (or the claim read back) when it landed, else _Outcome."""
        lost = False  # an earlier try's answer was lost: it may have landed

        def retry_on(err: BaseException) -> bool:
            nonlocal lost
            if transient(err):
                lost = True
                return True
            return False

        try:
            answer: JsonObject = {}
            async for attempt in self.client.policy.retrying(retry_on):
                with attempt:
                    answer = await self.client.request_json(
                        "PATCH", path, body=body, content_type=content_type
                    )
            return answer
        except ApiError as err:
            if err.status == 409 and lost:
                found = await self._read(path.removesuffix("/status"))
                if found is None:
                    # Not read back: the earlier try may have landed, so the write is
                    # not refused but open (the rollback reads the claim again).
                    raise _Outcome(
                        "open", f"{_describe(err)}; the claim could not be read back", 409
                    ) from err
                if carries(found):
                    return found  # our earlier try landed
            if transient(err):
                raise _Outcome("open", _describe(err), err.status) from err
            raise _Outcome("refused", _describe(err), err.status) from err
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise _Outcome("open", _describe(err)) from err

    async def _read(self, path: str) -> JsonObject | None:
        """The claim (a GET, tried again on transient failures); None when it is gone
        or cannot be read."""
        try:
            return await self.client.call("GET", path, retry_on=transient)
        except (ApiError, TimeoutError, aiohttp.ClientError, OSError):
            return None

    # --- claims of pods' extended resources -------------------------------------------
    async def _write_extended(self, claim: ClaimAllocation, extended: ExtendedClaim) -> ClaimWrite:
        """Create the claim for a pod's DRA-backed extended resources (kube-scheduler's
        createExtendedResourceClaimInAPI: generated name `<pod>-extended-resources-`,
        the pod its controlling owner, the annotation), write its status as any claim's,
        then the pod's `status.extendedResourceClaimStatus`. The create carries the
        delete-protection finalizer (kube-scheduler adds it by an update right after);
        it is sent once: a POST with a generated name is not safe to repeat, so a lost
        answer leaves the write open and the rollback looks the claim up by its owner."""
        path = f"{DRA_API}/namespaces/{claim.namespace}/resourceclaims"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{extended.pod_name}-extended-resources-",
                "namespace": claim.namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": extended.pod_name,
                        "uid": extended.pod_uid,
                        "controller": True,
                    }
                ],
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "finalizers": [DELETE_PROTECTION_FINALIZER],
            },
            "spec": extended.spec_to_api(),
        }
        try:
            made = await self.client.request_json("POST", path, body=body)
        except ApiError as err:
            fate: WriteFate = "open" if transient(err) else "refused"
            return ClaimWrite(claim, fate, f"create: {_describe(err)}", err.status)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            return ClaimWrite(claim, "open", f"create: {_describe(err)}")
        created = dataclasses.replace(
            claim,
            name=_name(made),
            uid=_uid(made),
            resource_version=_version(made),
        )
        if not created.name or not created.uid or not created.resource_version:
            return ClaimWrite(claim, "open", "create: the answer names no claim")
        try:
            status: JsonObject = {"reservedFor": [consumer_to_api(c) for c in claim.reserved_for]}
            if claim.allocation is not None:
                status["allocation"] = claim.allocation.to_api()
            await self._guarded_patch(
                claim_path(created.namespace, created.name, "status"),
                {"metadata": {"resourceVersion": created.resource_version}, "status": status},
                MERGE_PATCH,
                lambda obj: carries_write(obj, created),
            )
            await self._patch_pod_status(created, extended)
        except _Outcome as outcome:
            return ClaimWrite(claim, outcome.fate, outcome.error, outcome.status, created)
        return ClaimWrite(claim, "landed", created=created)

    async def _patch_pod_status(self, created: ClaimAllocation, extended: ExtendedClaim) -> None:
        """The pod's status.extendedResourceClaimStatus: which container's resource
        each request of the claim serves, and the claim's name (the kubelet reads it)."""
        body = {
            "status": {
                "extendedResourceClaimStatus": {
                    "requestMappings": extended.mappings_to_api(),
                    "resourceClaimName": created.name,
                }
            }
        }
        path = f"/api/v1/namespaces/{created.namespace}/pods/{extended.pod_name}/status"
        try:
            await self.client.call(
                "PATCH", path, body=body, content_type=MERGE_PATCH, retry_on=transient
            )
        except ApiError as err:
            # The claim is there either way: "open", so that the rollback deletes it.
            raise _Outcome("open", f"pod status: {_describe(err)}", err.status) from err
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise _Outcome("open", f"pod status: {_describe(err)}") from err

    async def _created_by_us(self, write: ClaimWrite) -> list[Mapping[str, Any]]:
        """The extended-resource claims of the write's pod that exist (the one created,
        or, when the create's answer was lost, those the namespace holds for the pod)."""
        extended = write.claim.extended
        assert extended is not None
        path = f"{DRA_API}/namespaces/{write.claim.namespace}/resourceclaims"
        if write.created is not None:
            found = await self._read(f"{path}/{write.created.name}")
            return [found] if found is not None and _uid(found) == write.created.uid else []
        listed = await self.client.call("GET", path, retry_on=transient)
        items = listed.get("items")
        return [
            item
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, Mapping) and _made_for(item, extended.pod_uid)
        ]

    async def _delete_extended(self, write: ClaimWrite) -> tuple[str, str]:
        """Delete what the write created, as kube-scheduler's deleteClaim: the
        delete-protection finalizer off first, then the claim. ("deallocated", "") when
        something was deleted, ("clean", "") when nothing was there, else ("", why)."""
        try:
            found = await self._created_by_us(write)
        except (ApiError, TimeoutError, aiohttp.ClientError, OSError) as err:
            return "", _describe(err)
        if not found:
            return "clean", ""
        for obj in found:
            error = await self._delete_claim(write.claim.namespace, obj)
            if error:
                return "", error
        return "deallocated", ""

    async def _delete_claim(self, namespace: str, obj: Mapping[str, Any]) -> str:
        """Take the delete-protection finalizer off the claim as read, then delete it
        (its uid as precondition): "" when done or already gone, else why not."""
        path = claim_path(namespace, _name(obj))
        meta = obj.get("metadata")
        raw = meta.get("finalizers") if isinstance(meta, Mapping) else None
        finalizers = raw if isinstance(raw, list) else []
        try:
            if DELETE_PROTECTION_FINALIZER in finalizers:
                remaining = [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER]
                await self.client.call(
                    "PATCH",
                    path,
                    body={
                        "metadata": {
                            "resourceVersion": _version(obj),
                            "finalizers": remaining or None,
                        }
                    },
                    content_type=MERGE_PATCH,
                    retry_on=transient,
                )
            await self.client.call(
                "DELETE", path, body={"preconditions": {"uid": _uid(obj)}}, retry_on=transient
            )
        except ApiError as err:
            if err.status != 404:
                return _describe(err)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            return _describe(err)
        return ""

    async def delete_stale(self, claims: Sequence[Claim]) -> int:
        """Delete claims an earlier attempt created for pending pods' extended
        resources (SchedulingCore.stale_extended_claims), as kube-scheduler's PostFilter
        does: each read again (it must still be that claim, annotated, controlled by
        its pod), its finalizer taken off, then deleted. How many were deleted; a
        failure is logged by the caller's next try, never raised."""
        deleted = 0
        for claim in claims:
            found = await self._read(claim_path(claim.namespace, claim.name))
            if found is None or _uid(found) != claim.uid or not _made_for(found, claim.owner_uid):
                continue
            if not await self._delete_claim(claim.namespace, found):
                deleted += 1
        return deleted

    async def release_group_reservations(self, stale: Sequence[tuple[Claim, str]]) -> int:
        """Take the PodGroup (uid) off each claim of a whole gang none of whose pods is
        on a node (SchedulingCore.stale_group_reservations), as kube-scheduler's
        PostFilter does, and the allocation with it when no other consumer is left (a
        claim allocated and reserved for no one is deallocated there too). The write is
        conditional on the resourceVersion the core judged the claim by: a claim changed
        since (our own plan's write among others) is left alone until judged again. How
        many were released; a failure waits for the caller's next pass, never raised."""
        released = 0
        for claim, group_uid in stale:
            outcome, _ = await self._unreserve(claim, group_uid)
            released += outcome in ("released", "deallocated")
        return released

    async def _unreserve(self, claim: Claim, consumer_uid: str) -> tuple[str, str]:
        """("deallocated" | "released" | "clean" | "changed", "") or ("", why it
        failed)."""
        namespace, name = claim.namespace, claim.name
        found = await self._read(claim_path(namespace, name))
        if found is None or _uid(found) != claim.uid:
            return "clean", ""
        if _version(found) != claim.resource_version:
            return "changed", ""
        reserved = _reserved(found)
        remaining = [
            e for e in reserved if not (isinstance(e, Mapping) and e.get("uid") == consumer_uid)
        ]
        if len(remaining) == len(reserved):
            return "clean", ""
        status: JsonObject = {"reservedFor": remaining or None}
        if not remaining:
            status["allocation"] = None
        body = {"metadata": {"resourceVersion": _version(found)}, "status": status}
        try:
            await self.client.call(
                "PATCH",
                claim_path(namespace, name, "status"),
                body=body,
                content_type=MERGE_PATCH,
                retry_on=transient,
            )
        except ApiError as err:
            return "", _describe(err)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            return "", _describe(err)
        return ("released" if remaining else "deallocated"), ""

    # --- rollback -----------------------------------------------------------------------
    async def undo(self, writes: ClaimWrites, released: Collection[str]) -> ClaimUndo:
        """Take back what `writes` put on the claims for the members whose pod uids are
        `released` (known not bound); the other members' entries stay. A claim of the
        whole gang gives its PodGroup entry back once every member that uses it is
        released (as kube-scheduler unreserves it when no member is scheduled)."""
        gone = set(released)
        targets = [w for w in writes.writes if w.maybe_ours]
        freed = {w.claim.key: released_consumers(w.claim, gone) for w in targets}
        kept = tuple(
            w.claim.key
            for w in targets
            if not any(c.uid in freed[w.claim.key] for c in w.claim.reserved_for)
        )
        targets = [w for w in targets if w.claim.key not in kept]
        answers = await asyncio.gather(*(self._take_back(w, freed[w.claim.key]) for w in targets))
        done: dict[str, list[str]] = {"deallocated": [], "released": [], "clean": []}
        errors = {}
        for write, (outcome, error) in zip(targets, answers, strict=True):
            if error:
                errors[write.claim.key] = error
            else:
                done[outcome].append(write.claim.key)
        return ClaimUndo(
            tuple(done["deallocated"]),
            tuple(done["released"]),
            kept,
            tuple(done["clean"]),
            errors,
        )

    async def _take_back(self, write: ClaimWrite, released: set[str]) -> tuple[str, str]:
        """("deallocated" | "released" | "clean", "") or ("", why it failed)."""
        if write.claim.extended is not None:
            # The pod's own claim, its one consumer released: deleted whole.
            return await self._delete_extended(write)
        claim = write.claim
        ours = {c.uid for c in claim.reserved_for if c.uid in released}
        path = claim_path(claim.namespace, claim.name)
        error = "the claim kept changing"
        for _ in range(self.undo_attempts):
            try:
                found = await self.client.call("GET", path, retry_on=transient)
            except ApiError as err:
                if err.status == 404:
                    return "clean", ""  # gone: nothing of ours is left on it
                return "", _describe(err)
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                return "", _describe(err)
            if _uid(found) != claim.uid:
                return "clean", ""  # another claim of the same name
            reserved = _reserved(found)
            remaining = [
                e for e in reserved if not (isinstance(e, Mapping) and e.get("uid") in ours)
            ]
            if len(remaining) == len(reserved):
                return "clean", ""  # our write did not land, or was undone already
            allocation = _status(found).get("allocation")
            deallocate = (
                claim.allocation is not None
                and not remaining
                and allocation_is(allocation, claim.allocation)
            )
            status: JsonObject = {"reservedFor": remaining or None}
            if deallocate:
                status["allocation"] = None
            body = {"metadata": {"resourceVersion": _version(found)}, "status": status}
            try:
                await self.client.call(
                    "PATCH",
                    claim_path(claim.namespace, claim.name, "status"),
                    body=body,
                    content_type=MERGE_PATCH,
                    retry_on=transient,
                )
            except ApiError as err:
                if err.status == 409:
                    error = _describe(err)
                    continue  # written meanwhile (or our lost try landed): read again
                if err.status == 404:
                    return "clean", ""
                return "", _describe(err)
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                return "", _describe(err)
            return ("deallocated" if deallocate else "released"), ""
        return "", error


def released_consumers(claim: ClaimAllocation, released: set[str]) -> set[str]:
    """The consumer uids whose entries a rollback takes off `claim`: the released
    pods', and the PodGroup's where the plan reserved the claim for its gang and every
    member using it is released; a PodGroup entry the plan found there stays."""
    groups = {c.uid for c in claim.reserved_for if c.resource == PODGROUP_CONSUMER_RESOURCE}
    if not groups:
        return released
    freed = released - groups
    if claim.group_members and set(claim.group_members) <= released:
        freed |= groups
    return freed


def _made_for(obj: Mapping[str, Any], pod_uid: str) -> bool:
    """The claim is an extended-resource claim controlled by the pod."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return False
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or annotations.get(EXTENDED_CLAIM_ANNOTATION) != "true":
        return False
    owners = meta.get("ownerReferences")
    return any(
        isinstance(o, Mapping) and o.get("controller") is True and o.get("uid") == pod_uid
        for o in (owners if isinstance(owners, list) else [])
    )


def settle_holds(
    core: SchedulingCore,
    plan: Plan,
    writes: ClaimWrites,
    undo: ClaimUndo | None = None,
    now: float = 0.0,
) -> None:
    """Tell the core what became of the allocations it holds for these writes
    (cache/dra/store.py), through its entry points so that a device freed wakes the
    gangs waiting for one: a write the API accepted is `claims_written` (the claim's
    event then replaces the hold), one refused `claims_failed` (forgotten), one whose
    answer was lost `claims_unknown` (held until the claim shows it). After a rollback:
    an allocation this scheduler removed again is `claims_taken_back`, and a write
    found not to have landed is forgotten (`claims_failed`)."""
    fates: dict[WriteFate, list[str]] = {"landed": [], "refused": [], "open": []}
    for write in writes.writes:
        fates[write.fate].append(write.claim.key)
    core.claims_written(plan, fates["landed"])
    core.claims_unknown(plan, fates["open"])
    core.claims_failed(plan, fates["refused"], now)
    if undo is None:
        return
    core.claims_taken_back(plan, undo.deallocated, now)
    # A write the API accepted is never forgotten (DraCache.forget).
    core.claims_failed(plan, undo.clean, now)
