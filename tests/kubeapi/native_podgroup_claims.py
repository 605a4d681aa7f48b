"""A native PodGroup's claims (scheduling.k8s.io/v1alpha2 `spec.resourceClaims` and
`status.resourceClaimStatuses`, DRAWorkloadResourceClaims gate on) as the 1.36 API
server validates them:
- spec (declarative, the `+k8s:` tags of PodGroupResourceClaim in types.go): a list map
  keyed by `name` (no name twice), at most 4 items (MaxPodGroupResourceClaims); each
  `name` required, a DNS label (`k8s-short-name`); exactly one of `resourceClaimName`
  and `resourceClaimTemplateName` (`+k8s:unionMember`), a DNS subdomain
  (`k8s-long-name`); immutable (native_podgroup._IMMUTABLE).
- status (pkg/apis/scheduling/validation ValidatePodGroupStatusUpdate): each
  entry's `name` must match an entry of spec.resourceClaims; its `resourceClaimName`,
  when set, a DNS subdomain.
EMULATOR GUESS: the texts of the declarative errors (union, list-map duplicate) follow
field.ErrorList's shape as the imperative validators print them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.kubeapi.dra.fields import Errors, duplicate, invalid, required, too_many
from tests.kubeapi.dra.names import dns_label, dns_subdomain

MAX_GROUP_CLAIMS = 4
_UNION = ("resourceClaimName", "resourceClaimTemplateName")


def spec_errors(claims: object) -> Errors:
    if claims is None:
        return []
    path = "spec.resourceClaims"
    if not isinstance(claims, list):
        return [invalid(path, claims, "must be a list")]
    errors: Errors = []
    if len(claims) > MAX_GROUP_CLAIMS:
        errors.append(too_many(path, len(claims), MAX_GROUP_CLAIMS))
    seen: set[str] = set()
    for index, entry in enumerate(claims):
        where = f"{path}[{index}]"
        if not isinstance(entry, Mapping):
            errors.append(invalid(where, entry, "must be an object"))
            continue
        name = entry.get("name")
        if not name:
            errors.append(required(f"{where}.name"))
        else:
            errors += dns_label(str(name), f"{where}.name")
            if name in seen:
                errors.append(duplicate(where, {"name": name}))
            seen.add(str(name))
        given = [field for field in _UNION if entry.get(field) is not None]
        if len(given) != 1:
            errors.append(
                invalid(
                    where,
                    "",
                    "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
        for field in given:
            errors += dns_subdomain(str(entry.get(field)), f"{where}.{field}")
    return errors


def status_errors(obj: Mapping[str, Any]) -> Errors:
    status = obj.get("status")
    statuses = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    if not statuses:
        return []
    path = "status.resourceClaimStatuses"
    if not isinstance(statuses, list):
        return [invalid(path, statuses, "must be a list")]
    spec = obj.get("spec")
    listed = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    names = {e.get("name") for e in listed or [] if isinstance(e, Mapping)}
    errors: Errors = []
    for index, entry in enumerate(statuses):
        where = f"{path}[{index}]"
        entry = entry if isinstance(entry, Mapping) else {}
        name = entry.get("name")
        if name not in names:
            errors.append(
                invalid(
                    f"{where}.name",
                    name,
                    "must match the name of an entry in `spec.resourceClaims`",
                )
            )
        claim = entry.get("resourceClaimName")
        if claim is not None:
            errors += dns_subdomain(str(claim), f"{where}.resourceClaimName")
    return errors
