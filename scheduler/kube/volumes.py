"""PreBind for volumes, gang-aware: every member's unbound claims get their node before
any member is bound, and lose it again when the gang breaks.

What is written, as kube-scheduler's VolumeBinding PreBind writes it (its binder's
bindAPIUpdate), leaving the rest to the PV controller and the provisioner:
- a claim to provision: the claim's annotation `volume.kubernetes.io/selected-node:
  <node>`; the external provisioner (or the in-tree one) then creates a volume
  reachable from that node and the PV controller binds it;
- a static PV chosen for a claim: the PV's `spec.claimRef` (the claim's namespace,
  name, uid and resourceVersion) and the annotation `pv.kubernetes.io/bound-by-
  controller: "yes"`; the PV controller then sets the claim's `spec.volumeName`.
Both are merge patches carrying the resourceVersion the plan was made from, so a claim
or PV that changed since (another scheduler bound it, a user edited it) is refused with
409 rather than overwritten. The writes of one gang run concurrently; the binder starts
binding pods only once all have succeeded.

Undo (a write failed, or the gang broke while binding): for claims that no bound member
still uses, the selected-node annotation is removed and a PV's claimRef cleared, each
with a JSON patch that first tests the value is still ours, so nothing written since by
someone else is removed. Taken back are the writes that landed and those whose outcome
is unknown (a 5xx, 429 or a lost connection may come after the write was stored); a
write the API refused (409: the object moved; 404; 422) left nothing of ours. A value
the object already carried when the plan was made (a node a tenant or another
scheduler selected, a PV an administrator pre-bound to the claim) is not ours either:
the write only confirms it, and the undo leaves it. An undo that meets a transient
failure is tried again (`undo_attempts`), since a selected node left behind makes a
provisioner create the volume there. What cannot be undone: a provisioner that saw the annotation
may already have created a volume (the claim then binds to it; a later plan sees the
claim bound and follows its PV's node affinity), and a PV the PV controller already
bound stays bound to the claim (the controller completes a half-written binding rather
than releasing it).

Unlike kube-scheduler, PreBind does not wait for the claims to become bound before the
pods are bound: the kubelet waits for the volume (the pod shows ContainerCreating), so
a gang's binds are not held up by a slow provisioner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import aiohttp

from cache.volumes import (
    BOUND_BY_CONTROLLER_ANNOTATION,
    SELECTED_NODE_ANNOTATION,
    VolumeCache,
)
from policies.filters.volume_binding import ClaimChoice
from scheduler.kube.client import ApiError, JsonObject, KubeClient

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

WriteKind = Literal["selected-node", "claim-ref"]


def claim_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


def volume_path(name: str) -> str:
    return f"/api/v1/persistentvolumes/{name}"


def _pointer(key: str) -> str:
    """A JSON pointer segment (RFC 6901): '~' and '/' escaped."""
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class VolumeWrite:
    """One write PreBind made (or tried)."""

    choice: ClaimChoice
    kind: WriteKind
    error: str = ""  # "" when it landed
    # The error leaves the write's fate open (5xx, 429, timeout, lost connection).
    maybe_landed: bool = False
    # The object already carried this value before the write: not ours to take back.
    confirmed: bool = False

    @property
    def undoable(self) -> bool:
        return (not self.error or self.maybe_landed) and not self.confirmed

    @property
    def target(self) -> str:
        if self.kind == "claim-ref":
            return f"persistentvolume {self.choice.volume}"
        return f"persistentvolumeclaim {self.choice.claim.key}"


@dataclass(frozen=True)
class PrebindResult:
    writes: tuple[VolumeWrite, ...] = ()

    @property
    def ok(self) -> bool:
        return all(not write.error for write in self.writes)

    @property
    def landed(self) -> tuple[VolumeWrite, ...]:
        return tuple(write for write in self.writes if not write.error)

    @property
    def reason(self) -> str:
        failed = [w for w in self.writes if w.error]
        return "; ".join(f"{w.target}: {w.error}" for w in failed[:3])


@dataclass(frozen=True)
class VolumeUndo:
    undone: tuple[str, ...] = ()  # targets restored
    left: tuple[str, ...] = ()  # still in use by a bound member, or refused
    errors: Mapping[str, str] | None = None

    def describe(self) -> str:
        text = f"volume writes undone ({len(self.undone)})"
        if self.left:
            text += f", left in place ({len(self.left)}: used by bound members)"
        if self.errors:
            text += "; could not undo: " + "; ".join(
                f"{target}: {why}" for target, why in list(self.errors.items())[:3]
            )
        return text


def unique_choices(volumes: Mapping[str, Sequence[ClaimChoice]]) -> list[ClaimChoice]:
    """Each claim once (members sharing a claim got the same choice)."""
    found: dict[str, ClaimChoice] = {}
    for choices in volumes.values():
        for choice in choices:
            found.setdefault(choice.claim.key, choice)
    return list(found.values())


class VolumePrebinder:
    """The PreBind and undo writes of planned gangs, over one KubeClient."""

    def __init__(
        self,
        client: KubeClient,
        *,
        timeout: float = 10.0,
        undo_attempts: int = 3,
        undo_retry_pause: float = 0.5,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.undo_attempts = max(1, undo_attempts)
        self.undo_retry_pause = undo_retry_pause

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=self.timeout)

    async def prebind(
        self, volumes: Mapping[str, Sequence[ClaimChoice]], cache: VolumeCache
    ) -> PrebindResult:
        """Write every claim's choice; a failed write is reported, never raised."""
        choices = unique_choices(volumes)
        writes = await asyncio.gather(*(self._write(choice, cache) for choice in choices))
        return PrebindResult(tuple(writes))

    async def _write(self, choice: ClaimChoice, cache: VolumeCache) -> VolumeWrite:
        claim = choice.claim
        kind: WriteKind
        confirmed = False
        if choice.volume:
            volume = cache.volumes.get(choice.volume)
            if volume is None or not volume.resource_version:
                # Without its resourceVersion the patch would be unconditional: it could
                # rewrite the claimRef of a PV recreated under this name for another
                # claim. Nothing is sent; the gang is retried against what the watch says.
                why = f"persistentvolume {choice.volume} is no longer known"
                return VolumeWrite(choice, "claim-ref", why)
            version = volume.resource_version
            ref = volume.claim_ref
            confirmed = ref is not None and (ref.namespace, ref.name) == (
                claim.namespace,
                claim.name,
            )
            body: JsonObject = {
                "metadata": {
                    "resourceVersion": version,
                    "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
                },
                "spec": {
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": claim.namespace,
                        "name": claim.name,
                        "uid": claim.uid,
                        "resourceVersion": claim.resource_version,
                    }
                },
            }
            path, kind = volume_path(choice.volume), "claim-ref"
        else:
            if not claim.resource_version:
                why = f"persistentvolumeclaim {claim.key} has no resourceVersion to write against"
                return VolumeWrite(choice, "selected-node", why)
            body = {
                "metadata": {
                    "resourceVersion": claim.resource_version,
                    "annotations": {SELECTED_NODE_ANNOTATION: choice.node},
                }
            }
            path, kind = claim_path(claim.namespace, claim.name), "selected-node"
            confirmed = claim.selected_node == choice.node
        error, open_fate = await self._patch_outcome(path, body, MERGE_PATCH)
        return VolumeWrite(choice, kind, error, open_fate, confirmed)

    async def _patch_outcome(self, path: str, body: object, content_type: str) -> tuple[str, bool]:
        """The error ("" when the write landed) and whether, despite it, the write may
        have been stored."""
        try:
            await self.client.request_json(
                "PATCH", path, body=body, content_type=content_type, timeout=self._timeout()
            )
        except ApiError as err:
            text = f"{err.status} {err.reason}: {err.message}" if err.message else str(err)
            return text, err.status >= 500 or err.status == 429
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            return f"{type(err).__name__}: {err}", True
        return "", False

    async def undo(self, result: PrebindResult, still_used: Iterable[str] = ()) -> VolumeUndo:
        """Take back the writes that landed, except for claims in `still_used` (claim
        keys that a member left bound still mounts)."""
        keep = set(still_used)
        ours = [w for w in result.writes if w.undoable]
        targets = [w for w in ours if w.choice.claim.key not in keep]
        left = tuple(w.target for w in ours if w.choice.claim.key in keep)
        answers = await asyncio.gather(*(self._take_back(write) for write in targets))
        errors = {w.target: e for w, e in zip(targets, answers, strict=True) if e}
        undone = tuple(w.target for w, e in zip(targets, answers, strict=True) if not e)
        return VolumeUndo(undone, left, errors or None)

    async def _take_back(self, write: VolumeWrite) -> str:
        choice = write.choice
        if write.kind == "claim-ref":
            ops: list[JsonObject] = [
                {"op": "test", "path": "/spec/claimRef/uid", "value": choice.claim.uid},
                {"op": "remove", "path": "/spec/claimRef"},
            ]
            path = volume_path(choice.volume)
        else:
            annotation = f"/metadata/annotations/{_pointer(SELECTED_NODE_ANNOTATION)}"
            ops = [
                {"op": "test", "path": annotation, "value": choice.node},
                {"op": "remove", "path": annotation},
            ]
            path = claim_path(choice.claim.namespace, choice.claim.name)
        error = ""
        for attempt in range(self.undo_attempts):
            if attempt:
                await asyncio.sleep(self.undo_retry_pause * attempt)
            error, transient = await self._patch_outcome(path, ops, JSON_PATCH)
            if error.startswith(("404", "422")):
                return ""  # gone, or no longer ours: nothing of ours to take back
            if not error or not transient:
                break
        return error
