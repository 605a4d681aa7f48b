"""Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2, 1.36) as the API server
validates, defaults and admits it, for the fields the scheduler reads.

Its validation is declarative (the `+k8s:` tags of staging/src/k8s.io/api/scheduling/
v1alpha2/types.go), with the TopologyAwareWorkloadScheduling and WorkloadAwarePreemption
gates on:
- `spec.schedulingPolicy`: exactly one of `basic` and `gang`; `gang.minCount` at least 1;
- `spec.schedulingConstraints.topology`: at most 1 item (`+k8s:maxItems=1`), each with a
  required `key` in label-key format (`+k8s:format=k8s-label-key`);
- `spec.disruptionMode`: `Pod` or `PodGroup` (`+k8s:enum`), defaulted to `Pod`;
- `spec.priorityClassName`: a DNS subdomain (`k8s-long-name`); `spec.priority` in
  [-2^31, 10^9] (HighestUserDefinablePriority);
- `spec.resourceClaims` and `status.resourceClaimStatuses` (DRAWorkloadResourceClaims
  gate on): tests/kubeapi/native_podgroup_claims.py;
- every spec field is immutable (`+k8s:immutable`).
The Priority admission plugin (plugin/pkg/admission/priority, admitPodGroup) resolves
the class into `spec.priority` and refuses a priority the class does not give (403).
EMULATOR GUESS: the emulator has no PriorityClasses (as for pods): with no class named,
the priority is the default 0 (no global default class); with a class named, the
priority written is kept. Messages follow field.ErrorList's shape; the first is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.kubeapi import errors, native_podgroup_claims
from tests.kubeapi.dra.fields import refuse
from tests.kubeapi.resources import NATIVE_PODGROUPS
from tests.kubeapi.validation import label_key_problem, subdomain_problem

DISRUPTION_MODES = ("Pod", "PodGroup")
HIGHEST_USER_PRIORITY = 1_000_000_000
_INT32_MIN = -(2**31)
_IMMUTABLE = (
    "podGroupTemplateRef",
    "schedulingPolicy",
    "schedulingConstraints",
    "resourceClaims",
    "disruptionMode",
    "priorityClassName",
    "priority",
)


class _Invalid(Exception):
    pass


def prepare_create(obj: dict[str, Any]) -> None:
    """Defaults and the Priority admission plugin, before validation (as on a CREATE)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("disruptionMode", "Pod")
    if not spec.get("priorityClassName"):
        given = spec.get("priority")
        if given is not None and given != 0:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.ApiError(
                403,
                "Forbidden",
                f'podgroups.scheduling.k8s.io "{name}" is forbidden: priority set in the '
                f"pod group ({given}) must match the priority computed (0) based on the "
                "priority class set in the spec",
                {"name": name, "group": "scheduling.k8s.io", "kind": "podgroups"},
            )
        spec["priority"] = 0


def validate(obj: Mapping[str, Any]) -> None:
    """Raise the 422 the real server answers for a PodGroup it would not store."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    try:
        _validate_spec(obj.get("spec"))
    except _Invalid as why:
        raise errors.invalid(NATIVE_PODGROUPS, name, str(why)) from None
    spec = obj.get("spec")
    found = native_podgroup_claims.spec_errors(spec.get("resourceClaims"))
    if found:
        raise refuse(NATIVE_PODGROUPS, name, found)


def validate_status(obj: Mapping[str, Any]) -> None:
    """Raise the 422 the real server answers for a status it would not store."""
    found = native_podgroup_claims.status_errors(obj)
    if found:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise refuse(NATIVE_PODGROUPS, name, found)


def check_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Every spec field is immutable."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for field in _IMMUTABLE:
        if old_spec.get(field) != new_spec.get(field):
            name = str((new.get("metadata") or {}).get("name") or "")
            raise errors.invalid(
                NATIVE_PODGROUPS, name, f"spec.{field}: Invalid value: field is immutable"
            )


def _validate_spec(spec: object) -> None:
    if not isinstance(spec, Mapping):
        raise _Invalid("spec: Required value")
    policy = spec.get("schedulingPolicy")
    policy = policy if isinstance(policy, Mapping) else {}
    members = [m for m in ("basic", "gang") if policy.get(m) is not None]
    if len(members) != 1:
        raise _Invalid(
            "spec.schedulingPolicy: Invalid value: must specify exactly one of: `basic`, `gang`"
        )
    if members == ["gang"]:
        count = (policy.get("gang") or {}).get("minCount")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise _Invalid(
                f"spec.schedulingPolicy.gang.minCount: Invalid value: {count}: must be "
                "greater than or equal to 1"
            )
    constraints = spec.get("schedulingConstraints")
    if isinstance(constraints, Mapping):
        topology = constraints.get("topology") or []
        if not isinstance(topology, list):
            raise errors.bad_request(
                "json: cannot unmarshal into Go struct field "
                "PodGroupSchedulingConstraints.topology of type []v1alpha2.TopologyConstraint"
            )
        if len(topology) > 1:
            raise _Invalid(
                f"spec.schedulingConstraints.topology: Too many: {len(topology)}: must have at "
                "most 1 item"
            )
        for i, entry in enumerate(topology):
            key = entry.get("key") if isinstance(entry, Mapping) else None
            where = f"spec.schedulingConstraints.topology[{i}].key"
            if not key:
                raise _Invalid(f"{where}: Required value")
            problem = label_key_problem(str(key))
            if problem is not None:
                raise _Invalid(f'{where}: Invalid value: "{key}": {problem}')
    mode = spec.get("disruptionMode")
    if mode is not None and mode not in DISRUPTION_MODES:
        raise _Invalid(
            f'spec.disruptionMode: Unsupported value: "{mode}": supported values: '
            + ", ".join(f'"{m}"' for m in DISRUPTION_MODES)
        )
    class_name = spec.get("priorityClassName")
    if class_name:
        problem = subdomain_problem(str(class_name))
        if problem is not None:
            raise _Invalid(f'spec.priorityClassName: Invalid value: "{class_name}": {problem}')
    priority = spec.get("priority")
    if priority is not None:
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int)
            or not _INT32_MIN <= priority < 2**31
        ):
            raise errors.bad_request(
                "json: cannot unmarshal into Go struct field PodGroupSpec.spec.priority of "
                "type int32"
            )
        if priority > HIGHEST_USER_PRIORITY:  # an int32 beyond what users may set
            raise _Invalid(
                f"spec.priority: Invalid value: {priority}: must be less than or equal to "
                f"{HIGHEST_USER_PRIORITY}"
            )
