"""Hostile values in the pod fields of host ports, preferred node affinity and
pod-level resources: reading a pod never raises, a pending pod gets a problem naming
the field, and one broken field does not hide the others a bound pod is accounted by."""

from __future__ import annotations

from typing import Any

import pytest

from cache.pod import pod_from_api
from cache.ports import HostPort
from cache.preferences import MAX_PREFERRED_REQUIREMENTS
from tests.factories import pod_obj


def _with_ports(*ports: object) -> dict[str, Any]:
    pod = pod_obj("p", gang="g", min_member=1)
    pod["spec"]["containers"][0]["ports"] = list(ports)
    return pod


@pytest.mark.parametrize(
    "port",
    [
        {"containerPort": 80, "hostPort": 70000},
        {"containerPort": 80, "hostPort": -1},
        {"containerPort": 80, "hostPort": 10**4000},
        {"containerPort": 80, "hostPort": "80"},
        {"containerPort": 80, "hostPort": 80.0},
        {"containerPort": 80, "hostPort": [80]},
        {"containerPort": 80, "hostPort": True},
        "80",
        None,
    ],
)
def test_a_hostile_host_port_is_a_problem_not_an_exception(port: object) -> None:
    pod = pod_from_api(_with_ports(port))
    assert pod.problems and pod.host_ports == ()


def test_a_container_list_of_the_wrong_type_is_a_problem() -> None:
    pod = pod_obj("p")
    pod["spec"]["containers"] = {"name": "c"}
    assert pod_from_api(pod).problems


def test_protocol_and_address_junk_is_kept_as_text_and_never_clashes_with_real_ports() -> None:
    pod = pod_from_api(
        _with_ports({"containerPort": 80, "hostPort": 80, "protocol": 7, "hostIP": ["x"]})
    )
    assert pod.host_ports == (HostPort("['x']", "7", 80),)


def test_a_bad_preferred_weight_does_not_hide_the_host_ports_of_a_bound_pod() -> None:
    """A pod another scheduler bound (a lenient or older API server let its weight of
    150 through) still holds its host port: the node's port must be counted, or one of
    our pods asking for the same port would be placed beside it."""
    obj = _with_ports({"containerPort": 80, "hostPort": 80})
    obj["spec"]["nodeName"] = "n1"
    obj["spec"]["schedulerName"] = "default-scheduler"
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 150, "preference": {"matchExpressions": []}}
            ]
        }
    }
    pod = pod_from_api(obj)
    assert pod.host_ports == (HostPort("0.0.0.0", "TCP", 80),)
    assert any("weight" in problem for problem in pod.problems)


@pytest.mark.parametrize(
    "resources",
    [
        "4 cpus",
        {"requests": "cpu"},
        {"requests": {"cpu": [1]}},
        {"limits": {"memory": "1e99999999Ei"}},
    ],
)
def test_hostile_pod_level_resources_are_a_problem_naming_the_field(resources: object) -> None:
    obj = pod_obj("p", gang="g", min_member=1)
    obj["spec"]["resources"] = resources
    problems = pod_from_api(obj).problems
    assert len(problems) == 1
    assert problems[0].startswith(("spec.resources", "resource ")), problems


def _preferring(count: int) -> dict[str, Any]:
    obj = pod_obj("p", gang="g", min_member=1)
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {"matchExpressions": [{"key": f"k{i}", "operator": "Exists"}]},
                }
                for i in range(count)
            ]
        }
    }
    return obj


def test_a_preferred_affinity_too_long_to_score_is_refused_with_a_reason() -> None:
    assert pod_from_api(_preferring(MAX_PREFERRED_REQUIREMENTS)).problems == ()
    problems = pod_from_api(_preferring(MAX_PREFERRED_REQUIREMENTS + 1)).problems
    assert len(problems) == 1 and "more than 1000 requirements" in problems[0]


@pytest.mark.parametrize(
    "weight", [10**5000, -(10**5000), 101, "9" * 100], ids=["huge", "-huge", "101", "text"]
)
def test_a_hostile_weight_is_named_in_a_short_message(weight: object) -> None:
    obj = _preferring(1)
    obj["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "weight"
    ] = weight
    (problem,) = pod_from_api(obj).problems
    assert problem.startswith("preferred node affinity weight") and len(problem) < 120


def test_a_huge_host_port_is_named_in_a_short_message() -> None:
    (problem,) = pod_from_api(_with_ports({"containerPort": 80, "hostPort": 10**5000})).problems
    assert problem.startswith("hostPort") and len(problem) < 80


@pytest.mark.parametrize("field", ["name", "namespace", "uid", "resourceVersion"])
@pytest.mark.parametrize("value", [10**5000, [[[]]], {"a": 1}], ids=["huge-int", "list", "dict"])
def test_metadata_of_a_hostile_type_is_a_problem_not_an_exception(
    field: str, value: object
) -> None:
    # str() of a 5,000-digit int raises ValueError; the fallback record of a malformed
    # pod read these fields with str() too, so the error escaped to the isolation guard.
    pod = pod_obj("p", gang="g", min_member=1)
    pod["metadata"][field] = value
    pod["spec"]["schedulerName"] = 10**5000
    info = pod_from_api(pod)
    assert info.problems
    assert 10**5000 not in (info.name, info.namespace, info.uid)
