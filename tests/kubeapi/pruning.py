"""What the API server keeps of a written status: the fields its schema knows.

- A custom resource with a structural schema is pruned (apiextensions' pruning): a
  field the schema does not declare is dropped, silently, unless it is under
  `x-kubernetes-preserve-unknown-fields`. The PodGroup CRD served here is the one in
  deploy/crd-podgroup.yaml, read from that file, so that a status field the scheduler
  writes and the CRD lacks is lost here as it would be on a cluster.
- A built-in type (Kubernetes' own PodGroup) is decoded into its Go struct: unknown
  fields are dropped too (the default `fieldValidation=Warn` only adds a warning header;
  `Strict` would refuse them, and this scheduler does not ask for it). Its schema below
  is `PodGroupStatus` of scheduling.k8s.io/v1alpha2 (1.36): `conditions`, a list of
  `metav1.Condition`, and `resourceClaimStatuses` (DRAWorkloadResourceClaims), a list
  of `{name, resourceClaimName}`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from tests.kubeapi.resources import NATIVE_PODGROUPS, PODGROUPS, ResourceType

CRD_FILE = Path(__file__).resolve().parents[2] / "deploy" / "crd-podgroup.yaml"

_STRING = {"type": "string"}
METAV1_CONDITION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": _STRING,
        "status": _STRING,
        "observedGeneration": {"type": "integer"},
        "lastTransitionTime": _STRING,
        "reason": _STRING,
        "message": _STRING,
    },
}
NATIVE_PODGROUP_STATUS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "conditions": {"type": "array", "items": METAV1_CONDITION},
        "resourceClaimStatuses": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": _STRING, "resourceClaimName": _STRING},
            },
        },
    },
}


@functools.cache
def podgroup_status_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = crd["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert isinstance(status, dict)
    return status


def status_schema(rtype: ResourceType) -> dict[str, Any] | None:
    if rtype is PODGROUPS:
        return podgroup_status_schema()
    if rtype is NATIVE_PODGROUPS:
        return NATIVE_PODGROUP_STATUS
    return None


def prune(value: Any, schema: dict[str, Any]) -> Any:
    """`value` without what `schema` does not declare (structural pruning)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            return {k: prune(v, properties[k]) for k, v in value.items() if k in properties}
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return {k: prune(v, extra) for k, v in value.items()}
        return value if schema.get("type") != "object" else {}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


def prune_status(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """Drop, in place, the status fields `rtype`'s schema does not know."""
    schema = status_schema(rtype)
    status = obj.get("status")
    if schema is not None and isinstance(status, dict):
        obj["status"] = prune(status, schema)
