"""What the API server does to a resource.k8s.io/v1 object between the request body and
storage: decoding (schema.py), the registry strategies of pkg/registry/resource/* and
validation (claims.py, claim_status.py, slices.py, classes.py). tests/kubeapi/strategy.py
calls `decode` first, then `prepare_create` or `prepare_update` after its generic
metadata handling.

ResourceClaim (resourceclaim/strategy.go):
- create: status is dropped (a client cannot create an allocated claim);
- update of the main resource: status stays as stored; the spec is immutable (any
  change, after defaulting, is 422 `spec: Invalid value: ...: field is immutable`);
- update of `status`: only status changes (spec and all metadata but resourceVersion
  come from the stored claim, metav1.ResetObjectMetaForStatus); the status rules of
  claim_status.py; and, as DRAResourceClaimGranularStatusAuthorization (beta, on in
  1.36) asks, a write that changes status.allocation or status.reservedFor needs the
  same verb on `resourceclaims/binding` cluster-wide, and one that changes
  status.devices needs `arbitrary-node:<verb>` (or, for a service account bound to the
  allocated node, `associated-node:<verb>`) on `resourceclaims/driver` named by each
  driver whose entries changed, in the claim's namespace; else 422 with a Forbidden
  cause, as the real strategy reports it.
Optimistic concurrency is the generic one (writes.py): a stale resourceVersion is 409.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kubeapi import errors, rbac
from tests.kubeapi.dra import claim_status, claims, classes, schema, slices
from tests.kubeapi.dra.fields import Errors, forbidden, immutable, refuse
from tests.kubeapi.rbac import Attributes
from tests.kubeapi.resources import (
    DEVICE_CLASSES,
    DRA_GROUP,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ResourceType,
)

_SHAPES: dict[ResourceType, dict[str, schema.Shape]] = {
    RESOURCE_SLICES: {"spec": schema.SLICE_SPEC},
    DEVICE_CLASSES: {"spec": schema.CLASS_SPEC},
    RESOURCE_CLAIMS: {"spec": schema.CLAIM_SPEC, "status": schema.CLAIM_STATUS},
    RESOURCE_CLAIM_TEMPLATES: {"spec": schema.TEMPLATE_SPEC},
}


def decode(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    try:
        return schema.decode_fields(obj, _SHAPES[rtype])
    except schema.DecodeError as err:
        raise errors.bad_request(
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {err}'
        ) from None


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("name") or "")


def _check(rtype: ResourceType, obj: dict[str, Any], found: Errors) -> None:
    if found:
        raise refuse(rtype, _name(obj), found)


def prepare_create(rtype: ResourceType, obj: dict[str, Any], now: str) -> None:
    """In place: defaults, the strategy's PrepareForCreate, then validation (422)."""
    spec = obj.setdefault("spec", {})
    if rtype is RESOURCE_CLAIMS:
        obj.pop("status", None)
        claims.default_spec(spec)
        _check(rtype, obj, claims.validate_spec(spec, "spec"))
    elif rtype is RESOURCE_CLAIM_TEMPLATES:
        claims.default_spec(spec.setdefault("spec", {}))
        _check(rtype, obj, classes.validate_template(spec))
    elif rtype is RESOURCE_SLICES:
        obj["metadata"]["generation"] = 1
        slices.drop_disabled_fields(spec, None)
        slices.default_taints(spec, now)
        _check(rtype, obj, slices.validate(spec, None))
    elif rtype is DEVICE_CLASSES:
        obj["metadata"]["generation"] = 1
        _check(rtype, obj, classes.validate_class(spec, None))


def prepare_update(
    rtype: ResourceType, old: dict[str, Any], new: dict[str, Any], subresource: str, now: str
) -> dict[str, Any]:
    """The object to store for an update of `old` (metadata already handled)."""
    if subresource == "status":
        return _claim_status_update(old, new)
    spec = new.setdefault("spec", {})
    old_spec = old.get("spec") or {}
    if rtype is RESOURCE_CLAIMS:
        if "status" in old:  # the main resource never writes status
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
        claims.default_spec(spec)
        _check(rtype, new, [] if spec == old_spec else [immutable("spec", spec)])
    elif rtype is RESOURCE_CLAIM_TEMPLATES:
        claims.default_spec(spec.setdefault("spec", {}))
        _check(rtype, new, [] if spec == old_spec else [immutable("spec", spec)])
    elif rtype in (RESOURCE_SLICES, DEVICE_CLASSES):
        if rtype is RESOURCE_SLICES:
            slices.drop_disabled_fields(spec, old_spec)
            slices.default_taints(spec, now)
            found = slices.validate(spec, old_spec)
        else:
            found = classes.validate_class(spec, old_spec)
        # EMULATOR GUESS: a generation the client sent is ignored (the real strategy
        # only sets it when the spec changes).
        generation = old["metadata"].get("generation", 1)
        new["metadata"]["generation"] = generation + (spec != old_spec)
        _check(rtype, new, found)
    return new


def _claim_status_update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(old)
    result["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion", "")
    status = new.get("status") or {}
    old_status = old.get("status") or {}
    allocation = status.get("allocation") or {}
    for entry in (allocation.get("devices") or {}).get("results") or []:
        claims.default_tolerations(entry.get("tolerations") or [])
    claim_status.drop_deallocated_devices(status, old_status)
    deleting = bool(old["metadata"].get("deletionTimestamp"))
    known = claims.request_names(old.get("spec") or {})
    found = _authorized_status_change(status, old_status, old)
    found += claim_status.validate_update(status, old_status, known, deleting)
    _check(RESOURCE_CLAIMS, old, found)
    if status:
        result["status"] = status
    else:
        result.pop("status", None)
    return result


def _authorized_status_change(
    status: dict[str, Any], old_status: dict[str, Any], claim: dict[str, Any]
) -> Errors:
    """AuthorizedForBinding and AuthorizedForDeviceStatus (pkg/registry/resource/utils.go)."""
    request = rbac.CURRENT.get()
    if request is None:
        return []
    found: Errors = []
    binding_changed = any(status.get(k) != old_status.get(k) for k in ("allocation", "reservedFor"))
    if binding_changed:
        denial = request.check(
            Attributes(request.verb, DRA_GROUP, "resourceclaims/binding", "", "")
        )
        if denial is not None:
            found.append(
                forbidden(
                    "status.allocation",
                    'changing status.allocation or status.reservedFor requires resource="'
                    f'resourceclaims/binding", verb="{request.verb}" permission: '
                    f"{denial.body['message']}",
                )
            )
    if status.get("allocation") is None:
        return found
    verbs = [f"arbitrary-node:{request.verb}"]
    if request.node_name and request.node_name == _allocated_node(status):
        verbs.insert(0, f"associated-node:{request.verb}")
    namespace = str(claim["metadata"].get("namespace") or "")
    for driver in sorted(_changed_drivers(status, old_status)):
        denials = [
            request.check(Attributes(v, DRA_GROUP, "resourceclaims/driver", namespace, driver))
            for v in verbs
        ]
        if all(d is not None for d in denials):
            first = denials[0]
            assert first is not None
            shown = "[" + " ".join(verbs) + "]"
            found.append(
                forbidden(
                    "status.devices",
                    f'changing status.devices requires resource="resourceclaims/driver", '
                    f'verb="{shown}" permission: {first.body["message"]}',
                )
            )
    return found


def _allocated_node(status: dict[str, Any]) -> str:
    """nodeNameFromAllocation: the node of a selector that is one metadata.name field."""
    terms = ((status.get("allocation") or {}).get("nodeSelector") or {}).get(
        "nodeSelectorTerms"
    ) or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return ""
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1:
        return ""
    only = fields[0]
    values = only.get("values") or []
    if only.get("key") != "metadata.name" or only.get("operator") != "In" or len(values) != 1:
        return ""
    return str(values[0])


def _changed_drivers(status: dict[str, Any], old_status: dict[str, Any]) -> set[str]:
    """getModifiedDrivers: the drivers of status.devices entries added, changed or removed."""
    before = {claim_status.device_key(d): d for d in old_status.get("devices") or []}
    drivers: set[str] = set()
    for device in status.get("devices") or []:
        previous = before.pop(claim_status.device_key(device), None)
        if previous != device:
            drivers.add(device.get("driver", ""))
    drivers.update(d.get("driver", "") for d in before.values())
    return drivers
