"""All-or-nothing binding of a planned gang, and the rule for gangs left partial.

Happy path: one `POST pods/{name}/binding` per member, all members at once (bounded by
a semaphore that every gang shares), nothing read before. The Binding carries:
- `metadata.uid`: the pod's uid as a precondition, as kube-scheduler's DefaultBinder
  sends it, so a pod deleted and recreated under the same name since it was planned is
  refused (409) rather than bound on a plan made for its predecessor;
- `metadata.annotations`: the GPU assignment (`gang-scheduler.io/gpu-devices`,
  `cache.gpu.format_assignment`), which the API server copies onto the pod in the same
  write, so node and devices arrive together (nothing when the pod takes no GPU).

The request goes through `KubeClient.request_json`, raw JSON: the API answers a Binding
with a `Status`, which the generated `CoreV1Api.create_namespaced_pod_binding` would
deserialize as a `V1Binding` and fail on ("Invalid value for `target`, must not be
`None`", kubernetes-client/python#547 and #825).

What a failed member means, and whether it is tried again:
- 409 (already bound, being deleted, uid precondition), 404 (pod gone), 400/403/422
  (refused as written): the bind cannot succeed; never retried.
- 5xx, 429 or a dropped connection: maybe transient, and the write may even have been
  committed before the answer was lost. Tried once more after a random pause (tenacity,
  `retry_jitter`), and only if a GET shows the pod still unbound and still the same pod;
  when that GET shows it bound to the planned node, the first write did land and the
  member counts as bound.
- No answer within the time limit: not retried (a server that slow is not helped by
  more requests); the write may or may not have landed.
Each member has one time budget (`timeout`, default 10 s) for its binding requests,
counted from when it gets a binder slot.

A member whose bind ended without a clear answer is then settled by reading the pod
(`resolve`, a few tries with backoff): on its planned node it is bound; unbound, gone,
replaced or on another node it definitely failed; still unreadable it stays `unknown`,
and its reservation with it: the runner reads it again later (`resolve_unknown`), and
the watch or a relist that shows the pod bound or deleted also settles it. No clock
ever releases it (docs/kubernetes.md, "Reservations").

One failed member breaks the gang. `undo` then deletes the members that were bound
(`onBindFailure: delete`, the default) with the pod's uid as precondition, so their
controller recreates them and no partial gang holds GPUs. `keep` leaves them bound:
right for pods nothing would recreate (bare pods), at the price of GPUs held by a gang
that cannot run until its other members are placed.

`restart_decision` is the crash-safety rule for gangs found with fewer bound members
than minMember (after a restart, a failover, or an undo that could not finish); the
rule is written out in docs/kubernetes.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from cache.cluster import Placement
from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION, format_assignment
from cache.ownership import signed_by
from cache.pod import PodInfo
from cache.signing import NODE_SIGNATURE_ANNOTATION, SigningKeys
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.kube.client import ApiError, JsonObject, KubeClient
from scheduler.kube.dra_claims import ClaimUndo, ClaimWriter, ClaimWrites, settle_holds
from scheduler.kube.volumes import PrebindResult, VolumePrebinder
from scheduler.planner.result import Plan
from scheduler.process.config import DEFAULT_PARTIAL_GRACE, BindFailurePolicy

log = logging.getLogger(__name__)

BindState = Literal["bound", "failed", "unknown"]
RestartDecision = Literal["complete", "delete", "wait"]

DEFAULT_CONCURRENCY = 64
DEFAULT_BIND_TIMEOUT = 10.0
DEFAULT_RETRY_JITTER = 0.5
# Statuses that say the bind can never succeed as sent.
PERMANENT_STATUSES = frozenset({400, 403, 404, 409, 422})
_DELETE_ATTEMPTS = 3
# Reads of a pod whose bind had no clear answer, before it is left `unknown` for later.
RESOLVE_ATTEMPTS = 4


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def binding_body(
    pod: PodInfo, placement: Placement, key: SigningKeys | bytes | None = None
) -> JsonObject:
    """The Binding for one member: node, uid precondition and the GPU assignment,
    signed with the newest of `key` over (uid, node, devices) so that the cache trusts
    it after a restart (docs/security.md); unsigned without a key. Every binding is
    signed, a pod without GPUs too (over no devices): the signature is how the scheduler
    later tells the pods it bound from pods pinned to a node by a tenant, the only ones
    it may delete or evict (cache/ownership.py). An assignment is signed a second time
    with the node agents' key (cache/signing.py), which the device plugin checks."""
    meta: JsonObject = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    annotations: dict[str, str] = {}
    ring = SigningKeys.of(key)
    if placement.shares:
        annotations[ASSIGNMENT_ANNOTATION] = format_assignment(placement.shares)
    if ring is not None:
        annotations[SIGNATURE_ANNOTATION] = ring.sign(pod.uid, placement.node, placement.shares)
        if placement.shares:
            annotations[NODE_SIGNATURE_ANNOTATION] = ring.for_node_agents().sign(
                pod.uid, placement.node, placement.shares
            )
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": placement.node},
    }


@dataclass(frozen=True)
class MemberOutcome:
    """What became of one member's bind."""

    placement: Placement
    namespace: str
    name: str
    state: BindState
    status: int = 0  # HTTP status of the answer that decided it; 0 when none came
    reason: str = ""  # why it is not bound ("" when bound)
    requests: int = 0  # API requests spent on it

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class GangBindResult:
    gang_key: str
    members: tuple[MemberOutcome, ...]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(member.state == "bound" for member in self.members)

    @property
    def bound(self) -> tuple[MemberOutcome, ...]:
        return tuple(m for m in self.members if m.state == "bound")

    @property
    def failed(self) -> tuple[MemberOutcome, ...]:
        return tuple(m for m in self.members if m.state == "failed")

    @property
    def unknown(self) -> tuple[MemberOutcome, ...]:
        return tuple(m for m in self.members if m.state == "unknown")

    @property
    def requests(self) -> int:
        return sum(member.requests for member in self.members)

    @property
    def unbound_placements(self) -> tuple[Placement, ...]:
        """Reservations to release: members known not to be bound. Bound and unknown
        members keep theirs until the watch shows what became of them (or a re-read
        settles an unknown one)."""
        return tuple(m.placement for m in self.failed)

    @property
    def reason(self) -> str:
        """Why the gang is broken, for events and the queue ("" when it is not)."""
        if self.ok:
            return ""
        shown = [m for m in self.members if m.state != "bound"][:3]
        details = "; ".join(f"{m.key}: {m.reason}" for m in shown)
        others = len(self.members) - len(self.bound) - len(shown)
        more = f"; and {others} more" if others > 0 else ""
        return (
            f"binding gang {self.gang_key} failed ({len(self.bound)}/{len(self.members)} "
            f"members bound): {details}{more}"
        )


@dataclass(frozen=True)
class UndoResult:
    """What `undo` did with the members of a broken gang that were bound."""

    policy: BindFailurePolicy
    deleted: tuple[str, ...] = ()  # pod keys
    kept: tuple[str, ...] = ()  # bound members left in place (policy keep)
    errors: Mapping[str, str] = field(default_factory=dict)  # pod key -> why not deleted
    requests: int = 0

    def describe(self) -> str:
        if self.policy == "keep":
            return f"bound members kept ({len(self.kept)}): onBindFailure is keep"
        text = f"bound members deleted ({len(self.deleted)}); their controller recreates them"
        if self.errors:
            text += f"; {len(self.errors)} could not be deleted: " + "; ".join(
                f"{key}: {why}" for key, why in list(self.errors.items())[:3]
            )
        return text


class _Refused(Exception):
    """The bind cannot succeed (or a member's fate is settled): do not retry."""

    def __init__(self, status: int, reason: str, state: BindState = "failed") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.state = state


class _Transient(Exception):
    """A 5xx, 429 or dropped connection: worth one more try if the pod is unbound."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _Landed(Exception):
    """A recheck found the pod bound to the planned node: an earlier write landed."""


def _describe(err: ApiError) -> str:
    return f"{err.status} {err.reason}: {err.message}" if err.message else str(err)


class GangBinder:
    """Binds planned gangs over one KubeClient; the semaphore bounds binds in flight
    across every gang this binder handles."""

    def __init__(
        self,
        client: KubeClient,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        timeout: float = DEFAULT_BIND_TIMEOUT,
        retry_transient: bool = True,
        retry_jitter: float = DEFAULT_RETRY_JITTER,
        on_failure: BindFailurePolicy = "delete",
        clock: Callable[[], float] = time.monotonic,
        signing_key: SigningKeys | bytes | None = None,
    ) -> None:
        if concurrency < 1 or timeout <= 0:
            raise ValueError("concurrency must be at least 1 and timeout positive")
        self.client = client
        # Signs each Binding's GPU assignment with its newest key (binding_body), and
        # tells the pods it bound by any of its keys; the cache's keys.
        self.signing_key = SigningKeys.of(signing_key)
        self.timeout = timeout
        self.retry_transient = retry_transient
        self.retry_jitter = retry_jitter
        self.on_failure: BindFailurePolicy = on_failure
        self._clock = clock
        self._slots = asyncio.Semaphore(concurrency)

    # --- binding ----------------------------------------------------------------------
    async def bind(self, gang: Gang, plan: Plan) -> GangBindResult:
        """Bind every member of `plan` at once, then read the pods whose bind had no
        clear answer; never raises for an API failure."""
        started = self._clock()
        members = {pod.uid: pod for pod in gang.pending}
        outcomes = await asyncio.gather(
            *(self._bind_member(members.get(p.pod_uid), p) for p in plan.placements)
        )
        settled = await asyncio.gather(
            *(self._settle(m) if m.state == "unknown" else _same(m) for m in outcomes)
        )
        return GangBindResult(plan.gang_key, tuple(settled), self._clock() - started)

    async def _settle(self, member: MemberOutcome) -> MemberOutcome:
        """A member whose bind had no clear answer, after reading its pod."""
        pod = PodInfo(member.placement.pod_uid, member.namespace, member.name)
        counter = [0]
        if member.status == 0:
            # The connection was cut (no answer in time, or dropped): give a write the
            # server had already handed to etcd time to commit before reading.
            await asyncio.sleep(self.retry_jitter)
        state, why = await self.resolve(pod, member.placement, counter)
        reason = "" if state == "bound" else f"{member.reason}; then {why}"
        return dataclasses.replace(
            member, state=state, reason=reason, requests=member.requests + counter[0]
        )

    async def resolve(
        self, pod: PodInfo, placement: Placement, counter: list[int] | None = None
    ) -> tuple[BindState, str]:
        """Whether `pod` is bound on its planned node, from a fresh read of it (a GET
        without resourceVersion is served from etcd, never from a stale cache):
        "bound" when it is; "failed" when it is unbound, gone, replaced or elsewhere
        (a bind that was cut off cannot land later: the API server abandons a request
        whose client went away); "unknown" when reads kept failing, after
        RESOLVE_ATTEMPTS tries with jittered exponential backoff."""
        counter = counter if counter is not None else [0]
        retrying = AsyncRetrying(
            stop=stop_after_attempt(RESOLVE_ATTEMPTS),
            wait=wait_random_exponential(multiplier=self.retry_jitter, max=4 * self.retry_jitter),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    async with self._slots:  # not held while backing off
                        found = await self._read_pod(
                            pod, aiohttp.ClientTimeout(total=self.timeout), counter
                        )
        except _Transient as err:
            return "unknown", f"could not read the pod ({counter[0]} tries): {err.reason}"
        if found is None:
            return "failed", f"pod {pod.key} is gone"
        verdict = _placement_state(found, pod.uid, placement.node)
        if verdict == "ours" and not self._signed_by_us(found, placement):
            # On the planned node, but not by our Binding: another actor bound it. Not
            # ours, so never deleted by an undo (cache/ownership.py).
            return "failed", f"pod {pod.key} was bound to {placement.node} by someone else"
        if verdict == "ours":
            return "bound", ""
        if verdict == "unbound":
            return "failed", f"pod {pod.key} is not bound"
        return "failed", verdict

    async def _bind_member(self, pod: PodInfo | None, placement: Placement) -> MemberOutcome:
        if pod is None:
            # The plan names a pod the gang does not list: nothing to send it to.
            return MemberOutcome(
                placement, "", placement.pod_uid, "failed", 0, "pod is not a pending member"
            )
        async with self._slots:
            deadline = self._clock() + self.timeout
            counter = [0]
            try:
                await self._bind_with_retry(pod, placement, deadline, counter)
            except _Landed:
                return MemberOutcome(placement, pod.namespace, pod.name, "bound", 0, "", counter[0])
            except _Refused as err:
                return MemberOutcome(
                    placement,
                    pod.namespace,
                    pod.name,
                    err.state,
                    err.status,
                    err.reason,
                    counter[0],
                )
            except _Transient as err:
                # Out of tries: the last write may have landed before its answer was lost.
                return MemberOutcome(
                    placement,
                    pod.namespace,
                    pod.name,
                    "unknown",
                    err.status,
                    err.reason,
                    counter[0],
                )
            return MemberOutcome(placement, pod.namespace, pod.name, "bound", 201, "", counter[0])

    async def _bind_with_retry(
        self, pod: PodInfo, placement: Placement, deadline: float, counter: list[int]
    ) -> None:
        """One POST of the binding and, after a transient failure (when retries are on
        and time is left), one more after a jittered wait and a re-read of the pod. A
        plain sequence rather than a retry library's loop: every bound pod passes here,
        and the loop's set-up cost more than the request's own bookkeeping."""
        try:
            await self._post_binding(pod, placement, deadline, counter)
            return
        except _Transient:
            if not self.retry_transient or self._clock() >= deadline:
                raise
        await asyncio.sleep(random.uniform(0, self.retry_jitter))
        await self._recheck(pod, placement, deadline, counter)
        await self._post_binding(pod, placement, deadline, counter)

    def _time_left(self, deadline: float) -> aiohttp.ClientTimeout:
        left = deadline - self._clock()
        if left <= 0:
            raise _Refused(0, f"no answer within {self.timeout:g}s", "unknown")
        return aiohttp.ClientTimeout(total=left)

    async def _post_binding(
        self, pod: PodInfo, placement: Placement, deadline: float, counter: list[int]
    ) -> None:
        timeout = self._time_left(deadline)
        counter[0] += 1
        try:
            await self.client.request_json(
                "POST",
                pod_path(pod.namespace, pod.name) + "/binding",
                body=binding_body(pod, placement, self.signing_key),
                timeout=timeout,
            )
        except ApiError as err:
            if err.status in PERMANENT_STATUSES or not (err.status >= 500 or err.status == 429):
                raise _Refused(err.status, _describe(err)) from err
            raise _Transient(err.status, _describe(err)) from err
        except TimeoutError as err:
            raise _Refused(0, f"no answer within {self.timeout:g}s", "unknown") from err
        except (aiohttp.ClientError, OSError) as err:
            raise _Transient(0, f"connection failed: {type(err).__name__}: {err}") from err

    async def _recheck(
        self, pod: PodInfo, placement: Placement, deadline: float, counter: list[int]
    ) -> None:
        """Before a retry: is the pod still there, the same pod, and unbound?"""
        found = await self._read_pod(pod, self._time_left(deadline), counter)
        if found is None:
            raise _Refused(404, f"pod {pod.key} was deleted")
        verdict = _placement_state(found, pod.uid, placement.node)
        if verdict == "ours" and not self._signed_by_us(found, placement):
            raise _Refused(409, f"pod {pod.key} was bound to {placement.node} by someone else")
        if verdict == "ours":
            raise _Landed()
        if verdict != "unbound":
            raise _Refused(409, verdict)

    def _signed_by_us(self, found: Mapping[str, Any], placement: Placement) -> bool:
        """Whether a pod read back bound carries the signature our Binding wrote (always
        true without a key: nothing was signed)."""
        if self.signing_key is None:
            return True
        meta = found.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        signature = annotations.get(SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
        return isinstance(signature, str) and self.signing_key.verifies(
            placement.pod_uid, placement.node, placement.shares, signature
        )

    async def _read_pod(
        self, pod: PodInfo, timeout: aiohttp.ClientTimeout, counter: list[int]
    ) -> JsonObject | None:
        """The pod as the API has it now; None when it is gone; _Transient otherwise."""
        counter[0] += 1
        try:
            return await self.client.request_json(
                "GET", pod_path(pod.namespace, pod.name), timeout=timeout
            )
        except ApiError as err:
            if err.status == 404:
                return None
            raise _Transient(err.status, _describe(err)) from err
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise _Transient(0, f"could not read the pod: {type(err).__name__}") from err

    # --- a broken gang ------------------------------------------------------------------
    async def undo(self, result: GangBindResult) -> UndoResult:
        """Apply onBindFailure to a broken gang's bound members (nothing when it is ok).

        `delete`: every bound member is deleted with its uid as precondition (404 or a
        uid mismatch means it is gone already). Members still `unknown` after `bind`
        read them are left to the partial-gang rule and to `resolve_unknown`.
        """
        if result.ok:
            return UndoResult(self.on_failure)
        if self.on_failure == "keep":
            return UndoResult("keep", kept=tuple(m.key for m in result.bound))
        undo = await self._delete_all(list(result.bound), [0])
        for key, error in undo.errors.items():
            log.warning("could not delete %s of broken gang %s: %s", key, result.gang_key, error)
        return undo

    async def delete_members(self, pods: Sequence[PodInfo]) -> UndoResult:
        """Delete bound pods (a partial gang's, on a "delete" decision), each with its
        uid as precondition. Only pods carrying this binder's signature are deleted: a
        pod it did not bind (pinned to its node by a tenant, bound by another actor) is
        never, whatever the caller passed; those are returned in `kept`. The caller
        chooses with ClusterCache.bound_by_us; this is the last check before the API."""
        ours = [p for p in pods if signed_by(self.signing_key, p)]
        members = [
            MemberOutcome(Placement(p.uid, p.node_name), p.namespace, p.name, "bound") for p in ours
        ]
        undo = await self._delete_all(members, [0])
        signed = {p.uid for p in ours}
        kept = tuple(p.key for p in pods if p.uid not in signed)
        return dataclasses.replace(undo, kept=kept) if kept else undo

    async def _delete_all(self, members: Sequence[MemberOutcome], counter: list[int]) -> UndoResult:
        answers = await asyncio.gather(*(self._delete_member(m, counter) for m in members))
        deleted = tuple(m.key for m, error in zip(members, answers, strict=True) if error is None)
        errors = {
            m.key: error for m, error in zip(members, answers, strict=True) if error is not None
        }
        return UndoResult("delete", deleted=deleted, errors=errors, requests=counter[0])

    async def _delete_member(self, member: MemberOutcome, counter: list[int]) -> str | None:
        """Delete one bound member; None when it is gone, else why not."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": member.placement.pod_uid},
            "propagationPolicy": "Background",
        }
        retrying = AsyncRetrying(
            stop=stop_after_attempt(_DELETE_ATTEMPTS),
            # 0.1 s then doubling, up to 2 s, at the default jitter (0.5 s).
            wait=wait_random_exponential(
                multiplier=self.retry_jitter / 5, max=4 * self.retry_jitter
            ),
            retry=retry_if_exception(_deletion_retryable),
            reraise=True,
        )
        try:
            async with self._slots:
                async for attempt in retrying:
                    with attempt:
                        counter[0] += 1
                        await self.client.request_json(
                            "DELETE",
                            pod_path(member.namespace, member.name),
                            body=body,
                            timeout=aiohttp.ClientTimeout(total=self.timeout),
                        )
        except ApiError as err:
            if err.status in (404, 409):
                return None  # gone already, or replaced by a pod that is not ours to delete
            return _describe(err)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            return f"{type(err).__name__}: {err}"
        return None

    async def bind_gang(self, gang: Gang, plan: Plan) -> tuple[GangBindResult, UndoResult | None]:
        """`bind`, then `undo` when the gang broke."""
        result = await self.bind(gang, plan)
        return result, (None if result.ok else await self.undo(result))


async def _same(member: MemberOutcome) -> MemberOutcome:
    return member


def _deletion_retryable(err: BaseException) -> bool:
    if isinstance(err, ApiError):
        return err.status >= 500 or err.status == 429
    return isinstance(err, (TimeoutError, aiohttp.ClientError, OSError))


def _placement_state(pod: Mapping[str, Any], uid: str, node: str) -> str:
    """ "ours" (bound to `node`), "unbound", or why it cannot be bound by this plan."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    meta = meta if isinstance(meta, dict) else {}
    spec = spec if isinstance(spec, dict) else {}
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    if meta.get("uid") != uid:
        return f"pod {name} was replaced by another pod of the same name"
    assigned = spec.get("nodeName")
    if assigned == node:
        return "ours"
    if assigned:
        return f'pod {name} is already assigned to node "{assigned}"'
    if meta.get("deletionTimestamp"):
        return f"pod {name} is being deleted"
    return "unbound"


async def bind_and_settle(
    core: SchedulingCore,
    binder: GangBinder,
    gang: Gang,
    plan: Plan,
    clock: Callable[[], float] = time.monotonic,
    partial: PartialGangs | None = None,
    volumes: VolumePrebinder | None = None,
    claims: ClaimWriter | None = None,
) -> tuple[GangBindResult, UndoResult | None]:
    """Bind a plan the core assumed and tell the core what became of each member:
    bound ones stay charged until the watch shows them (`bind_accepted`), unknown ones
    until a re-read settles them (`bind_unknown`). When the gang breaks, onBindFailure
    is applied first, then the core releases the reservations of the members known
    unbound and requeues the gang with backoff.

    The order matters: the core hears nothing until every bind of the gang has ended,
    so the gang is never re-planned with a bind in flight; and while the bound members
    are being deleted their reservations stand, so their room is not handed out twice
    (the watch shows them deleted, which releases it).

    A gang with a member whose bind had no clear answer, or a bound member that could
    not be deleted, may be left partial: it is handed to `partial` (the crash-safety
    rule) when given. Should this raise or be cancelled, the reservations it held are
    marked unknown, for `resolve_unknown` to settle.

    With `volumes`, the members' unbound claims are written first (scheduler/kube/
    volumes.py): every claim of every member before any pod is bound; a write that
    fails binds nobody, and a gang that breaks takes back the writes of the claims no
    kept member mounts.

    With `claims`, the plan's DRA claims are written next (scheduler/kube/dra_claims.py,
    `plan.claims`): allocation and reservedFor of every claim of every member, before
    the first Binding. One that fails binds nobody: every claim write is taken back
    (and the volume writes). A gang that breaks while binding takes back the
    reservations of the members known unbound, and the allocations left with no
    consumer; the cache hears what became of each hold (`settle_holds`).
    """
    prebound = None
    written: ClaimWrites | None = None
    try:
        if volumes is not None and plan.volumes:
            prebound = await volumes.prebind(plan.volumes, core.volumes)
            if not prebound.ok:
                taken_back = await volumes.undo(prebound)
                reason = (
                    f"binding gang {plan.gang_key} failed before any member was bound: "
                    f"writing its volumes failed: {prebound.reason}; {taken_back.describe()}"
                )
                # A refused or lost volume write says nothing about the cluster (a claim
                # that moved, a 5xx), and the changes seen while in flight are not
                # counted: retry after the gang's backoff rather than wait for a change.
                core.bind_failed(plan.gang_key, plan.placements, clock(), reason, transient=True)
                return _not_bound(gang, plan, reason), None
        if claims is not None and plan.claims:
            written = await claims.write(plan.claims)
            settle_holds(core, plan, written, now=clock())
            if not written.ok:
                reason = await _claims_failed(
                    core, claims, volumes, plan, written, prebound, clock()
                )
                core.bind_failed(plan.gang_key, plan.placements, clock(), reason, transient=True)
                return _not_bound(gang, plan, reason), None
        result, undo = await binder.bind_gang(gang, plan)
    except BaseException:
        core.bind_unknown(plan.placements)
        raise
    core.bind_accepted(m.placement for m in result.bound)
    core.bind_unknown(m.placement for m in result.unknown)
    if undo is not None:
        now = clock()
        why = f"{result.reason}; {undo.describe()}"
        if volumes is not None and prebound is not None:
            kept = {m.key for m in result.members} - {m.key for m in result.failed}
            kept -= set(undo.deleted)
            still_used = _claims_of(gang, plan, kept)
            why += "; " + (await volumes.undo(prebound, still_used)).describe()
        if claims is not None and written is not None:
            # Only members known unbound give their reservations back: a bound member
            # (kept, or being deleted) may run on its devices until its pod is gone, and
            # an unknown one may be bound; the resourceclaim controller releases theirs.
            unbound = {m.placement.pod_uid for m in result.failed}
            claim_undo = await claims.undo(written, unbound)
            settle_holds(core, plan, ClaimWrites(), claim_undo, now)
            why += "; " + claim_undo.describe()
        transient = bool(result.failed) and all(_transient(m) for m in result.failed)
        core.bind_failed(plan.gang_key, result.unbound_placements, now, why, transient=transient)
        if partial is not None and (result.unknown or undo.errors):
            partial.suspect(plan.gang_key, now)
    return result, undo


async def _claims_failed(
    core: SchedulingCore,
    claims: ClaimWriter,
    volumes: VolumePrebinder | None,
    plan: Plan,
    written: ClaimWrites,
    prebound: PrebindResult | None,
    now: float,
) -> str:
    """A claim write failed: no member is bound. Every claim write that landed (or may
    have) is taken back for every member, then the volume writes; the reason."""
    members = {consumer.uid for claim in plan.claims for consumer in claim.reserved_for}
    members |= {uid for claim in plan.claims for uid in claim.group_members}
    claim_undo: ClaimUndo = await claims.undo(written, members)
    settle_holds(core, plan, ClaimWrites(), claim_undo, now)
    reason = (
        f"binding gang {plan.gang_key} failed before any member was bound: "
        f"writing its resource claims failed: {written.reason}; {claim_undo.describe()}"
    )
    if volumes is not None and prebound is not None:
        reason += "; " + (await volumes.undo(prebound)).describe()
    return reason


def _transient(member: MemberOutcome) -> bool:
    """A failed bind the API may accept when asked again: a server error, throttling,
    or no answer (a refusal, 409 or 404 says something a watch event will show)."""
    return member.status == 0 or member.status == 429 or member.status >= 500


def _not_bound(gang: Gang, plan: Plan, reason: str) -> GangBindResult:
    """Every member failed before its bind was sent."""
    pods = {pod.uid: pod for pod in gang.pending}
    members = []
    for placement in plan.placements:
        pod = pods.get(placement.pod_uid)
        namespace, name = (pod.namespace, pod.name) if pod else ("", placement.pod_uid)
        members.append(MemberOutcome(placement, namespace, name, "failed", 0, reason))
    return GangBindResult(plan.gang_key, tuple(members))


def _claims_of(gang: Gang, plan: Plan, pod_keys: set[str]) -> set[str]:
    """Keys of the planned claims that the members `pod_keys` mount."""
    uids = {pod.uid for pod in gang.pending if pod.key in pod_keys}
    return {
        choice.claim.key
        for uid, choices in plan.volumes.items()
        if uid in uids
        for choice in choices
    }


async def resolve_unknown(
    core: SchedulingCore, binder: GangBinder, clock: Callable[[], float] = time.monotonic
) -> int:
    """Read again every pod whose bind ended without a known outcome and tell the core
    what each shows (its reservation is released only when the read proves the bind
    did not land); returns how many were settled. A pod the core no longer holds as
    unknown by the time its read returns (the watch settled it) is left alone."""
    targets = [
        (placement, pod)
        for placement in core.cache.unresolved()
        if (pod := core.cache.pod(placement.pod_uid)) is not None
    ]
    verdicts = await asyncio.gather(*(binder.resolve(pod, p) for p, pod in targets))
    settled = 0
    for (placement, _), (state, _why) in zip(targets, verdicts, strict=True):
        if state != "unknown" and core.bind_resolved(placement, state == "bound", clock()):
            settled += 1
    return settled


# --- crash safety ---------------------------------------------------------------------
def restart_decision(
    gang: Gang,
    now: float,
    grace: float = DEFAULT_PARTIAL_GRACE,
    *,
    partial_since: float | None = None,
    placeable: bool | None = None,
) -> RestartDecision:
    """What to do with a gang that has fewer bound members than minMember.

    - "complete": leave it to the scheduling cycle, which places the rest: the gang is
      whole already, or the planner found room for its needed members (`placeable`
      True), or it has not tried yet and the gang is ready (its pending members are
      enough), within `grace`.
    - "delete": it has been partial for `grace` seconds or more (since `partial_since`,
      when this scheduler first saw it partial) without a plan: delete its bound
      members so that they stop holding GPUs; their controller recreates them.
    - "wait": otherwise (members still missing, or the planner found no room yet, and
      the grace period is not over).
    """
    if len(gang.bound) >= gang.min_member or placeable is True:
        return "complete"
    since = now if partial_since is None else partial_since
    if now - since >= grace:
        return "delete"
    if placeable is None and gang.ready:
        return "complete"
    return "wait"


class PartialGangs:
    """Keeps `partial_since` for the gangs the crash-safety rule applies to and the
    planner's latest verdict on each, and asks `restart_decision` about them.

    The rule applies to gangs found partial when this replica starts leading
    (`found_at_start`) and to gangs whose undo could not finish (`suspect`): gangs
    whose binding may have been interrupted. A gang that lost a member later, while
    running, is not partial by our doing and is not touched.
    """

    def __init__(self, grace: float = DEFAULT_PARTIAL_GRACE) -> None:
        self.grace = grace
        self._since: dict[str, float] = {}
        self._placeable: dict[str, bool] = {}

    def found_at_start(self, gangs: Iterable[Gang], now: float) -> list[str]:
        """Record the partial gangs of the first full view after taking the lease."""
        keys = [g.key for g in gangs if g.bound and len(g.bound) < g.min_member]
        for key in keys:
            self._since.setdefault(key, now)
        return keys

    def suspect(self, gang_key: str, now: float) -> None:
        self._since.setdefault(gang_key, now)

    def attempted(self, gang_key: str, placeable: bool) -> None:
        if gang_key in self._since:
            self._placeable[gang_key] = placeable

    def __contains__(self, gang_key: object) -> bool:
        return gang_key in self._since

    def review(self, gangs: Mapping[str, Gang], now: float) -> dict[str, RestartDecision]:
        """A decision for every tracked gang; gangs that are whole, gone, or decided
        "delete" are no longer tracked (a deleted gang's members come back pending)."""
        decisions: dict[str, RestartDecision] = {}
        for key in list(self._since):
            gang = gangs.get(key)
            if gang is None or len(gang.bound) >= gang.min_member:
                self._drop(key)
                continue
            decision = restart_decision(
                gang,
                now,
                self.grace_for(gang),
                partial_since=self._since[key],
                placeable=self._placeable.get(key),
            )
            decisions[key] = decision
            if decision == "delete":
                self._drop(key)
        return decisions

    def _drop(self, key: str) -> None:
        self._since.pop(key, None)
        self._placeable.pop(key, None)

    def grace_for(self, gang: Gang) -> float:
        """How long this gang may stay partial: its PodGroup's scheduleTimeoutSeconds
        (what scheduler-plugins' coscheduling lets a gang's members hold their room while
        the rest is missing, its Permit wait), but never longer than the operator's
        binding.partialGangGraceSeconds: a tenant may ask for its GPUs to be released
        sooner, not held longer (docs/decisions.md)."""
        timeout = gang.timeout_seconds
        if timeout is None or timeout >= self.grace:
            return self.grace  # compared as numbers: float() of a huge int overflows
        return float(timeout)
