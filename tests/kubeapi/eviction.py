"""The pods/eviction subresource and PodDisruptionBudgets (policy/v1), as
pkg/registry/core/pod/storage/eviction.go does it:

- the body must be an Eviction naming the pod of the URL (400 otherwise);
- a pod that is Pending, finished or already being deleted is deleted without
  looking at budgets;
- the budgets of the pod's namespace whose selector matches its labels (an empty
  selector matches nothing): more than one is a 500 Status; none, the pod is deleted;
- one: if its status.observedGeneration is behind its generation, 429 (the budget "is
  still being processed"); if disruptionsAllowed is 0, 429 TooManyRequests with a
  `DisruptionBudget` cause; else disruptionsAllowed is decremented, the pod recorded
  in status.disruptedPods, and the pod deleted (gracefully, as a DELETE would).

EMULATOR GUESS: the disruption controller is not emulated as a loop. A budget's
status is computed when an eviction needs it, from the pods it selects: expected
pods are those not finished, healthy those Running and not being deleted (readiness
not looked at) nor in disruptedPods; desiredHealthy is minAvailable (an integer, or a
percentage of expected rounded up) or expected minus maxUnavailable (likewise, rounded
up); disruptionsAllowed is healthy minus desired, never below 0. The real controller
also needs the pods' controller scale, and answers asynchronously.
The not-ready-pod branch of eviction.go (deletion with a resourceVersion precondition)
is not emulated.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from tests.kubeapi import errors
from tests.kubeapi.errors import ApiError
from tests.kubeapi.store import Store, StoredObject

FINISHED = ("Succeeded", "Failed")


def check_eviction(name: str, body: Any) -> None:
    if not isinstance(body, dict) or body.get("kind") not in (None, "Eviction"):
        raise errors.bad_request(f"not a Eviction object: {type(body).__name__}")
    meta = body.get("metadata") or {}
    if meta.get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")


def bypasses_budgets(pod: dict[str, Any]) -> bool:
    """canIgnorePDB: the pod already is a disruption (or never ran)."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    return phase in (*FINISHED, "Pending") or bool(deleting)


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector; nil or empty selects nothing (as eviction.go says)."""
    if not isinstance(selector, dict):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expression in expressions:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def budgets_of(store: Store, budgets_type: Any, pod: dict[str, Any]) -> list[StoredObject]:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    return [
        budget
        for budget in store.of(budgets_type).sorted_objects()
        if budget.namespace == meta.get("namespace")
        and selector_matches((budget.obj.get("spec") or {}).get("selector"), labels)
    ]


def _amount(value: Any, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(expected * int(value[:-1]) / 100)
    return int(value)


def computed_status(budget: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The status the disruption controller would write (EMULATOR GUESS, above)."""
    spec = budget.get("spec") or {}
    status = dict(budget.get("status") or {})
    disrupted = status.get("disruptedPods") or {}
    selected = [
        p
        for p in pods
        if selector_matches(spec.get("selector"), (p.get("metadata") or {}).get("labels") or {})
        and (p.get("status") or {}).get("phase") not in FINISHED
    ]
    expected = len(selected)
    healthy = sum(
        1
        for p in selected
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"].get("name") not in disrupted
    )
    if spec.get("minAvailable") is not None:
        desired = _amount(spec["minAvailable"], expected)
    elif spec.get("maxUnavailable") is not None:
        desired = expected - _amount(spec["maxUnavailable"], expected)
    else:
        desired = expected  # EMULATOR GUESS: validation requires one of the two
    status.update(
        observedGeneration=(budget.get("metadata") or {}).get("generation", 1),
        expectedPods=expected,
        currentHealthy=healthy,
        desiredHealthy=desired,
        disruptionsAllowed=max(0, healthy - desired),
    )
    return status


def refusal(name: str, cause: str) -> ApiError:
    error = ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        {"causes": [{"reason": "DisruptionBudget", "message": cause}], "retryAfterSeconds": 0},
    )
    return error


def decremented(budget: dict[str, Any], status: dict[str, Any], pod_name: str) -> dict[str, Any]:
    """checkAndDecrement: the budget with one disruption taken, or a 429."""
    name = budget["metadata"]["name"]
    generation = (budget.get("metadata") or {}).get("generation", 1)
    if status.get("observedGeneration", 0) < generation:
        raise refusal(name, f"The disruption budget {name} is still being processed by the server.")
    if status["disruptionsAllowed"] == 0:
        raise refusal(
            name,
            f"The disruption budget {name} needs {status['desiredHealthy']} healthy pods "
            f"and has {status['currentHealthy']} currently",
        )
    status = dict(status)
    status["disruptionsAllowed"] -= 1
    disrupted = dict(status.get("disruptedPods") or {})
    disrupted[pod_name] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status["disruptedPods"] = disrupted
    return {**budget, "status": status}
