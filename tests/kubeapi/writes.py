"""The write verbs against the store: create, update, patch, binding, and their checks.

Optimistic concurrency as genericregistry.Store.Update: a PUT whose
metadata.resourceVersion differs from the stored one is a 409 Conflict ("the object has
been modified; ..."); a PUT without one is an unconditional update where the type allows
it (pods, nodes, events) and a 409 where it does not (leases, custom resources). A patch
applies to the current version, unless it names a resourceVersion, which then must
match. A write that changes nothing is skipped: no new resourceVersion, no watch event
(etcd3 GuaranteedUpdate's no-op short cut). Finalizers hold a deleted object (with its
deletionTimestamp set) until an update takes the last one off.
"""

from __future__ import annotations

from typing import Any

from tests.kubeapi import errors, strategy
from tests.kubeapi.errors import ApiError
from tests.kubeapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from tests.kubeapi.resources import PODS, ResourceType
from tests.kubeapi.store import Store, StoredObject

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_BINDING = ResourceType("", "v1", "bindings", "Binding", namespaced=True)


def create(store: Store, rtype: ResourceType, namespace: str | None, body: Any) -> StoredObject:
    obj = strategy.prepare_create(rtype, body, namespace)
    name = obj["metadata"]["name"]
    if store.get(rtype, namespace or "", name) is not None:
        raise errors.already_exists(rtype, name)
    return store.write(rtype, obj, None)


def commit_update(
    store: Store, current: StoredObject, new: dict[str, Any], *, conditional: bool
) -> StoredObject:
    rtype = current.rtype
    given = str(new["metadata"].get("resourceVersion") or "")
    if given and given != current.obj["metadata"]["resourceVersion"]:
        raise errors.conflict(rtype, current.name, errors.OPTIMISTIC_LOCK_MESSAGE)
    if not given and conditional and not rtype.allow_unconditional_update:
        raise errors.conflict(rtype, current.name, errors.OPTIMISTIC_LOCK_MESSAGE)
    new["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
    if strategy.same_content(new, current.obj):
        return current
    if _finalized(current.obj, new):
        return store.remove(rtype, current)
    return store.write(rtype, new, current)


def _finalized(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """genericregistry's ShouldDeleteDuringUpdate: an update that takes the last
    finalizer off an object whose deletion is due (grace period 0) deletes it."""
    meta = new["metadata"]
    return (
        bool(meta.get("deletionTimestamp"))
        and not meta.get("finalizers")
        and old["metadata"].get("deletionGracePeriodSeconds") == 0
    )


def remove_or_finalize(store: Store, current: StoredObject) -> tuple[StoredObject, bool]:
    """The final step of a DELETE (a pod's once its grace period is over): the object
    goes, unless it has finalizers; then it stays with deletionTimestamp set and a grace
    period of 0 until an update takes the last one off. Returns the object and whether
    it is gone."""
    meta = current.obj["metadata"]
    if not meta.get("finalizers"):
        return store.remove(current.rtype, current), True
    if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
        return current, False  # already waiting for its finalizers
    return store.write(current.rtype, strategy.mark_deleting(current.obj, 0), current), False


def update(
    store: Store,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    subresource: str,
    body: Any,
) -> tuple[StoredObject, bool]:
    """PUT; returns the stored version and whether it was created (create-on-update)."""
    meta = body.get("metadata") if isinstance(body, dict) else None
    if isinstance(meta, dict) and meta.get("name") not in (None, name):
        raise errors.bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the "
            f"URL ({name})"
        )
    current = store.get(rtype, namespace or "", name)
    if current is None:
        if not rtype.allow_create_on_update or subresource:
            raise errors.not_found(rtype, name)
        if isinstance(meta, dict):
            meta.pop("resourceVersion", None)
            meta["name"] = name
        return store.write(rtype, strategy.prepare_create(rtype, body, namespace), None), True
    new = strategy.prepare_update(rtype, current.obj, body, subresource)
    return commit_update(store, current, new, conditional=True), False


def _apply_patch(rtype: ResourceType, base: dict[str, Any], content_type: str, body: Any) -> Any:
    if content_type == MERGE_PATCH:
        return merge_patch(base, body)
    if content_type == STRATEGIC_PATCH and rtype.strategic_merge:
        if not isinstance(body, dict):
            raise errors.bad_request("strategic merge patch must be a JSON object")
        return strategic_merge_patch(base, body)
    if content_type == JSON_PATCH:
        if not isinstance(body, list):
            raise errors.bad_request(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
            )
        return json_patch(base, body)
    accepted = [JSON_PATCH, MERGE_PATCH] + ([STRATEGIC_PATCH] if rtype.strategic_merge else [])
    # Strategic merge patch on a custom resource is refused with 415 by the API.
    # EMULATOR GUESS: server-side apply (application/apply-patch+yaml) is not emulated and
    # answered the same way.
    raise ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def patch(
    store: Store, current: StoredObject, subresource: str, content_type: str, body: Any
) -> StoredObject:
    rtype = current.rtype
    try:
        patched = _apply_patch(rtype, current.to_dict(), content_type, body)
    except PatchError as err:
        # EMULATOR GUESS: 422 for a failing JSON patch (as apiserver's applyJSPatch), 400
        # for a malformed strategic merge patch.
        code = 422 if content_type == JSON_PATCH else 400
        raise ApiError(code, errors.REASONS[code], str(err)) from err
    if not isinstance(patched, dict) or not isinstance(patched.setdefault("metadata", {}), dict):
        raise errors.bad_request("the patch did not produce an object")
    meta = patched["metadata"]
    if not meta.get("resourceVersion"):
        meta["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
    new = strategy.prepare_update(rtype, current.obj, patched, subresource)
    return commit_update(store, current, new, conditional=False)


def grace_period(pod: dict[str, Any], given: Any) -> int:
    """podStrategy.CheckGracefulDelete: unscheduled or finished pods go at once."""
    spec = pod.get("spec") or {}
    if given is None:
        given = spec.get("terminationGracePeriodSeconds") or 0
    try:
        grace = int(given)
    except (TypeError, ValueError) as err:
        raise errors.bad_request(f"invalid gracePeriodSeconds: {given}") from err
    if not spec.get("nodeName"):
        return 0
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    return max(grace, 0)


def deleted_status(final: StoredObject) -> dict[str, Any]:
    """What DELETE answers for types that do not return the deleted object.

    EMULATOR GUESS (from memory of genericregistry.Store.Delete): a Success Status with
    details; only pods set ReturnDeletedObject (seen in pod storage.go).
    """
    rtype = final.rtype
    details: dict[str, Any] = {"name": final.name}
    if rtype.group:
        details["group"] = rtype.group
    details["kind"] = rtype.plural
    details["uid"] = final.obj["metadata"].get("uid")
    return errors.success_body(200, details)


def bind(store: Store, namespace: str, name: str, body: Any) -> StoredObject:
    """BindingREST.Create: validate, then setPodHostAndAnnotations in one write."""
    if not isinstance(body, dict):
        raise errors.bad_request("not a Binding object")
    meta = body.get("metadata") or {}
    if meta.get("name") != name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    target = body.get("target") or {}
    if target.get("kind") not in (None, "", "Node"):
        raise errors.invalid(
            _BINDING,
            name,
            f'target.kind: Unsupported value: "{target.get("kind")}": supported values: "Node"',
        )
    node = target.get("name")
    if not node:
        raise errors.invalid(_BINDING, name, "target.name: Required value")
    current = store.get(PODS, namespace, name)
    if current is None:
        raise errors.not_found(PODS, name)
    errors.check_preconditions(PODS, current, meta.get("uid"), meta.get("resourceVersion"))
    # Errors from inside the update that are not Status errors come back as 409 on
    # "pods/binding" (BindingREST.assignPod wraps them with NewConflict).
    if current.obj["metadata"].get("deletionTimestamp"):
        why = f"pod {name} is being deleted, cannot be assigned to a host"
        raise errors.conflict(PODS, name, why, qualified="pods/binding")
    assigned = (current.obj.get("spec") or {}).get("nodeName")
    if assigned:
        why = f'pod {name} is already assigned to node "{assigned}"'
        raise errors.conflict(PODS, name, why, qualified="pods/binding")
    if (current.obj.get("spec") or {}).get("schedulingGates"):
        # setPodHostAndAnnotations: "Reject binding to a scheduling un-ready Pod."
        why = f"pod {name} has non-empty .spec.schedulingGates"
        raise errors.conflict(PODS, name, why, qualified="pods/binding")
    # The API does not check that the node exists (BindingREST never reads nodes): a pod
    # bound to a missing node stays bound until the pod garbage collector removes it.
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    return store.write(PODS, strategy.bind_pod(current.obj, node, annotations), current)
