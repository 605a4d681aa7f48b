"""A ResourceClaim's spec (also a template's `spec.spec`): defaulting and validation, from
pkg/apis/resource/v1/defaults.go and validateResourceClaimSpec in
pkg/apis/resource/validation/validation.go (Kubernetes 1.36).

Defaults (v1 SetDefaults_ExactDeviceRequest / _DeviceSubRequest, generated defaulters):
allocationMode ExactCount, and then count 1 when it is 0; a toleration's operator Equal.

Limits, from pkg/apis/resource/types.go: 32 requests per claim (DeviceRequestsMaxSize =
AllocationResultsMaxSize), 8 subrequests in firstAvailable, 32 selectors, 32 constraints,
32 config entries, 32 request names per constraint or config entry, 10 KiB of opaque
parameters. A list over its limit is reported alone, its items are not checked (the
real validateSlice/validateSet stop there "for DOS protection").

EMULATOR GUESS / not emulated: adminAccess is accepted without the namespace label check
(`resource.kubernetes.io/admin-access: "true"`, AuthorizedForAdmin); a request's
`capacity.requests` (consumable capacity) is decoded but not validated, as the
handwritten validation does not either; the tolerations list has no size limit here,
as the handwritten validation has none (its +k8s:maxItems tag is alpha, not enforced).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from tests.kubeapi.dra import cel, names
from tests.kubeapi.dra.fields import (
    Errors,
    duplicate,
    invalid,
    not_supported,
    required,
    size,
    too_long,
    too_many,
)

REQUESTS_MAX = 32
SUBREQUESTS_MAX = 8
CONSTRAINTS_MAX = 32
CONFIG_MAX = 32
OPAQUE_PARAMETERS_MAX = 10 * 1024
ALLOCATION_MODES = ["All", "ExactCount"]
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "None"]  # sorted, as sets.List prints them
_REQUEST_REF_MESSAGE = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)

Item = Any
Check = Callable[[Item, str], Errors]


# --- list helpers, as validateSlice / validateSet -----------------------------------
def each(items: list[Item], limit: int, check: Check, path: str) -> Errors:
    if 0 <= limit < len(items):
        return [too_many(path, len(items), limit)]
    errors: Errors = []
    for i, item in enumerate(items):
        errors += check(item, f"{path}[{i}]")
    return errors


def each_unique(
    items: list[Item], limit: int, check: Check, key: Callable[[Item], Hashable], path: str
) -> Errors:
    if 0 <= limit < len(items):
        return [too_many(path, len(items), limit)]
    errors = each(items, -1, check, path)
    seen: set[Hashable] = set()
    for i, item in enumerate(items):
        k = key(item)
        if k in seen:
            errors.append(duplicate(f"{path}[{i}]", k))
        seen.add(k)
    return errors


# --- defaulting -----------------------------------------------------------------------
def _default_request_fields(request: dict[str, Any]) -> None:
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    default_tolerations(request.get("tolerations") or [])


def default_tolerations(tolerations: list[dict[str, Any]]) -> None:
    for toleration in tolerations:
        if not toleration.get("operator"):
            toleration["operator"] = "Equal"


def default_spec(spec: dict[str, Any]) -> None:
    """SetObjectDefaults_ResourceClaim's spec part, in place."""
    for request in (spec.get("devices") or {}).get("requests") or []:
        if "exactly" in request:
            _default_request_fields(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            _default_request_fields(sub)


# --- request names --------------------------------------------------------------------
RequestNames = dict[str, set[str] | None]  # request -> its subrequests (None: `exactly`)


def request_names(spec: Mapping[str, Any]) -> RequestNames:
    """gatherRequestNames."""
    found: RequestNames = {}
    for request in (spec.get("devices") or {}).get("requests") or []:
        subs = request.get("firstAvailable") or []
        found[request.get("name", "")] = {s.get("name", "") for s in subs} if subs else None
    return found


def _names_request(known: RequestNames, ref: str) -> bool:
    head, slash, tail = ref.partition("/")
    if head not in known:
        return False
    if not slash:
        return True
    subs = known[head]
    return subs is not None and tail in subs


def request_ref(ref: str, path: str, known: RequestNames) -> Errors:
    """validateRequestNameRef: `<request>` or `<request>/<subrequest>` of this claim."""
    segments = ref.split("/")
    if len(segments) > 2:
        return [invalid(path, ref, _REQUEST_REF_MESSAGE)]
    errors: Errors = []
    for segment in segments:
        errors += names.dns_label(segment, path)
    if not _names_request(known, ref):
        errors.append(invalid(path, ref, _REQUEST_REF_MESSAGE))
    return errors


def request_refs(refs: list[str], path: str, known: RequestNames) -> Errors:
    return each_unique(refs, REQUESTS_MAX, lambda r, p: request_ref(r, p, known), str, path)


# --- the spec -------------------------------------------------------------------------
def validate_spec(spec: Mapping[str, Any], path: str) -> Errors:
    devices = spec.get("devices") or {}
    where = f"{path}.devices"
    known = request_names(spec)
    errors = each_unique(
        devices.get("requests") or [],
        REQUESTS_MAX,
        _request,
        lambda r: r.get("name", ""),
        f"{where}.requests",
    )
    errors += each(
        devices.get("constraints") or [],
        CONSTRAINTS_MAX,
        lambda c, p: _constraint(c, p, known),
        f"{where}.constraints",
    )
    errors += each(
        devices.get("config") or [],
        CONFIG_MAX,
        lambda c, p: (
            request_refs(c.get("requests") or [], f"{p}.requests", known) + configuration(c, p)
        ),
        f"{where}.config",
    )
    return errors


def _request(request: Mapping[str, Any], path: str) -> Errors:
    errors = names.dns_label(request.get("name", ""), f"{path}.name")
    subs = request.get("firstAvailable") or []
    exactly = request.get("exactly")
    if not subs and exactly is None:
        errors.append(required(path, "exactly one of `exactly` or `firstAvailable` is required"))
    elif subs and exactly is not None:
        errors.append(
            invalid(
                path,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple "
                "fields are set",
            )
        )
    elif subs:
        errors += each_unique(
            subs,
            SUBREQUESTS_MAX,
            _subrequest,
            lambda s: s.get("name", ""),
            f"{path}.firstAvailable",
        )
    else:
        errors += _request_fields(exactly, f"{path}.exactly")
    return errors


def _subrequest(sub: Mapping[str, Any], path: str) -> Errors:
    return names.dns_label(sub.get("name", ""), f"{path}.name") + _request_fields(sub, path)


def _request_fields(request: Mapping[str, Any], path: str) -> Errors:
    """What ExactDeviceRequest and DeviceSubRequest share."""
    errors = device_class_ref(request.get("deviceClassName", ""), f"{path}.deviceClassName")
    errors += each(
        request.get("selectors") or [], cel.SELECTORS_MAX, cel.selector, f"{path}.selectors"
    )
    mode, count = request.get("allocationMode", ""), request.get("count", 0)
    if mode == "All":
        if count != 0:
            errors.append(
                invalid(
                    f"{path}.count", count, "must not be specified when allocationMode is 'All'"
                )
            )
    elif mode == "ExactCount":
        if count <= 0:
            errors.append(invalid(f"{path}.count", count, "must be greater than zero"))
    else:
        errors.append(not_supported(f"{path}.allocationMode", mode, ALLOCATION_MODES))
    for i, toleration in enumerate(request.get("tolerations") or []):
        errors += _toleration(toleration, f"{path}.tolerations[{i}]")
    return errors


def device_class_ref(name: str, path: str) -> Errors:
    return names.dns_subdomain(name, path) if name else [required(path)]


def _toleration(toleration: Mapping[str, Any], path: str) -> Errors:
    errors: Errors = []
    key, operator, value = (toleration.get(k, "") for k in ("key", "operator", "value"))
    if key:
        errors += names.label_name(key, f"{path}.key")
    if operator == "Exists":
        if value:
            errors.append(invalid(f"{path}.value", value, "must be empty for operator `Exists`"))
    elif operator == "Equal":
        errors += names.label_value(value, f"{path}.value")
    elif operator == "":
        errors.append(required(f"{path}.operator"))
    else:
        errors.append(not_supported(f"{path}.operator", operator, ["Equal", "Exists"]))
    effect = toleration.get("effect", "")
    if effect and effect not in TAINT_EFFECTS:
        errors.append(not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
    return errors


def _constraint(constraint: Mapping[str, Any], path: str, known: RequestNames) -> Errors:
    errors = request_refs(constraint.get("requests") or [], f"{path}.requests", known)
    # As the real code: matchAttribute wins when both are set (the union check that would
    # refuse both is declarative and alpha in 1.36, so not enforced).
    if "matchAttribute" in constraint:
        errors += names.fully_qualified_name(constraint["matchAttribute"], f"{path}.matchAttribute")
    elif "distinctAttribute" in constraint:
        errors += names.fully_qualified_name(
            constraint["distinctAttribute"], f"{path}.distinctAttribute"
        )
    else:  # DRAConsumableCapacity is on by default in 1.36: this wording (sic)
        errors.append(
            required(
                path,
                'exactly one of "matchAttribute" or "distinctAttribute" is required, but '
                "multiple fields are set",
            )
        )
    return errors


def configuration(config: Mapping[str, Any], path: str, *, stored: bool = False) -> Errors:
    """validateDeviceConfiguration: `opaque` is required, with a driver name and
    parameters that are a JSON object of at most 10 KiB (not checked again once stored)."""
    opaque = config.get("opaque")
    if opaque is None:
        return [required(f"{path}.opaque")]
    where = f"{path}.opaque"
    errors = names.driver_name(opaque.get("driver", ""), f"{where}.driver")
    return errors + raw_object(
        opaque.get("parameters"), f"{where}.parameters", OPAQUE_PARAMETERS_MAX, stored=stored
    )


def raw_object(value: Any, path: str, limit: int, *, stored: bool = False) -> Errors:
    """validateRawExtension. EMULATOR GUESS: the size is that of the compact JSON, not of
    the bytes the client sent."""
    if value is None:
        return [required(path)]
    if not stored and size(json.dumps(value, separators=(",", ":"))) > limit:
        return [too_long(path, limit)]
    if not isinstance(value, dict):
        return [invalid(path, "<value omitted>", "must be a valid JSON object")]
    return []
