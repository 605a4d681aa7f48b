"""What the controllers of deploy/examples/integrations/ create from a user's object:
the pods (as the API server stores them, defaults applied) and the gang objects, each
written as the controller's source and documentation describe it (cited per function).
Random name suffixes are fixed strings so that tests are repeatable."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.integrations.controllers import VOLCANO_JOB_UID

JsonObject = dict[str, Any]
SCHEDULER = "gang-scheduler"


@dataclass
class Created:
    """A controller's output: pods, and gang objects by API ("scheduling.x-k8s.io",
    "scheduling.volcano.sh")."""

    pods: list[JsonObject] = field(default_factory=list)
    groups: list[tuple[str, JsonObject]] = field(default_factory=list)


def pod_from_template(
    name: str,
    namespace: str,
    template: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str | None = None,
) -> JsonObject:
    """A pod from a pod template, the controller's labels and annotations added, as the
    API server stores it: requests defaulted from limits where unset (core/v1 defaults,
    SetDefaults_Pod... for containers)."""
    meta = template.get("metadata") or {}
    spec = copy.deepcopy(dict(template["spec"]))
    if scheduler and not spec.get("schedulerName"):
        spec["schedulerName"] = scheduler
    for container in spec.get("containers", []):
        resources = container.setdefault("resources", {})
        requests = resources.setdefault("requests", {})
        for resource, quantity in (resources.get("limits") or {}).items():
            requests.setdefault(resource, quantity)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": {**(meta.get("labels") or {}), **(labels or {})},
            "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _name_and_namespace(obj: Mapping[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["name"], obj["metadata"].get("namespace", "default")


def training_operator(job: Mapping[str, Any], replicas_key: str) -> Created:
    """The Kubeflow training operator (v1) in its scheduler-plugins gang mode, with
    --gang-scheduler-name=gang-scheduler: a PodGroup scheduling.x-k8s.io/v1alpha1 named
    after the job (minMember: runPolicy.schedulingPolicy.minAvailable, else every
    replica; scheduleTimeoutSeconds copied), and per replica a pod `<job>-<type>-<i>`
    with the job's labels, the lower-cased replica type and index, the pod-group label,
    and the gang scheduler's name where the template names none."""
    name, namespace = _name_and_namespace(job)
    specs: Mapping[str, Any] = job["spec"][replicas_key]
    created = Created()
    for rtype, spec in specs.items():
        kind = rtype.lower()
        for index in range(spec.get("replicas", 1)):
            labels = {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": kind,
                "training.kubeflow.org/replica-index": str(index),
                "scheduling.x-k8s.io/pod-group": name,
            }
            if kind == "master":
                labels["training.kubeflow.org/job-role"] = "master"
            created.pods.append(
                pod_from_template(
                    f"{name}-{kind}-{index}", namespace, spec["template"], labels, None, SCHEDULER
                )
            )
    policy = (job["spec"].get("runPolicy") or {}).get("schedulingPolicy") or {}
    total = sum(spec.get("replicas", 1) for spec in specs.values())
    group_spec: JsonObject = {"minMember": policy.get("minAvailable", total)}
    if policy.get("scheduleTimeoutSeconds"):
        group_spec["scheduleTimeoutSeconds"] = policy["scheduleTimeoutSeconds"]
    created.groups.append(
        (
            "scheduling.x-k8s.io",
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace},
                "spec": group_spec,
            },
        )
    )
    return created


def mpi_operator(job: Mapping[str, Any]) -> Created:
    """The MPI Operator (v2beta1): the launcher through a batch Job `<job>-launcher`
    (its pod `<job>-launcher-<suffix>`), workers as pods `<job>-worker-<i>`; each pod
    labelled with the job's name, its role (launcher|worker) and the operator's name,
    workers with their index."""
    name, namespace = _name_and_namespace(job)
    specs = job["spec"]["mpiReplicaSpecs"]
    common = {
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/operator-name": "mpi-operator",
    }
    created = Created()
    launcher = {**common, "training.kubeflow.org/job-role": "launcher"}
    created.pods.append(
        pod_from_template(
            f"{name}-launcher-x7k2p", namespace, specs["Launcher"]["template"], launcher
        )
    )
    for index in range(specs["Worker"].get("replicas", 1)):
        worker = {
            **common,
            "training.kubeflow.org/job-role": "worker",
            "training.kubeflow.org/replica-index": str(index),
        }
        created.pods.append(
            pod_from_template(
                f"{name}-worker-{index}", namespace, specs["Worker"]["template"], worker
            )
        )
    return created


def job_controller(
    job: Mapping[str, Any], name: str, namespace: str, extra: Mapping[str, str] | None = None
) -> list[JsonObject]:
    """The Job controller: `parallelism` pods (all at once, as our examples set it); an
    Indexed Job's pods `<job>-<index>-<suffix>` with the index as label and annotation."""
    spec = job["spec"]  # a Job, or a JobSet's job template: both have one
    indexed = spec.get("completionMode") == "Indexed"
    pods = []
    for index in range(spec.get("parallelism", 1)):
        labels = {
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": f"uid-{name}",
            "controller-uid": f"uid-{name}",
            **(extra or {}),
        }
        annotations = {}
        pod_name = f"{name}-{index}-q{index}z9" if indexed else f"{name}-q{index}z9"
        if indexed:
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
        pods.append(pod_from_template(pod_name, namespace, spec["template"], labels, annotations))
    return pods


def jobset_controller(jobset: Mapping[str, Any]) -> Created:
    """JobSet: per replicated job and replica a Job `<jobset>-<rjob>-<i>`, its pods
    labelled (and annotated) with the JobSet's name, the replicated job's name and
    replicas, and the job's index."""
    name, namespace = _name_and_namespace(jobset)
    created = Created()
    for rjob in jobset["spec"]["replicatedJobs"]:
        for index in range(rjob.get("replicas", 1)):
            extra = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob.get("replicas", 1)),
                "jobset.sigs.k8s.io/job-index": str(index),
            }
            job_name = f"{name}-{rjob['name']}-{index}"
            created.pods += job_controller(rjob["template"], job_name, namespace, extra)
    return created


def volcano_controller(job: Mapping[str, Any]) -> Created:
    """Volcano's job controller: the PodGroup `<job>-<uid>` (minMember: minAvailable,
    minTaskMember: each task's minAvailable, queue), and per task replica a pod
    `<job>-<task>-<i>` annotated with the PodGroup and its task, labelled with the job,
    task, index and queue, its schedulerName the job's where the template names none."""
    name, namespace = _name_and_namespace(job)
    group = f"{name}-{VOLCANO_JOB_UID}"
    queue = job["spec"].get("queue", "default")
    created = Created()
    tasks: dict[str, int] = {}
    for task in job["spec"]["tasks"]:
        if "minAvailable" in task:
            tasks[task["name"]] = task["minAvailable"]
        for index in range(task.get("replicas", 1)):
            created.pods.append(
                pod_from_template(
                    f"{name}-{task['name']}-{index}",
                    namespace,
                    task["template"],
                    {
                        "volcano.sh/job-name": name,
                        "volcano.sh/job-namespace": namespace,
                        "volcano.sh/task-spec": task["name"],
                        "volcano.sh/task-index": str(index),
                        "volcano.sh/queue-name": queue,
                    },
                    {
                        "scheduling.k8s.io/group-name": group,
                        "volcano.sh/job-name": name,
                        "volcano.sh/job-version": "0",
                        "volcano.sh/task-spec": task["name"],
                        "volcano.sh/queue-name": queue,
                    },
                    job["spec"].get("schedulerName"),
                )
            )
    created.groups.append(
        (
            "scheduling.volcano.sh",
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": namespace},
                "spec": {
                    "minMember": job["spec"]["minAvailable"],
                    "minTaskMember": tasks,
                    "queue": queue,
                },
                "status": {"phase": "Inqueue"},
            },
        )
    )
    return created
