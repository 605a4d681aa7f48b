"""Pod-spec fields read into PodInfo: pod-level resources as kube-scheduler sums them,
and the fields this scheduler refuses, named in the pod's problems."""

from __future__ import annotations

from typing import Any

import pytest

from cache.pod import pod_from_api
from tests.factories import pod_obj

GIB = 2**30


def with_pod_resources(obj: dict[str, Any], **levels: dict[str, str]) -> dict[str, Any]:
    obj["spec"]["resources"] = levels
    return obj


def test_pod_level_requests_replace_the_containers_cpu_and_memory() -> None:
    # component-helpers resource.PodRequests: pod-level cpu/memory win over the sum.
    obj = with_pod_resources(pod_obj("p", cpu="1", memory="1Gi"), requests={"cpu": "3"})
    pod = pod_from_api(obj)
    assert pod.requests["cpu"] == 3000
    assert pod.requests["memory"] == GIB
    assert not pod.problems


def test_a_pod_level_limit_without_a_request_is_the_request() -> None:
    obj = with_pod_resources(pod_obj("p", cpu="1", memory="1Gi"), limits={"memory": "4Gi"})
    assert pod_from_api(obj).requests["memory"] == 4 * GIB


def test_overhead_adds_on_top_of_pod_level_requests() -> None:
    obj = with_pod_resources(pod_obj("p", cpu="1"), requests={"cpu": "2"})
    obj["spec"]["overhead"] = {"cpu": "250m"}
    assert pod_from_api(obj).requests["cpu"] == 2250


def test_pod_level_gpu_amounts_are_not_pod_level_resources() -> None:
    # Only cpu, memory and hugepages are pod-level resources; GPUs stay per container.
    obj = with_pod_resources(pod_obj("p", gpus=1), requests={"nvidia.com/gpu": "4"})
    assert pod_from_api(obj).gpu.count == 1


def test_dra_claims_are_read_not_refused() -> None:
    """Allocated by this scheduler now (docs/dra.md), so no longer a problem."""
    obj = pod_obj("p")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    pod = pod_from_api(obj)
    assert pod.problems == ()
    assert [c.claim_name for c in pod.resource_claims] == ["c"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("workloadRef", {"name": "train", "podGroup": "workers"})],
)
def test_a_native_gang_the_scheduler_cannot_read_is_refused_unless_labelled(
    field: str, value: object
) -> None:
    alone = pod_obj("p")
    alone["spec"][field] = value
    [problem] = pod_from_api(alone).problems
    assert f"spec.{field}" in problem
    labelled = pod_obj("p", gang="train")
    labelled["spec"][field] = value
    assert pod_from_api(labelled).problems == ()


@pytest.mark.parametrize(
    "field",
    ["os", "runtimeClassName", "hostNetwork", "priorityClassName", "preemptionPolicy"],
)
def test_fields_kube_scheduler_leaves_to_others_are_no_problem(field: str) -> None:
    values = {
        "os": {"name": "linux"},
        "runtimeClassName": "nvidia",
        "hostNetwork": True,
        "priorityClassName": "high",
        "preemptionPolicy": "Never",
    }
    obj = pod_obj("p")
    obj["spec"][field] = values[field]
    assert pod_from_api(obj).problems == ()


def test_kubernetes_own_scheduling_group_names_the_gang() -> None:
    native = pod_obj("p")
    native["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    pod = pod_from_api(native)
    assert (pod.problems, pod.gang_key) == ((), "default/train")
    # The label, where both are written, names the gang (docs/integrations.md).
    labelled = pod_obj("p", gang="other")
    labelled["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    assert pod_from_api(labelled).gang_key == "default/other"


@pytest.mark.parametrize("name", ["a/b", "A", "x:y", 7, "-x", "x" * 254])
def test_a_scheduling_group_that_is_no_object_name_is_refused(name: object) -> None:
    obj = pod_obj("p")
    obj["spec"]["schedulingGroup"] = {"podGroupName": name}
    pod = pod_from_api(obj)
    assert pod.gang_name is None
    assert any("spec.schedulingGroup.podGroupName" in problem for problem in pod.problems)
