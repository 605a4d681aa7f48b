"""New Nodes as a real cluster admits them, and the controller that readies them.

- Admission: the TaintNodesByCondition plugin (plugin/pkg/admission/nodetaint, on by
  default) adds `node.kubernetes.io/not-ready:NoSchedule` to every Node created
  through the API, unless a taint with that key and effect is there already, so that
  nothing is scheduled on a node before it says it is ready.
- The node lifecycle controller (pkg/controller/nodelifecycle, its NoSchedule tainting
  pass) takes that taint off once the node's Ready condition is True. EMULATOR GUESS:
  only that part is emulated (no unreachable taint when heartbeats stop, no NoExecute
  taints, no eviction), and it acts `delay` seconds after the node's write.

Nodes loaded with `KubeApiEmulator.put_node` bypass admission, as a restore would.
"""

from __future__ import annotations

import copy
from typing import Any

NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def _is_not_ready_taint(taint: Any) -> bool:
    return (
        isinstance(taint, dict)
        and taint.get("key") == NOT_READY_TAINT
        and taint.get("effect") == "NoSchedule"
    )


def admit_new_node(obj: dict[str, Any]) -> None:
    """Add the not-ready taint to a Node being created (in place)."""
    spec = obj.setdefault("spec", {})
    taints = list(spec.get("taints") or [])
    if not any(_is_not_ready_taint(t) for t in taints):
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    spec["taints"] = taints


def is_ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
    )


def readied(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The node with the not-ready taint taken off, when it is Ready and still carries
    it; None when the controller has nothing to do."""
    taints = (obj.get("spec") or {}).get("taints") or []
    if not is_ready(obj) or not any(_is_not_ready_taint(t) for t in taints):
        return None
    new = copy.deepcopy(obj)
    new["spec"]["taints"] = [t for t in taints if not _is_not_ready_taint(t)]
    return new
