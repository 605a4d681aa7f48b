"""The emulator's ValidatingAdmissionPolicy evaluation itself (tests/kubeapi/admission.py):
matching, conditions, variables, errors and the denial's wording."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubeapi.admission import (
    CURRENT,
    AccessControl,
    Request,
    User,
    admission_policies,
)
from tests.kubeapi.errors import ApiError
from tests.kubeapi.resources import NODES, PODS
from tests.kubeapi.routing import Route


def rule(operations: list[str], resources: list[str]) -> dict[str, Any]:
    return {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": operations,
        "resources": resources,
    }


def policy(validations: list[dict[str, Any]], **spec: Any) -> list[dict[str, Any]]:
    rules = spec.pop("rules", [rule(["CREATE"], ["pods"])])
    return [
        {
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "p"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules},
                "validations": validations,
                **spec,
            },
        },
        {
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "b"},
            "spec": {"policyName": "p", "validationActions": ["Deny"]},
        },
    ]


def admit(objects: list[dict[str, Any]], obj: dict[str, Any], route: Route | None = None) -> None:
    access = AccessControl({}, admission_policies(objects))
    route = route or Route(PODS, "ml", None, "", False)
    token = CURRENT.set(Request(User("alice"), "create", route))
    try:
        access.admit("Pod", "CREATE", obj, None)
    finally:
        CURRENT.reset(token)


POD = {"metadata": {"name": "p", "namespace": "ml", "labels": {"team": "a"}}, "spec": {}}


def test_a_failing_validation_is_422_worded_as_kube_apiserver() -> None:
    objects = policy([{"expression": "object.metadata.labels.team == 'b'", "message": "team b"}])
    with pytest.raises(ApiError) as caught:
        admit(objects, POD)
    body = caught.value.body
    assert body["code"] == 422 and body["reason"] == "Invalid"
    cause = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: team b"
    assert body["message"] == f'pods "p" is forbidden: {cause}'
    assert body["details"]["causes"] == [{"message": cause}]


def test_without_a_message_the_expression_is_named_and_a_reason_sets_the_code() -> None:
    objects = policy([{"expression": "false", "reason": "Forbidden"}])
    with pytest.raises(ApiError) as caught:
        admit(objects, POD)
    assert caught.value.body["code"] == 403
    assert caught.value.body["message"].endswith("denied request: failed expression: false")


def test_an_expression_that_fails_to_evaluate_denies() -> None:
    objects = policy([{"expression": "object.spec.nodeName == 'n'"}])  # no such key
    with pytest.raises(ApiError, match="resulted in error"):
        admit(objects, POD)


def test_match_conditions_and_rules_select_requests() -> None:
    objects = policy(
        [{"expression": "false"}],
        matchConditions=[{"name": "bob", "expression": "request.userInfo.username == 'bob'"}],
    )
    admit(objects, POD)  # alice: the policy does not apply
    nodes_only = policy(
        [{"expression": "false"}],
        rules=[rule(["*"], ["nodes"])],
    )
    admit(nodes_only, POD)
    subresources = policy(
        [{"expression": "false"}],
        rules=[rule(["*"], ["pods/*"])],
    )
    admit(subresources, POD)  # "pods/*" is every subresource, not pods itself
    with pytest.raises(ApiError):
        admit(subresources, POD, Route(PODS, "ml", "p", "binding", False))
    with pytest.raises(ApiError):
        admit(nodes_only, {"metadata": {"name": "n"}}, Route(NODES, None, None, "", False))


def test_variables_are_evaluated_in_order_and_an_unused_error_is_harmless() -> None:
    objects = policy(
        [{"expression": "variables.team == 'a' && variables.loud == 'A!'"}],
        variables=[
            {"name": "broken", "expression": "object.spec.missing"},
            {"name": "team", "expression": "object.metadata.labels.team"},
            {"name": "loud", "expression": "variables.team == 'a' ? 'A!' : ''"},
        ],
    )
    admit(objects, POD)
    uses_broken = policy(
        [{"expression": "variables.broken == 1"}],
        variables=[{"name": "broken", "expression": "object.spec.missing"}],
    )
    with pytest.raises(ApiError, match="resulted in error"):
        admit(uses_broken, POD)


def test_an_empty_sub_resource_is_left_out_of_the_request() -> None:
    """As AdmissionRequest's JSON (omitempty): a policy must read it with has()."""
    reads = policy([{"expression": "request.subResource == ''"}])
    with pytest.raises(ApiError, match="resulted in error"):
        admit(reads, POD)
    admit(policy([{"expression": "!has(request.subResource)"}]), POD)


def test_what_is_not_emulated_is_refused_at_load() -> None:
    with pytest.raises(NotImplementedError):
        admission_policies(policy([{"expression": "true", "messageExpression": "'x'"}]))
    with pytest.raises(NotImplementedError):
        admission_policies(policy([{"expression": "true"}], paramKind={"kind": "ConfigMap"}))
