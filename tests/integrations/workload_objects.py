"""Owner objects and their pods as the real controllers create them (labels, owner
references, the spec fields the scheduler reads): Indexed Job (kubernetes' job
controller), JobSet (kubernetes-sigs/jobset), PyTorchJob (kubeflow training-operator),
MPIJob v2beta1 (kubeflow mpi-operator: the launcher run as a Job, its pods labelled with
operator-name, job-name and job-role), RayCluster (KubeRay), LeaderWorkerSet
(kubernetes-sigs/lws, pods of StatefulSets)."""

from __future__ import annotations

from typing import Any

from tests.factories import pod_obj


def _owner(api_version: str, kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{kind.lower()}-{name}",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "uid": f"uid-owner-{name}"}


def controlled_pod(
    name: str,
    owner: dict[str, Any],
    labels: dict[str, str],
    *,
    annotations: dict[str, str] | None = None,
    namespace: str = "team",
    gpus: int = 1,
) -> dict[str, Any]:
    """A pod of our scheduler (the template names it) with its controller's labels."""
    obj = pod_obj(name, namespace=namespace, gpus=gpus, annotations=annotations)
    obj["metadata"]["labels"].update(labels)
    obj["metadata"]["ownerReferences"] = [owner]
    return obj


# --- Indexed Job ---------------------------------------------------------------------------
def indexed_job(
    name: str, parallelism: Any, completions: Any, namespace: str = "team"
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, namespace),
        "spec": {
            "parallelism": parallelism,
            "completions": completions,
            "completionMode": "Indexed",
            "template": {"spec": {"schedulerName": "gang-scheduler", "containers": []}},
        },
    }


def indexed_job_pod(job: str, index: int, namespace: str = "team") -> dict[str, Any]:
    """The job controller's labels (1.28+): job-name (both keys), controller-uid and
    the completion index (label and annotation); owner: the Job."""
    return controlled_pod(
        f"{job}-{index}-x{index}",
        _owner("batch/v1", "Job", job),
        {
            "batch.kubernetes.io/job-name": job,
            "job-name": job,
            "batch.kubernetes.io/controller-uid": f"uid-owner-{job}",
            "batch.kubernetes.io/job-completion-index": str(index),
        },
        annotations={"batch.kubernetes.io/job-completion-index": str(index)},
        namespace=namespace,
    )


# --- JobSet ------------------------------------------------------------------------------
def jobset(name: str, replicated: list[tuple[str, Any, Any]], namespace: str = "team") -> Any:
    """replicated: (name, replicas, parallelism) per replicatedJob (completions equal)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(name, namespace),
        "spec": {
            "replicatedJobs": [
                {
                    "name": rjob,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "completionMode": "Indexed",
                        }
                    },
                }
                for rjob, replicas, parallelism in replicated
            ]
        },
    }


def jobset_pod(
    jobset_name: str, rjob: str, job_index: int, pod_index: int, namespace: str = "team"
) -> dict[str, Any]:
    """A pod of Job `<jobset>-<rjob>-<job index>`: the JobSet labels (copied from the Job
    template) plus the job controller's."""
    job = f"{jobset_name}-{rjob}-{job_index}"
    return controlled_pod(
        f"{job}-{pod_index}-p",
        _owner("batch/v1", "Job", job),
        {
            "jobset.sigs.k8s.io/jobset-name": jobset_name,
            "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            "jobset.sigs.k8s.io/job-index": str(job_index),
            "batch.kubernetes.io/job-name": job,
            "batch.kubernetes.io/job-completion-index": str(pod_index),
        },
        namespace=namespace,
    )


# --- Kubeflow ------------------------------------------------------------------------------
def pytorchjob(name: str, masters: Any, workers: Any, namespace: str = "team") -> Any:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _meta(name, namespace),
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": masters, "template": {}},
                "Worker": {"replicas": workers, "template": {}},
            }
        },
    }


def pytorchjob_pod(job: str, role: str, index: int, namespace: str = "team") -> dict[str, Any]:
    return controlled_pod(
        f"{job}-{role}-{index}",
        _owner("kubeflow.org/v1", "PyTorchJob", job),
        {
            "training.kubeflow.org/job-name": job,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": role,
            "training.kubeflow.org/replica-index": str(index),
        },
        namespace=namespace,
    )


def mpijob(name: str, workers: Any, namespace: str = "team") -> Any:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _meta(name, namespace),
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {}},
                "Worker": {"replicas": workers, "template": {}},
            }
        },
    }


def mpijob_worker(job: str, index: int, namespace: str = "team") -> dict[str, Any]:
    return controlled_pod(
        f"{job}-worker-{index}",
        _owner("kubeflow.org/v2beta1", "MPIJob", job),
        {
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": job,
            "training.kubeflow.org/job-role": "worker",
            "training.kubeflow.org/replica-index": str(index),
        },
        namespace=namespace,
    )


def mpijob_launcher(job: str, namespace: str = "team") -> dict[str, Any]:
    """mpi-operator v2 runs the launcher as a batch Job `<job>-launcher`: the pod's
    owner is that Job (non-indexed), its labels the MPIJob's."""
    return controlled_pod(
        f"{job}-launcher-abcde",
        _owner("batch/v1", "Job", f"{job}-launcher"),
        {
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": job,
            "training.kubeflow.org/job-role": "launcher",
            "batch.kubernetes.io/job-name": f"{job}-launcher",
        },
        namespace=namespace,
        gpus=0,
    )


# --- KubeRay -------------------------------------------------------------------------------
def raycluster(name: str, groups: Any, autoscaling: bool = False, namespace: str = "team") -> Any:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": _meta(name, namespace),
        "spec": {
            "enableInTreeAutoscaling": autoscaling,
            "headGroupSpec": {"template": {}},
            "workerGroupSpecs": groups,
        },
    }


def ray_pod(cluster: str, node_type: str, index: int, namespace: str = "team") -> Any:
    return controlled_pod(
        f"{cluster}-{node_type}-{index}",
        _owner("ray.io/v1", "RayCluster", cluster),
        {
            "ray.io/cluster": cluster,
            "ray.io/node-type": node_type,
            "ray.io/group": "headgroup" if node_type == "head" else "gpu",
            "ray.io/is-ray-node": "yes",
        },
        namespace=namespace,
    )


def rayjob_cluster(job: str, cluster: str, groups: Any, namespace: str = "team") -> Any:
    """The RayCluster a RayJob's controller creates for it (kuberay rayjob_controller.go):
    named `<job>-<suffix>`, controlled by the RayJob, labelled with where it came from."""
    obj = raycluster(cluster, groups, namespace=namespace)
    obj["metadata"]["ownerReferences"] = [_owner("ray.io/v1", "RayJob", job)]
    obj["metadata"]["labels"] = {
        "ray.io/originated-from-cr-name": job,
        "ray.io/originated-from-crd": "RayJob",
    }
    return obj


def rayjob_submitter_pod(job: str, namespace: str = "team") -> dict[str, Any]:
    """The pod of the RayJob's submitter: a plain (not Indexed) Job named as the RayJob,
    controlled by it; the pod is the Job's, with the job controller's labels."""
    return controlled_pod(
        f"{job}-submit",
        _owner("batch/v1", "Job", job),
        {
            "batch.kubernetes.io/job-name": job,
            "job-name": job,
            "batch.kubernetes.io/controller-uid": f"uid-owner-{job}",
        },
        namespace=namespace,
        gpus=0,
    )


# --- LeaderWorkerSet -----------------------------------------------------------------------
def lws_pod(
    lws: str, group: int, worker: int, size: Any, namespace: str = "team"
) -> dict[str, Any]:
    """The leader is pod `<lws>-<group>` of StatefulSet `<lws>`; worker w of group g is
    pod `<lws>-<g>-<w>` of StatefulSet `<lws>-<g>`. Every pod carries the group's size."""
    name = f"{lws}-{group}" if worker == 0 else f"{lws}-{group}-{worker}"
    owner = lws if worker == 0 else f"{lws}-{group}"
    return controlled_pod(
        name,
        _owner("apps/v1", "StatefulSet", owner),
        {
            "leaderworkerset.sigs.k8s.io/name": lws,
            "leaderworkerset.sigs.k8s.io/group-index": str(group),
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
            "leaderworkerset.sigs.k8s.io/group-key": f"key{group}",
        },
        annotations={"leaderworkerset.sigs.k8s.io/size": str(size)},
        namespace=namespace,
    )
