"""Pods and gang objects as the controllers users run create them, for the integration
tests: each builder follows what the controller's source writes (cited per builder), on
top of tests.factories.pod_obj, so that the tests feed the scheduler what it will see."""

from __future__ import annotations

from typing import Any

from tests.factories import pod_obj

VOLCANO_JOB_UID = "3f2b6c1e-0000-4000-8000-000000000001"


def volcano_podgroup_obj(
    job: str,
    min_member: int,
    min_task_member: dict[str, int] | None = None,
    queue: str = "default",
    namespace: str = "default",
) -> dict[str, Any]:
    """The PodGroup Volcano's job controller creates for a Job: named `<job>-<job uid>`,
    minMember from the job's minAvailable, minTaskMember from each task's minAvailable."""
    spec: dict[str, Any] = {"minMember": min_member, "queue": queue}
    if min_task_member is not None:
        spec["minTaskMember"] = dict(min_task_member)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": f"{job}-{VOLCANO_JOB_UID}", "namespace": namespace},
        "spec": spec,
        "status": {"phase": "Inqueue"},
    }


def volcano_pod(
    job: str, task: str, index: int, *, gpus: int = 1, namespace: str = "default"
) -> dict[str, Any]:
    """A pod of a Volcano Job (batch.volcano.sh/v1alpha1) whose job names our scheduler:
    the job controller names it `<job>-<task>-<index>`, annotates the PodGroup's name
    under `scheduling.k8s.io/group-name` and the task under `volcano.sh/task-spec`, and
    labels it with the job, task, task index and queue."""
    group = f"{job}-{VOLCANO_JOB_UID}"
    obj = pod_obj(
        f"{job}-{task}-{index}",
        namespace=namespace,
        gpus=gpus,
        annotations={
            "scheduling.k8s.io/group-name": group,
            "volcano.sh/job-name": job,
            "volcano.sh/job-version": "0",
            "volcano.sh/task-spec": task,
            "volcano.sh/queue-name": "default",
        },
    )
    obj["metadata"]["labels"].update(
        {
            "volcano.sh/job-name": job,
            "volcano.sh/job-namespace": namespace,
            "volcano.sh/task-spec": task,
            "volcano.sh/task-index": str(index),
            "volcano.sh/queue-name": "default",
        }
    )
    return obj


def native_podgroup_obj(
    name: str, min_count: int | None, namespace: str = "default"
) -> dict[str, Any]:
    """A PodGroup of Kubernetes 1.36 (scheduling.k8s.io/v1alpha2) as a workload
    controller creates it from its Workload's template: the gang policy with minCount,
    or the basic policy when `min_count` is None."""
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podGroupTemplateRef": {
                "workload": {"workloadName": name, "podGroupTemplateName": "workers"}
            },
            "schedulingPolicy": policy,
        },
    }


def native_gang_pod(group: str, index: int, *, gpus: int = 1) -> dict[str, Any]:
    """A pod naming its PodGroup in `spec.schedulingGroup.podGroupName` (Kubernetes 1.36)
    and our scheduler, and nothing else about its gang."""
    obj = pod_obj(f"{group}-{index}", gpus=gpus)
    obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    return obj


KUEUE_GATE = "kueue.x-k8s.io/admission"


def kueue_pod(group: str, index: int, total: int | str, *, gated: bool = True) -> dict[str, Any]:
    """A member of a Kueue plain-pod group, as Kueue documents them: the queue and
    group-name labels and the total-count annotation on every member; Kueue's webhook
    adds the `kueue.x-k8s.io/managed` label and the admission scheduling gate, which
    Kueue removes once the group's Workload is admitted."""
    obj = pod_obj(
        f"{group}-{index}",
        gpus=1,
        annotations={"kueue.x-k8s.io/pod-group-total-count": str(total)},
    )
    obj["metadata"]["labels"].update(
        {
            "kueue.x-k8s.io/queue-name": "user-queue",
            "kueue.x-k8s.io/pod-group-name": group,
            "kueue.x-k8s.io/managed": "true",
        }
    )
    if gated:
        obj["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}]
    return obj
