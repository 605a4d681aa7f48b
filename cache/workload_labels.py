"""Which gang a pod's controller put it in, read from the labels and owner references
the controller writes on every pod (cache/workloads.py says which workloads, and how
their size is read). Pure, and imported by cache/pod.py: nothing here imports it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cache.jsonobj import mapping

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
# mpi-operator v2 marks its pods' role here (launcher, worker).
KUBEFLOW_JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
RAY_CLUSTER_LABEL = "ray.io/cluster"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

# The gang names' prefixes, one per owner kind (and the API that sizes it).
JOBSET_PREFIX = "jobset:"
KUBEFLOW_PREFIX = "kubeflow:"
RAY_PREFIX = "ray:"
LWS_PREFIX = "lws:"
JOB_PREFIX = "job:"

# The owner APIs, as the keys under which their size records are held (one per kind:
# PyTorchJob and MPIJob share the group kubeflow.org, and a relist of one must never
# drop the other's records).
JOBS_API = "jobs.batch"
JOBSETS_API = "jobsets.jobset.x-k8s.io"
PYTORCHJOBS_API = "pytorchjobs.kubeflow.org"
MPIJOBS_API = "mpijobs.kubeflow.org"
RAYCLUSTERS_API = "rayclusters.ray.io"
WORKLOAD_APIS = (JOBSETS_API, PYTORCHJOBS_API, MPIJOBS_API, RAYCLUSTERS_API, JOBS_API)

INFERRED_PREFIXES = (JOBSET_PREFIX, KUBEFLOW_PREFIX, RAY_PREFIX, LWS_PREFIX, JOB_PREFIX)


def is_inferred_gang(name: str) -> bool:
    """Whether a gang name was inferred here (no name a user writes holds a ':')."""
    return name.startswith(INFERRED_PREFIXES)


_KUBEFLOW_OWNERS = frozenset({"PyTorchJob", "MPIJob"})


@dataclass(frozen=True, slots=True)
class InferredGang:
    """The gang a pod's controller put it in, and the size written on the pod (LWS)."""

    name: str
    size_text: str | None = None
    size_key: str | None = None


def _is_mpi_launcher(labels: Mapping[str, str]) -> bool:
    """An MPIJob's launcher: run as a batch Job by mpi-operator v2, so its owner is that
    Job, not the MPIJob; its labels say whose launcher it is."""
    return "launcher" in (
        labels.get(KUBEFLOW_JOB_ROLE_LABEL),
        labels.get(KUBEFLOW_REPLICA_TYPE_LABEL),
    )


def _controller_kinds(owners: object) -> frozenset[str]:
    """The kinds of the pod's owner references (its controller's among them)."""
    if not isinstance(owners, list):
        return frozenset()
    return frozenset(
        kind for ref in owners if isinstance(kind := mapping(ref).get("kind"), str) and kind
    )


def infer_gang(
    labels: Mapping[str, str], annotations: Mapping[str, Any], owners: object
) -> InferredGang | None:
    """The gang of a pod from its controller's labels and owner references; None for a
    pod of no workload known here. Never raises."""
    kinds = _controller_kinds(owners)
    jobset = labels.get(JOBSET_NAME_LABEL)
    if jobset:
        return InferredGang(JOBSET_PREFIX + jobset)
    kubeflow = labels.get(KUBEFLOW_JOB_NAME_LABEL)
    if kubeflow and (kinds & _KUBEFLOW_OWNERS or _is_mpi_launcher(labels)):
        return InferredGang(KUBEFLOW_PREFIX + kubeflow)
    ray = labels.get(RAY_CLUSTER_LABEL)
    if ray and "RayCluster" in kinds:
        return InferredGang(RAY_PREFIX + ray)
    lws, group = labels.get(LWS_NAME_LABEL), labels.get(LWS_GROUP_INDEX_LABEL)
    if lws and group:
        size = annotations.get(LWS_SIZE_ANNOTATION)
        return InferredGang(
            f"{LWS_PREFIX}{lws}:{group}",
            size_text=size if isinstance(size, str) else None,
            size_key=LWS_SIZE_ANNOTATION,
        )
    job = labels.get(JOB_NAME_LABEL)
    if job and labels.get(JOB_COMPLETION_INDEX_LABEL) is not None and "Job" in kinds:
        return InferredGang(JOB_PREFIX + job)
    return None
