"""A test stand-in for kube-controller-manager's resourceclaim controller (Kubernetes
1.36, pkg/controller/resourceclaim/controller.go), never part of the scheduler.

What it does, as the real controller does it, when the test calls `sync()` (one pass
over every pod and claim, so that a test decides when the controller has acted):

- for each pod that is not done and not being deleted, each `spec.resourceClaims` entry
  naming a `resourceClaimTemplateName` gets its claim: the one recorded in
  `status.resourceClaimStatuses` when it still exists and is the pod's, else an orphan
  the pod owns (annotation `resource.kubernetes.io/pod-claim-name` = the entry's name),
  else a new claim from the template (generateName `<pod>-<entry>-`, the pod as its
  controlling owner, the template's labels and annotations); the new names are written
  to `status.resourceClaimStatuses` (`handleClaim`, `syncPod`);
- for each claim (`syncClaim`): `reservedFor` entries of pods that are gone, replaced
  (another uid) or done (Succeeded/Failed, or deleted before being scheduled) are
  removed; when none is left and the claim carries the finalizer
  `resource.kubernetes.io/delete-protection`, the allocation is removed in the same
  status update, then the finalizer; a claim being deleted with no consumer loses its
  allocation and the finalizer; a claim generated for a pod that is done or replaced,
  and reserved for nobody, is deleted.

Writes are full updates (PUT) carrying the resourceVersion read, as the controller's
UpdateStatus and Update; a conflict is left for the next pass. EMULATOR GUESS /
simplifications: no work queue, no informer cache or deleted-pod LRU (a pass lists
pods and claims afresh), generated names are not truncated to 57 characters, PodGroup
claims (DRAWorkloadResourceClaims) are not handled, and no metrics or events.
"""

from __future__ import annotations

import copy
from typing import Any

from scheduler.kube.client import ApiError, JsonObject, KubeClient

DRA = "/apis/resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


def _meta(obj: JsonObject) -> JsonObject:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _claim_path(namespace: str, name: str = "", sub: str = "") -> str:
    path = f"{DRA}/namespaces/{namespace}/resourceclaims"
    if name:
        path += f"/{name}"
    return f"{path}/{sub}" if sub else path


def is_pod_done(pod: JsonObject) -> bool:
    """isPodDone: a terminal phase, or deleted before it was scheduled."""
    phase = (pod.get("status") or {}).get("phase")
    deleted = bool(_meta(pod).get("deletionTimestamp"))
    return phase in ("Succeeded", "Failed") or (
        deleted and not (pod.get("spec") or {}).get("nodeName")
    )


def owning_pod(claim: JsonObject) -> tuple[str, str]:
    for owner in _meta(claim).get("ownerReferences") or []:
        if (
            isinstance(owner, dict)
            and owner.get("controller")
            and owner.get("apiVersion") == "v1"
            and owner.get("kind") == "Pod"
        ):
            return str(owner.get("name", "")), str(owner.get("uid", ""))
    return "", ""


class ResourceClaimController:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.created: list[str] = []  # "ns/name" of every claim it created

    async def _list(self, path: str) -> list[JsonObject]:
        items = (await self.client.request_json("GET", path)).get("items") or []
        return [item for item in items if isinstance(item, dict)]

    async def sync(self) -> None:
        pods = await self._list("/api/v1/pods")
        claims = await self._list(f"{DRA}/resourceclaims")
        for pod in pods:
            await self.sync_pod(pod, claims)
        pods = await self._list("/api/v1/pods")
        by_name = {(_meta(p).get("namespace"), _meta(p).get("name")): p for p in pods}
        for claim in await self._list(f"{DRA}/resourceclaims"):
            try:
                await self.sync_claim(claim, by_name)
            except ApiError as err:
                if err.status not in (404, 409):  # gone, or changed: the next pass
                    raise

    # --- pods -------------------------------------------------------------------------
    async def sync_pod(self, pod: JsonObject, claims: list[JsonObject]) -> None:
        meta = _meta(pod)
        if is_pod_done(pod) or meta.get("deletionTimestamp"):
            return
        namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid")
        recorded = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if isinstance(s, dict)
        }
        here = [c for c in claims if _meta(c).get("namespace") == namespace]
        new: dict[str, str] = {}
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            template = entry.get("resourceClaimTemplateName")
            if not template:
                continue
            entry_name = entry.get("name")
            known = recorded.get(entry_name)
            if known and any(
                _meta(c).get("name") == known and owning_pod(c)[1] == uid for c in here
            ):
                continue  # created already
            orphan = next(
                (
                    c
                    for c in here
                    if owning_pod(c)[1] == uid
                    and (_meta(c).get("annotations") or {}).get(POD_CLAIM_ANNOTATION) == entry_name
                ),
                None,
            )
            if orphan is None:
                orphan = await self._create(pod, entry_name, template)
            new[entry_name] = _meta(orphan)["name"]
        if new:
            statuses = [
                {"name": key, "resourceClaimName": value}
                for key, value in {**recorded, **new}.items()
                if key
            ]
            await self.client.request_json(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                body={"status": {"resourceClaimStatuses": statuses}},
                content_type="application/merge-patch+json",
            )

    async def _create(self, pod: JsonObject, entry: str, template_name: str) -> JsonObject:
        meta = _meta(pod)
        namespace = meta["namespace"]
        template = await self.client.request_json(
            "GET", f"{DRA}/namespaces/{namespace}/resourceclaimtemplates/{template_name}"
        )
        spec = template.get("spec") or {}
        template_meta = spec.get("metadata") or {}
        annotations = dict(template_meta.get("annotations") or {})
        annotations[POD_CLAIM_ANNOTATION] = entry
        claim_meta: JsonObject = {
            "generateName": f"{meta['name']}-{entry}-",
            "namespace": namespace,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        }
        if template_meta.get("labels"):
            claim_meta["labels"] = dict(template_meta["labels"])
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": claim_meta,
            "spec": copy.deepcopy(spec.get("spec") or {}),
        }
        created = await self.client.request_json("POST", _claim_path(namespace), body=body)
        self.created.append(f"{namespace}/{_meta(created)['name']}")
        return created

    # --- claims -----------------------------------------------------------------------
    async def sync_claim(self, claim: JsonObject, pods: dict[tuple[Any, Any], JsonObject]) -> None:
        meta = _meta(claim)
        namespace, name = meta["namespace"], meta["name"]
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        remaining = []
        for entry in reserved:
            if entry.get("apiGroup", "") == "" and entry.get("resource") == "pods":
                pod = pods.get((namespace, entry.get("name")))
                if pod is None or _meta(pod).get("uid") != entry.get("uid") or is_pod_done(pod):
                    continue
            remaining.append(entry)
        protected = FINALIZER in (meta.get("finalizers") or [])
        if len(remaining) < len(reserved):
            updated = copy.deepcopy(claim)
            updated["status"]["reservedFor"] = remaining
            if not remaining:
                del updated["status"]["reservedFor"]
                if protected:
                    updated["status"].pop("allocation", None)
            claim = await self._put(updated, "status")
            if protected and "allocation" not in (claim.get("status") or {}):
                claim = await self._drop_finalizer(claim)
        elif protected and meta.get("deletionTimestamp") and not remaining:
            if "allocation" in status:
                updated = copy.deepcopy(claim)
                del updated["status"]["allocation"]
                claim = await self._put(updated, "status")
            claim = await self._drop_finalizer(claim)
        if remaining:
            return
        pod_name, pod_uid = owning_pod(claim)
        pod = pods.get((namespace, pod_name)) if pod_name else None
        if pod is not None and (_meta(pod).get("uid") != pod_uid or is_pod_done(pod)):
            await self.client.request_json("DELETE", _claim_path(namespace, name))

    async def _put(self, claim: JsonObject, sub: str = "") -> JsonObject:
        meta = _meta(claim)
        return await self.client.request_json(
            "PUT", _claim_path(meta["namespace"], meta["name"], sub), body=claim
        )

    async def _drop_finalizer(self, claim: JsonObject) -> JsonObject:
        updated = copy.deepcopy(claim)
        meta = _meta(updated)
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        return await self._put(updated)
