"""A pod's DRA claims (`spec.resourceClaims`) and the claims the resourceclaim
controller made for it from templates (`status.resourceClaimStatuses`), read as slim
records. Never raises: what cannot be read is a ValueError the pod parser turns into a
problem naming the field.

Which ResourceClaim each entry means is decided when the pod is planned
(scheduler/planner/dra_claims.py): a `resourceClaimName` names it directly; a
`resourceClaimTemplateName` names it through the status entry of the same name, which
the controller writes once it created the claim (until then the pod waits).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cache.jsonobj import mapping

# The API server's own bound on spec.resourceClaims is lower than what a scheduler
# must fear; this one keeps a hostile object from costing more than a real one.
MAX_POD_CLAIMS = 128
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One entry of spec.resourceClaims: exactly one of `claim_name` and
    `template_name` is set."""

    name: str
    claim_name: str = ""
    template_name: str = ""


def _listed(raw: object, what: str) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list | tuple):
        raise ValueError(f"{what} must be a list")
    if len(raw) > MAX_POD_CLAIMS:
        raise ValueError(f"{what} has {len(raw)} entries, more than {MAX_POD_CLAIMS}")
    return list(raw)


def _name(value: object, what: str, pattern: re.Pattern[str]) -> str:
    if type(value) is not str or not pattern.match(value):
        shown = repr(value)[:80] if type(value) is str else type(value).__name__
        raise ValueError(f"{what} {shown} is not a valid name")
    return value


def pod_resource_claims(raw: object) -> tuple[PodResourceClaim, ...]:
    """spec.resourceClaims; ValueError naming the field when it cannot be read."""
    claims: list[PodResourceClaim] = []
    seen: set[str] = set()
    for index, item in enumerate(_listed(raw, "spec.resourceClaims")):
        where = f"spec.resourceClaims[{index}]"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where} must be an object")
        name = _name(item.get("name"), f"{where}.name", _DNS_LABEL)
        if name in seen:
            raise ValueError(f"{where}.name {name!r} is listed twice")
        seen.add(name)
        claim_name = item.get("resourceClaimName")
        template_name = item.get("resourceClaimTemplateName")
        if (claim_name is None) == (template_name is None):
            raise ValueError(
                f"{where} must set exactly one of resourceClaimName, resourceClaimTemplateName"
            )
        if claim_name is not None:
            claims.append(
                PodResourceClaim(name, claim_name=_name(claim_name, where, _DNS_SUBDOMAIN))
            )
        else:
            claims.append(
                PodResourceClaim(name, template_name=_name(template_name, where, _DNS_SUBDOMAIN))
            )
    return tuple(claims)


def claim_statuses(raw: object) -> Mapping[str, str]:
    """status.resourceClaimStatuses: pod claim name -> the ResourceClaim made for it
    ("" when the controller decided none was needed). Entries that cannot be read are
    left out: the pod then waits for them as for a claim not made yet."""
    found: dict[str, str] = {}
    if not isinstance(raw, list | tuple):
        return found
    for item in raw[:MAX_POD_CLAIMS]:
        entry = mapping(item)
        name = entry.get("name")
        claim = entry.get("resourceClaimName")
        if type(name) is not str or not _DNS_LABEL.match(name):
            continue
        if claim is None:
            found[name] = ""
        elif type(claim) is str and _DNS_SUBDOMAIN.match(claim):
            found[name] = claim
    return found
