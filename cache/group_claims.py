"""Claims of a whole gang: a native PodGroup's `spec.resourceClaims` (Kubernetes 1.36,
alpha, DRAWorkloadResourceClaims gate, KEP-5729), read as slim records.

As 1.36 defines them (staging/src/k8s.io/api/scheduling/v1alpha2/types.go and
dynamic-resource-allocation/resourceclaim.BindTo):
- each entry has a `name` (a DNS label, unique in the list) and exactly one of
  `resourceClaimName` (a ResourceClaim in the PodGroup's namespace) and
  `resourceClaimTemplateName` (the resourceclaim controller makes one claim for the
  whole group from it, owned by the PodGroup, and records its name in the PodGroup's
  `status.resourceClaimStatuses`); at most 4 entries;
- a pod uses such a claim by listing, in its own `spec.resourceClaims`, an entry that
  matches the group's exactly (same name, same claim or template name). That claim is
  then allocated once for the group and reserved for the PodGroup
  (`reservedFor: {apiGroup: scheduling.k8s.io, resource: podgroups, name, uid}`), not
  for each pod. A pod entry that differs in anything is the pod's own claim.

Never raises on what a tenant wrote: a field that cannot be read is a ValueError the
PodGroup reader turns into a refusal naming it (the gang waits, never runs without
its claims).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cache.pod_claims import PodResourceClaim, claim_statuses, pod_resource_claims

# scheduling/v1alpha2 MaxPodGroupResourceClaims (`+k8s:maxItems=4`).
MAX_GROUP_CLAIMS = 4
# The consumer a group claim is reserved for (resourceclaim.BindTo).
PODGROUP_CONSUMER_GROUP = "scheduling.k8s.io"
PODGROUP_CONSUMER_RESOURCE = "podgroups"


@dataclass(frozen=True, slots=True)
class GroupClaims:
    """A native PodGroup's claims, as the planner reads them for its gang."""

    namespace: str
    podgroup: str  # the PodGroup's name
    uid: str  # its uid: the reservedFor entry's, and the owner of claims made from templates
    claims: tuple[PodResourceClaim, ...]
    # status.resourceClaimStatuses: group claim name -> the claim made from its template
    # ("" when the controller decided none was needed).
    made: tuple[tuple[str, str], ...] = ()

    def matching(self, pod_claim: PodResourceClaim) -> PodResourceClaim | None:
        """The group's claim the pod's entry uses, or None (the pod's own claim)."""
        for claim in self.claims:
            if claim == pod_claim:
                return claim
        return None

    def made_for(self, name: str) -> str | None:
        """The claim made from the group claim's template; None while not made yet."""
        return dict(self.made).get(name)


def read_group_claims(raw: object) -> tuple[PodResourceClaim, ...]:
    """spec.resourceClaims of a PodGroup; ValueError naming the field when it cannot
    be read (the same rules as a pod's entries, at most MAX_GROUP_CLAIMS of them)."""
    if isinstance(raw, list | tuple) and len(raw) > MAX_GROUP_CLAIMS:
        raise ValueError(
            f"spec.resourceClaims has {len(raw)} entries; Kubernetes allows at most "
            f"{MAX_GROUP_CLAIMS}"
        )
    return pod_resource_claims(raw)


def read_made_claims(
    raw: object, claims: tuple[PodResourceClaim, ...]
) -> tuple[tuple[str, str], ...]:
    """status.resourceClaimStatuses of a PodGroup, only for entries of its spec made
    from a template (what the API server's status validation lets through)."""
    templated = {c.name for c in claims if c.template_name}
    found: Mapping[str, str] = claim_statuses(raw)
    return tuple(sorted((name, made) for name, made in found.items() if name in templated))
