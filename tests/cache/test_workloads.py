"""Gangs inferred from workloads (cache/workload_labels.py, cache/workloads.py): the
gang each controller's pods form, its size from the owner's spec, and a hostile spec a
problem on the gang, never an exception."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.pod import GangKeys, pod_from_api
from cache.workloads import JOB, JOBSET, MPIJOB, PYTORCHJOB, RAYCLUSTER, OwnerKind
from scheduler.gangs.gang import Gang, GangIndex
from tests.integrations import workload_objects as w

INFER = GangKeys(infer_namespaces=frozenset({"team"}))


def gang_of(pods: list[dict[str, Any]], owners: Sequence[tuple[OwnerKind, Any]] = ()) -> Gang:
    index = GangIndex("gang-scheduler", INFER)
    for obj in pods:
        index.upsert_pod(pod_from_api(obj, keys=INFER))
    for owner, obj in owners:
        index.upsert_podgroup(owner.parse(obj))
    gangs, _ = index.assemble()
    assert len(gangs.gangs) == 1, list(gangs.gangs)
    return next(iter(gangs.gangs.values()))


def test_an_indexed_job_is_one_gang_of_min_parallelism_completions() -> None:
    pods = [w.indexed_job_pod("train", i) for i in range(3)]
    gang = gang_of(pods, [(JOB, w.indexed_job("train", 4, 8))])
    assert gang.key == "team/job:train"
    assert (gang.min_member, gang.size_source) == (4, "podgroup")
    assert gang.waiting_message == "waiting for 1 more member: 3/4 exist"
    assert not gang.problems


def test_a_jobset_is_one_gang_over_all_its_replicated_jobs() -> None:
    spec = [("leader", 1, 1), ("workers", 2, 4)]
    pods = [w.jobset_pod("llm", "workers", j, i) for j in range(2) for i in range(4)]
    gang = gang_of(pods, [(JOBSET, w.jobset("llm", spec))])
    assert (gang.key, gang.min_member) == ("team/jobset:llm", 9)
    assert gang.waiting_message == "waiting for 1 more member: 8/9 exist"


def test_pytorchjob_and_mpijob_with_its_launcher() -> None:
    pods = [w.pytorchjob_pod("pt", "master", 0)] + [
        w.pytorchjob_pod("pt", "worker", i) for i in range(2)
    ]
    gang = gang_of(pods, [(PYTORCHJOB, w.pytorchjob("pt", 1, 3))])
    assert (gang.key, gang.min_member, gang.existing) == ("team/kubeflow:pt", 4, 3)
    pods = [w.mpijob_launcher("mpi")] + [w.mpijob_worker("mpi", i) for i in range(2)]
    gang = gang_of(pods, [(MPIJOB, w.mpijob("mpi", 2))])
    assert (gang.key, gang.min_member, gang.ready) == ("team/kubeflow:mpi", 3, True)


def test_a_raycluster_is_its_head_plus_workers_at_their_autoscaling_minimum() -> None:
    groups = [{"groupName": "gpu", "replicas": 8, "minReplicas": 2, "numOfHosts": 2}]
    pods = [w.ray_pod("rc", "head", 0)] + [w.ray_pod("rc", "worker", i) for i in range(4)]
    gang = gang_of(pods, [(RAYCLUSTER, w.raycluster("rc", groups, autoscaling=True))])
    assert (gang.key, gang.min_member, gang.ready) == ("team/ray:rc", 5, True)
    gang = gang_of(pods, [(RAYCLUSTER, w.raycluster("rc", groups))])
    assert gang.min_member == 17  # without autoscaling: replicas x hosts + head


def test_each_leaderworkerset_group_is_its_own_gang_sized_by_the_pods() -> None:
    pods = [w.lws_pod("srv", 1, i, size=4) for i in range(3)]
    gang = gang_of(pods)
    assert (gang.key, gang.min_member, gang.size_source) == ("team/lws:srv:1", 4, "annotation")
    assert gang.waiting_message == "waiting for 1 more member: 3/4 exist"


def test_an_explicit_label_wins_and_other_namespaces_are_left_alone() -> None:
    pod = w.indexed_job_pod("train", 0)
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "mine"
    assert pod_from_api(pod, keys=INFER).gang_name == "mine"
    elsewhere = w.indexed_job_pod("train", 0, namespace="other")
    assert pod_from_api(elsewhere, keys=INFER).gang_name is None
    # Off by default.
    assert pod_from_api(w.indexed_job_pod("train", 0)).gang_name is None
    everywhere = GangKeys(infer_namespaces=frozenset({"*"}))
    assert pod_from_api(elsewhere, keys=everywhere).gang_name == "job:train"


def test_a_plain_job_or_a_lone_ray_label_is_no_gang() -> None:
    pod = w.indexed_job_pod("batch", 0)
    del pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
    assert pod_from_api(pod, keys=INFER).gang_name is None
    pod = w.ray_pod("rc", "worker", 0)
    pod["metadata"]["ownerReferences"] = "not a list"
    assert pod_from_api(pod, keys=INFER).gang_name is None


@pytest.mark.parametrize(
    ("owner", "obj", "problem"),
    [
        (JOB, w.indexed_job("j", 2**31 - 1, None), None),
        (JOB, w.indexed_job("j", -1, 4), "spec.parallelism must be a non-negative 32-bit"),
        (JOB, w.indexed_job("j", "4", 4), "spec.parallelism must be a non-negative 32-bit"),
        (JOB, w.indexed_job("j", 0, 4), "adds up to 0: no pod to schedule"),
        (
            JOBSET,
            w.jobset("js", [("a", 2**31 - 1, 2**31 - 1)]),
            "spec.replicatedJobs adds up to 4611686014132420609, beyond the largest gang",
        ),
        (JOBSET, w.jobset("js", [("a", -3, 1)]), "spec.replicatedJobs[0].replicas must be"),
        (PYTORCHJOB, w.pytorchjob("p", 1, [4]), "spec.pytorchReplicaSpecs.Worker.replicas must be"),
        (RAYCLUSTER, w.raycluster("r", "many"), "spec.workerGroupSpecs must be a list"),
    ],
)
def test_a_hostile_owner_spec_is_a_problem_on_the_gang(
    owner: OwnerKind, obj: Any, problem: str | None
) -> None:
    group = owner.parse(obj)
    if problem is None:
        assert group.min_member == 2**31 - 1 and not group.problems
        return
    assert group.min_member is None
    assert problem in group.problems[0], group.problems


def test_the_problem_is_told_on_the_pods_naming_the_owner() -> None:
    pods = [w.indexed_job_pod("train", i) for i in range(2)]
    gang = gang_of(pods, [(JOB, w.indexed_job("train", -1, 4))])
    assert gang.size_source == "default"
    reasons = {p.reason for p in gang.problems}
    assert reasons == {"InvalidPodGroup", "GangSizeUnknown"}
    invalid = next(p for p in gang.problems if p.reason == "InvalidPodGroup")
    assert invalid.message.startswith("Job team/train: spec.parallelism must be")
    unknown = next(p for p in gang.problems if p.reason == "GangSizeUnknown")
    assert "inferred from its pods' controller labels, but Job team/train" in unknown.message


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=20,
)


@given(spec=_JSON, owner=st.sampled_from([JOB, JOBSET, PYTORCHJOB, MPIJOB, RAYCLUSTER]))
def test_no_owner_spec_raises(spec: Any, owner: OwnerKind) -> None:
    group = owner.parse({"metadata": {"name": "x", "namespace": "team"}, "spec": spec})
    assert group.min_member is None or 1 <= group.min_member <= 2**31 - 1
    assert group.min_member is not None or group.problems or not isinstance(spec, dict)


@given(
    labels=st.dictionaries(
        st.sampled_from(
            [
                "jobset.sigs.k8s.io/jobset-name",
                "training.kubeflow.org/job-name",
                "training.kubeflow.org/replica-type",
                "ray.io/cluster",
                "leaderworkerset.sigs.k8s.io/name",
                "leaderworkerset.sigs.k8s.io/group-index",
                "batch.kubernetes.io/job-name",
                "batch.kubernetes.io/job-completion-index",
            ]
        ),
        st.text(max_size=5),
    ),
    owners=_JSON,
    size=_JSON,
)
def test_no_pod_labels_raise_and_inferred_names_never_clash_with_written_ones(
    labels: dict[str, str], owners: Any, size: Any
) -> None:
    obj = w.controlled_pod("p", {}, labels, annotations={})
    obj["metadata"]["ownerReferences"] = owners
    obj["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] = size
    pod = pod_from_api(obj, keys=INFER)
    assert pod.gang_name is None or ":" in pod.gang_name


@pytest.mark.parametrize(
    ("value", "asked"),
    [("0.5", "nvidia.com/vgpu: 500 (1000 = one GPU)"), ("abc", "nvidia.com/vgpu: <milli-GPUs>")],
)
def test_kai_gpu_fraction_is_refused_naming_the_request_to_write(value: str, asked: str) -> None:
    """KAI's gpu-fraction would be booked here but never granted by the kubelet: the pod
    is refused, told the nvidia.com/vgpu request that stands for it."""
    obj = w.controlled_pod("notebook", {}, {}, annotations={"gpu-fraction": value}, gpus=0)
    (problem,) = pod_from_api(obj).problems
    assert problem.startswith(f"annotation gpu-fraction='{value}' (KAI-Scheduler's GPU sharing)")
    assert asked in problem
