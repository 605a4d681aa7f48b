"""Status of Kubernetes' own PodGroups (scheduling.k8s.io/v1alpha2), as its types define
it: one `metav1.Condition` of type `PodGroupScheduled`, True with reason `Scheduled` once
the gang's required members are bound, False with reason `Unschedulable` while they are
not. Written with a strategic merge patch of the status subresource, which merges
`status.conditions` by type, so conditions other controllers set are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from cache.native_gang import NATIVE_GROUP, NATIVE_PLURAL, NATIVE_VERSION, SCHEDULED_CONDITION


@dataclass(frozen=True)
class NativeCondition:
    status: str  # "True" or "False"
    reason: str
    message: str

    def as_json(self, transition: float) -> dict[str, str]:
        stamp = datetime.fromtimestamp(transition, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "type": SCHEDULED_CONDITION,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": stamp,
        }


def native_condition(min_member: int, scheduled: int, why: str = "") -> NativeCondition:
    """The PodGroupScheduled condition for a gang of `min_member` with `scheduled`
    members bound; `why` it is not scheduled (what its members say) joins the message of
    a False condition. The API's type has no other field for it: its known reasons are
    `Unschedulable` and `SchedulerError`, the detail goes in `message`."""
    if scheduled >= min_member:
        return NativeCondition("True", "Scheduled", f"{scheduled}/{min_member} members scheduled")
    message = _unscheduled_message(min_member, scheduled, why)
    return NativeCondition("False", "Unschedulable", message)


def _unscheduled_message(min_member: int, scheduled: int, why: str) -> str:
    counts = f"{scheduled}/{min_member} members scheduled"
    return f"{counts}: {why}"[:MAX_MESSAGE] if why else counts


# metav1.Condition allows 32 KiB of message; a gang's reason needs far less.
MAX_MESSAGE = 4096


def native_status_path(namespace: str, name: str) -> str:
    return (
        f"/apis/{NATIVE_GROUP}/{NATIVE_VERSION}/namespaces/{namespace}/"
        f"{NATIVE_PLURAL}/{name}/status"
    )
