"""Kubernetes' own PodGroup read whole (cache/native_gang.py): the topology constraint,
disruptionMode and priority, and hostile values of each refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.native_gang import native_podgroup_from_api
from cache.pod import pod_from_api
from cache.topology_requirement import TopologyRequirement
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import build_gang
from tests.integrations.controllers import native_gang_pod, native_podgroup_obj

RACK = "topology.kubernetes.io/rack"


def group(**spec: Any) -> dict[str, Any]:
    obj = native_podgroup_obj("train", 2)
    obj["spec"].update(spec)
    return obj


def test_the_topology_key_is_the_required_level() -> None:
    read = native_podgroup_from_api(group(schedulingConstraints={"topology": [{"key": RACK}]}))
    assert read.topology == TopologyRequirement(
        required_key=RACK,
        source="PodGroup default/train (scheduling.k8s.io) spec.schedulingConstraints.topology",
    )
    assert read.refusals == () and read.problems == ()


def test_no_constraint_is_no_requirement() -> None:
    for constraints in (None, {}, {"topology": []}):
        read = native_podgroup_from_api(group(schedulingConstraints=constraints))
        assert read.topology is None and read.refusals == ()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"schedulingConstraints": {"topology": [{"key": RACK}, {"key": "zone"}]}}, "2 entries"),
        ({"schedulingConstraints": {"topology": [{"key": ""}]}}, "topology[0].key"),
        ({"schedulingConstraints": {"topology": [{"key": "a b"}]}}, "topology[0].key"),
        ({"schedulingConstraints": {"topology": [{"key": 7}]}}, "topology[0].key"),
        ({"schedulingConstraints": {"topology": [{}]}}, "topology[0].key"),
        ({"schedulingConstraints": {"topology": ["rack"]}}, "topology[0] must be"),
        ({"schedulingConstraints": {"topology": {"key": RACK}}}, "must be a list"),
        ({"schedulingConstraints": "rack"}, "spec.schedulingConstraints must be"),
        ({"schedulingConstraints": {"network": {}}}, "schedulingConstraints.network"),
        ({"schedulingConstraints": {"topology": [{"key": RACK, "mode": "x"}]}}, "[0].mode"),
        ({"disruptionMode": "Whole"}, "spec.disruptionMode"),
        ({"priority": 2_000_000_000}, "spec.priority"),
        ({"priority": "high"}, "spec.priority"),
        ({"priority": True}, "spec.priority"),
        ({"resourceClaims": [{"name": "c"}]}, "spec.resourceClaims"),
        ({"futureField": 1}, "spec.futureField"),
    ],
)
def test_what_cannot_be_followed_is_refused_by_name(spec: dict[str, Any], named: str) -> None:
    read = native_podgroup_from_api(group(**spec))
    assert read.topology is None
    assert len(read.refusals) == 1 and named in read.refusals[0], read.refusals
    assert read.refusals[0] in read.problems


def test_disruption_mode_and_priority_are_read() -> None:
    read = native_podgroup_from_api(
        group(disruptionMode="PodGroup", priorityClassName="high", priority=1000)
    )
    assert (read.disruption_mode, read.priority, read.refusals) == ("PodGroup", 1000, ())
    default = native_podgroup_from_api(group())
    assert (default.disruption_mode, default.priority) == ("Pod", None)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=80),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    )
)
def test_any_constraint_value_is_read_without_raising(value: object) -> None:
    read = native_podgroup_from_api(group(schedulingConstraints=value, priority=value))
    # Either a key a node can carry, or nothing, with a refusal: never a crash.
    assert read.topology is None or isinstance(read.topology.required_key, str)
    if read.topology is None and value not in (None, {}, []) and read.refusals == ():
        assert isinstance(value, dict) and not value.get("topology")


def _gang(obj: dict[str, Any], *pods: dict[str, Any]) -> Any:
    infos = [pod_from_api(p) for p in pods]
    return build_gang("default/train", infos, native_podgroup_from_api(obj), "gang-scheduler")


def test_the_group_priority_is_the_gangs() -> None:
    pods = [native_gang_pod("train", i) for i in range(2)]
    pods[1]["spec"]["priority"] = 7  # the members disagree: the group's priority stands
    gang = _gang(group(priorityClassName="high", priority=1000), *pods)
    assert gang.priority == 1000
    assert not [p for p in gang.problems if p.reason == "ConflictingPriority"]
    plain = _gang(group(), *pods)
    assert plain.priority == 0  # no group priority: the lowest member's, as before


def test_a_refused_group_keeps_its_gang_waiting_and_says_why() -> None:
    pods = [native_gang_pod("train", i) for i in range(2)]
    gang = _gang(group(schedulingConstraints={"topology": [{"key": "a b"}]}), *pods)
    assert not gang.ready
    assert gang.waiting_message is not None and "topology[0].key" in gang.waiting_message
    assert "the gang waits until it is fixed" in gang.waiting_message
    assert len(gang.problems) == 2 and "topology[0].key" in gang.problems[0].message


def test_the_required_level_is_carried_to_the_gang() -> None:
    pods = [native_gang_pod("train", i) for i in range(2)]
    gang = _gang(group(schedulingConstraints={"topology": [{"key": RACK}]}), *pods)
    assert gang.topology is not None and gang.topology.required_key == RACK
    assert gang.ready


def test_a_victim_gang_takes_its_groups_priority() -> None:
    core = SchedulingCore(build_profile())
    core.apply_gang_group(native_podgroup_from_api, "ADDED", group(priority=0), 0)
    assert core._group_priority("default/train") == 0
    assert core._group_priority("default/other") is None
    assert core.preempter.group_priority("default/train") == 0


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=80),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=24), inner),
        max_leaves=16,
    ),
    st.recursive(
        st.none() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=24), inner),
        max_leaves=8,
    ),
)
def test_any_group_claims_value_is_read_without_raising(claims: object, status: object) -> None:
    obj = group(resourceClaims=claims)
    obj["status"] = {"resourceClaimStatuses": status}
    read = native_podgroup_from_api(obj)
    # Either entries as 1.36 accepts them (each a claim or a template, at most 4), or
    # a refusal naming the field: never a crash, never half read.
    if read.refusals:
        assert read.group_claims == () and "spec.resourceClaims" in read.refusals[0]
    else:
        assert len(read.group_claims) <= 4
        assert all(bool(c.claim_name) != bool(c.template_name) for c in read.group_claims)
        templated = {c.name for c in read.group_claims if c.template_name}
        assert {name for name, _ in read.made_claims} <= templated


def test_group_claims_and_the_claims_made_for_them_are_read() -> None:
    obj = group(
        resourceClaims=[
            {"name": "gpus", "resourceClaimTemplateName": "two"},
            {"name": "nic", "resourceClaimName": "fabric"},
        ]
    )
    obj["status"] = {
        "resourceClaimStatuses": [
            {"name": "gpus", "resourceClaimName": "g-gpus-x"},
            {"name": "nic", "resourceClaimName": "ignored"},
        ]
    }
    read = native_podgroup_from_api(obj)
    assert read.refusals == ()
    assert [(c.name, c.claim_name, c.template_name) for c in read.group_claims] == [
        ("gpus", "", "two"),
        ("nic", "fabric", ""),
    ]
    assert read.made_claims == (("gpus", "g-gpus-x"),)
