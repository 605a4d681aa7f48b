"""Gangs inferred from the workloads ML users run, so that their jobs need no edits.

Where a namespace is opted in (`gangInference.namespaces`), a pod that names no gang
itself (no pod-group label, Volcano or Kueue key, native scheduling group) is given
one from the labels its controller writes on every pod, and the gang's size is read
from the owner object's spec (kept by one optional informer per kind,
scheduler/kube/informer.py) or, for LeaderWorkerSet, from the size annotation its
controller writes on every pod. The label names are those of the controllers' own
sources (kubernetes-sigs/jobset api/jobset/v1alpha2, kubernetes-sigs/lws
api/leaderworkerset/v1, kubeflow/training-operator and mpi-operator, ray-project/kuberay
ray-operator/controllers/ray/utils/constant.go, kubernetes batch/v1):

- JobSet (and Trainer v2's TrainJob, which creates one): the whole JobSet; size the
  sum over `spec.replicatedJobs` of `replicas` x min(`parallelism`, `completions`).
- PyTorchJob, MPIJob: the job; size `spec.runPolicy.schedulingPolicy.minAvailable`,
  else the sum of the replica specs' `replicas` (the MPI launcher included).
- RayCluster (and RayJob's): head plus workers; size 1 + the sum over
  `spec.workerGroupSpecs` of (`minReplicas` when `enableInTreeAutoscaling`, else
  `replicas`) x `numOfHosts`.
- LeaderWorkerSet: one group (leader + workers); size from the pod annotation.
- Indexed Job: the Job; size min(`parallelism`, `completions`).

The pod labels read are in cache/workload_labels.py and docs/conventions.md.
The first rule that matches wins (a JobSet's pods are Indexed Job pods too). Inferred
gang names carry a kind prefix and a ':' ("jobset:train"), which no label value or
annotation a user writes may hold, so an inferred gang never merges with a named one.
A spec value that cannot be read (negative, not a number, beyond an int32 in total) is
a problem on the gang's pods, never an exception: the gang then has no size from its
owner and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.podgroup import PodGroupInfo
from cache.workload_labels import (
    JOB_PREFIX,
    JOBS_API,
    JOBSET_PREFIX,
    JOBSETS_API,
    KUBEFLOW_PREFIX,
    MPIJOBS_API,
    PYTORCHJOBS_API,
    RAY_PREFIX,
    RAYCLUSTERS_API,
)


# --- owner objects -> size records -----------------------------------------------------
class _Unreadable(ValueError):
    """A spec value that gives no size; its message names the field."""


def _count(value: object, where: str, default: int | None = None) -> int:
    """A non-negative int32 (the Go type of every count read here)."""
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
        raise _Unreadable(f"{where} must be a non-negative 32-bit integer, got {shown(value)}")
    return value


def _bounded(total: int, what: str) -> int:
    if total > MAX_INT32:
        raise _Unreadable(f"{what} adds up to {total}, beyond the largest gang (2^31-1)")
    if total < 1:
        raise _Unreadable(f"{what} adds up to {total}: no pod to schedule")
    return total


def _items(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Unreadable(f"{where} must be a list, got {shown(value)}")
    return value


def _job_pods(job_spec: Mapping[str, Any], where: str) -> int:
    """Pods a Job runs at once when whole: min(parallelism, completions) (batch/v1
    defaults: parallelism 1, completions unset = parallelism)."""
    parallelism = _count(job_spec.get("parallelism"), f"{where}.parallelism", 1)
    completions = job_spec.get("completions")
    if completions is None:
        return parallelism
    return min(parallelism, _count(completions, f"{where}.completions"))


def _job_size(spec: Mapping[str, Any]) -> int:
    if spec.get("completionMode") != "Indexed":
        raise _Unreadable(
            f"spec.completionMode is {shown(spec.get('completionMode'))}, not Indexed: "
            "the Job's pods are not one gang"
        )
    return _bounded(_job_pods(spec, "spec"), "spec.parallelism/completions")


def _jobset_size(spec: Mapping[str, Any]) -> int:
    total = 0
    for i, replicated in enumerate(_items(spec.get("replicatedJobs"), "spec.replicatedJobs")):
        where = f"spec.replicatedJobs[{i}]"
        item = mapping(replicated)
        replicas = _count(item.get("replicas"), f"{where}.replicas", 1)
        job_spec = mapping(mapping(item.get("template")).get("spec"))
        total += replicas * _job_pods(job_spec, f"{where}.template.spec")
    return _bounded(total, "spec.replicatedJobs")


def _replica_specs_size(spec: Mapping[str, Any], field: str) -> int:
    least = mapping(mapping(spec.get("runPolicy")).get("schedulingPolicy")).get("minAvailable")
    if least is not None:
        where = "spec.runPolicy.schedulingPolicy.minAvailable"
        return _bounded(_count(least, where), where)
    replica_specs = spec.get(field)
    if not isinstance(replica_specs, Mapping):
        raise _Unreadable(f"spec.{field} must be a map, got {shown(replica_specs)}")
    total = sum(
        _count(mapping(each).get("replicas"), f"spec.{field}.{str(role)[:60]}.replicas", 1)
        for role, each in replica_specs.items()
    )
    return _bounded(total, f"spec.{field}")


def _raycluster_size(spec: Mapping[str, Any]) -> int:
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    total = 1  # the head
    for i, group in enumerate(_items(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")):
        where = f"spec.workerGroupSpecs[{i}]"
        item = mapping(group)
        field = "minReplicas" if autoscaling else "replicas"
        # KubeRay's CRD defaults both to 0 (ray-operator/apis/ray/v1 WorkerGroupSpec).
        replicas = _count(item.get(field), f"{where}.{field}", 0)
        hosts = _count(item.get("numOfHosts"), f"{where}.numOfHosts", 1)
        total += replicas * hosts
    return _bounded(total, "the head plus spec.workerGroupSpecs")


@dataclass(frozen=True)
class OwnerKind:
    """One workload kind: its API, the gang prefix and how its spec gives a size."""

    kind: str
    api: str
    prefix: str
    size: Callable[[Mapping[str, Any]], int]  # raises _Unreadable

    def parse(self, obj: Mapping[str, Any]) -> PodGroupInfo:
        """The owner as a gang definition (the gang its pods infer); never raises."""
        meta = metadata(obj)
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        problems: tuple[str, ...] = ()
        size: int | None = None
        try:
            size = self.size(mapping(mapping(obj).get("spec")))
        except _Unreadable as error:
            problems = (str(error),)
        except MALFORMED as error:
            problems = (f"the {self.kind} object is malformed ({type(error).__name__})",)
        return PodGroupInfo(
            namespace=namespace,
            name=self.prefix + name,
            resource_version=str(meta.get("resourceVersion") or ""),
            min_member=size,
            created=parse_time(meta.get("creationTimestamp")),
            problems=problems,
            uid=str(meta.get("uid") or ""),
            api=self.api,
            described=f"{self.kind} {namespace}/{name}",
        )


JOB = OwnerKind("Job", JOBS_API, JOB_PREFIX, _job_size)
JOBSET = OwnerKind("JobSet", JOBSETS_API, JOBSET_PREFIX, _jobset_size)
PYTORCHJOB = OwnerKind(
    "PyTorchJob",
    PYTORCHJOBS_API,
    KUBEFLOW_PREFIX,
    lambda spec: _replica_specs_size(spec, "pytorchReplicaSpecs"),
)
MPIJOB = OwnerKind(
    "MPIJob",
    MPIJOBS_API,
    KUBEFLOW_PREFIX,
    lambda spec: _replica_specs_size(spec, "mpiReplicaSpecs"),
)
RAYCLUSTER = OwnerKind("RayCluster", RAYCLUSTERS_API, RAY_PREFIX, _raycluster_size)
