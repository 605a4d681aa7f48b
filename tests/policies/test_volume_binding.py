"""VolumeBinding / VolumeRestrictions against what kube-scheduler documents for the same
cluster: missing or deleting claims wait, a bound PV's node affinity filters nodes, an
unbound Immediate claim waits, a WaitForFirstConsumer claim goes where a matching PV or
its class's topology allows, a ReadWriteOncePod claim serves one pod; and the gang
cases no per-pod scheduler has: two members never take the same static PV."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.pod import pod_from_api
from cache.volumes import VolumeCache
from policies.filters.volume_binding import (
    BIND_CONFLICT,
    IMMEDIATE_UNBOUND,
    NODE_CONFLICT,
    PV_MISSING,
    RWOP_CONFLICT,
    VolumeBinding,
    resolve_members,
    resolve_pod,
)
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import make_node, node_obj, pod_obj
from tests.volume_objects import (
    HOSTNAME,
    ZONE,
    csinode_obj,
    pv_obj,
    pvc_obj,
    storage_class_obj,
    with_claims,
)

NODES = [
    make_node("a1", labels={ZONE: "a", HOSTNAME: "a1"}),
    make_node("a2", labels={ZONE: "a", HOSTNAME: "a2"}),
    make_node("b1", labels={ZONE: "b", HOSTNAME: "b1"}),
]


def cluster(*objs: dict[str, Any]) -> VolumeCache:
    cache = VolumeCache()
    apply = {
        "PersistentVolumeClaim": cache.apply_claim,
        "PersistentVolume": cache.apply_volume,
        "StorageClass": cache.apply_class,
    }
    for obj in objs:
        apply[obj["kind"]]("ADDED", obj)
    return cache


def feasible(pod_json: dict[str, Any], volumes: VolumeCache) -> dict[str, str | None]:
    """node -> None (fits) or the reason, after resolving the pod's claims."""
    pod = pod_from_api(pod_json)
    resolution = resolve_pod(pod, volumes)
    assert resolution.wait is None, resolution.wait
    pod.volume_needs = resolution.needs
    return {node.name: VolumeBinding().filter(pod, node) for node in NODES}


def wait_reason(pod_json: dict[str, Any], volumes: VolumeCache) -> str | None:
    return resolve_pod(pod_from_api(pod_json), volumes).wait


LOCAL_WFFC = storage_class_obj("local")
ZONAL = storage_class_obj("zonal", provisioner="pd.csi.storage.gke.io", zones=["b"])


@pytest.mark.parametrize(
    ("objs", "expected"),
    [
        ((), 'persistentvolumeclaim "data" not found'),
        ((pvc_obj("data", deleting=True),), 'persistentvolumeclaim "data" is being deleted'),
        ((pvc_obj("data", volume_name="gone"),), PV_MISSING),
        ((pvc_obj("data", storage_class=""),), IMMEDIATE_UNBOUND),
        ((pvc_obj("data", storage_class=None),), IMMEDIATE_UNBOUND),
        (
            (pvc_obj("data", storage_class="fast"), storage_class_obj("fast", mode="Immediate")),
            IMMEDIATE_UNBOUND,
        ),
        ((pvc_obj("data", storage_class="nope"),), 'storageclass.storage.k8s.io "nope" not found'),
    ],
    ids=["missing", "deleting", "pv-missing", "no-class", "unset-class", "immediate", "no-sc"],
)
def test_a_pod_whose_claims_cannot_be_used_waits_with_kube_schedulers_words(
    objs: tuple[dict[str, Any], ...], expected: str
) -> None:
    pod = with_claims(pod_obj("p"), "data")
    assert wait_reason(pod, cluster(*objs)) == expected


def test_an_ephemeral_volume_waits_for_its_claim_and_its_claim_must_be_the_pods() -> None:
    pod = with_claims(pod_obj("p", uid="pod-uid"), ephemeral=["scratch"])
    assert wait_reason(pod, cluster(LOCAL_WFFC)) == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"'
    )
    stranger = pvc_obj("p-scratch", owner_uid="someone-else")
    assert wait_reason(pod, cluster(LOCAL_WFFC, stranger)) == (
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    )
    owned = pvc_obj("p-scratch", owner_uid="pod-uid")
    local = pv_obj("pv-a2", node="a2")
    assert feasible(pod, cluster(LOCAL_WFFC, owned, local)) == {
        "a1": BIND_CONFLICT,
        "a2": None,
        "b1": BIND_CONFLICT,
    }


def test_a_bound_claims_pv_node_affinity_filters_nodes() -> None:
    pod = with_claims(pod_obj("p"), "data")
    zonal = cluster(pvc_obj("data", volume_name="disk"), pv_obj("disk", zone="a"))
    assert feasible(pod, zonal) == {"a1": None, "a2": None, "b1": NODE_CONFLICT}
    local = cluster(pvc_obj("data", volume_name="disk"), pv_obj("disk", node="b1"))
    assert feasible(pod, local) == {"a1": NODE_CONFLICT, "a2": NODE_CONFLICT, "b1": None}
    anywhere = cluster(pvc_obj("data", volume_name="nfs"), pv_obj("nfs"))
    assert feasible(pod, anywhere) == {"a1": None, "a2": None, "b1": None}


def test_an_unbound_wait_for_first_consumer_claim_goes_where_a_matching_pv_is() -> None:
    pod = with_claims(pod_obj("p"), "data")
    volumes = cluster(
        LOCAL_WFFC,
        pvc_obj("data", size="50Gi"),
        pv_obj("small-a1", node="a1", size="10Gi"),  # too small
        pv_obj("other-class-a2", node="a2", storage_class="slow", size="100Gi"),
        pv_obj("taken-b1", node="b1", size="100Gi", claim=("default", "someone")),
        pv_obj("rwx-a2", node="a2", size="100Gi", modes=["ReadWriteMany"]),  # lacks RWO
    )
    assert feasible(pod, volumes) == {"a1": BIND_CONFLICT, "a2": BIND_CONFLICT, "b1": BIND_CONFLICT}
    volumes.apply_volume("ADDED", pv_obj("fits-a2", node="a2", size="60Gi"))
    assert feasible(pod, volumes) == {"a1": BIND_CONFLICT, "a2": None, "b1": BIND_CONFLICT}


def test_a_claims_selector_and_a_prebound_pv_are_honoured() -> None:
    pod = with_claims(pod_obj("p"), "data")
    claim = pvc_obj("data")
    claim["spec"]["selector"] = {"matchLabels": {"tier": "fast"}}
    volumes = cluster(
        LOCAL_WFFC,
        claim,
        pv_obj("plain-a1", node="a1"),
        pv_obj("fast-b1", node="b1", labels={"tier": "fast"}),
    )
    assert feasible(pod, volumes)["a1"] == BIND_CONFLICT
    assert feasible(pod, volumes)["b1"] is None
    # A PV whose claimRef names the claim is the only one it may get.
    prebound = cluster(
        LOCAL_WFFC,
        pvc_obj("data"),
        pv_obj("any-a1", node="a1"),
        pv_obj("mine-a2", node="a2", claim=("default", "data")),
    )
    assert feasible(pod, prebound) == {"a1": BIND_CONFLICT, "a2": None, "b1": BIND_CONFLICT}


def test_dynamic_provisioning_follows_the_classs_allowed_topologies() -> None:
    pod = with_claims(pod_obj("p"), "data")
    volumes = cluster(ZONAL, pvc_obj("data", storage_class="zonal"))
    assert feasible(pod, volumes) == {"a1": BIND_CONFLICT, "a2": BIND_CONFLICT, "b1": None}
    anywhere = cluster(
        storage_class_obj("any", provisioner="ebs.csi.aws.com"),
        pvc_obj("data", storage_class="any"),
    )
    assert feasible(pod, anywhere) == {"a1": None, "a2": None, "b1": None}
    # A claim whose node was selected already can only go there.
    chosen = pvc_obj(
        "data", storage_class="any", annotations={"volume.kubernetes.io/selected-node": "a2"}
    )
    pinned = cluster(storage_class_obj("any", provisioner="ebs.csi.aws.com"), chosen)
    assert feasible(pod, pinned) == {"a1": BIND_CONFLICT, "a2": None, "b1": BIND_CONFLICT}


def test_a_read_write_once_pod_claim_serves_one_pod_even_inside_a_gang() -> None:
    volumes = cluster(
        pvc_obj("model", volume_name="disk", modes=["ReadWriteOncePod"]), pv_obj("disk")
    )
    one = pod_from_api(with_claims(pod_obj("w-0", gang="g"), "model"))
    two = pod_from_api(with_claims(pod_obj("w-1", gang="g"), "model"))
    members, _ = resolve_members([one, two], volumes, {})
    assert members[0].problems == ()
    assert members[1].problems == (RWOP_CONFLICT,)
    # A running pod outside the gang holds it: both wait.
    members, _ = resolve_members([one, two], volumes, {"default/model": ["running-uid"]})
    assert [m.problems for m in members] == [(RWOP_CONFLICT,), (RWOP_CONFLICT,)]


KINDS = {
    "PersistentVolumeClaim": "claims",
    "PersistentVolume": "volumes",
    "StorageClass": "classes",
    "CSINode": "csinodes",
}


def core_with(*objs: dict[str, Any]) -> SchedulingCore:
    """A scheduling core over NODES and these pods and storage objects."""
    core = SchedulingCore(build_profile())
    for node in NODES:
        core.apply_node("ADDED", node_obj(node.name, labels=dict(node.labels)), 0)
    for obj in objs:
        if obj["kind"] == "Pod":
            core.apply_pod("ADDED", obj, 0)
        else:
            core.apply_volume_object(KINDS[obj["kind"]], "ADDED", obj, 0)
    return core


def local_gang(size: int, pvs: dict[str, int]) -> SchedulingCore:
    """A gang of `size` members, each with its own WFFC claim, and `pvs` local PVs per node."""
    objs: list[dict[str, Any]] = [LOCAL_WFFC]
    for node, count in pvs.items():
        objs += [pv_obj(f"pv-{node}-{i}", node=node) for i in range(count)]
    objs += [pvc_obj(f"data-{i}") for i in range(size)]
    objs += [
        with_claims(pod_obj(f"w-{i}", gang="g", min_member=size), f"data-{i}") for i in range(size)
    ]
    return core_with(*objs)


def plan(core: SchedulingCore) -> Plan | Unschedulable:
    attempt = core.schedule_next(0)
    assert attempt is not None
    return attempt.result


def test_two_members_of_a_gang_never_take_the_same_static_pv() -> None:
    # One local PV on each of two nodes: binpacking alone would put both members on one.
    result = plan(local_gang(2, {"a1": 1, "b1": 1}))
    assert isinstance(result, Plan)
    assert sorted(p.node for p in result.placements) == ["a1", "b1"]
    chosen = [c.volume for choices in result.volumes.values() for c in choices]
    assert sorted(chosen) == ["pv-a1-0", "pv-b1-0"]


def test_a_gang_with_fewer_matching_pvs_than_members_is_not_placed() -> None:
    result = plan(local_gang(3, {"a1": 1, "b1": 1}))
    assert isinstance(result, Unschedulable)
    assert BIND_CONFLICT in result.message
    # Two PVs on one node serve two members there.
    result = plan(local_gang(2, {"a2": 2}))
    assert isinstance(result, Plan)
    assert [p.node for p in result.placements] == ["a2", "a2"]


def test_pvs_a_planned_gang_holds_are_not_given_to_the_next_gang() -> None:
    core = local_gang(1, {"a1": 1})
    first = plan(core)
    assert isinstance(first, Plan)
    core.apply_volume_object("claims", "ADDED", pvc_obj("other"), 0)
    core.apply_pod("ADDED", with_claims(pod_obj("late"), "other"), 0)
    second = plan(core)
    assert isinstance(second, Unschedulable) and BIND_CONFLICT in second.message
    # The first gang's bind broke: its PV is free again.
    core.bind_failed(first.gang_key, first.placements, 1, "broken")
    core.queue.cluster_changed(10, ClusterChange.NODE_ADDED)
    third = core.schedule_next(100)
    assert third is not None and isinstance(third.result, Plan)


def test_a_missing_claim_waits_and_the_gang_is_retried_when_it_appears() -> None:
    core = core_with(LOCAL_WFFC, pv_obj("pv", node="a1"), with_claims(pod_obj("p"), "data"))
    result = plan(core)
    assert isinstance(result, Unschedulable)
    assert 'persistentvolumeclaim "data" not found' in result.message
    assert core.schedule_next(0.5) is None  # waits for a change, no loop
    core.apply_volume_object("claims", "ADDED", pvc_obj("data"), 1)
    attempt = core.schedule_next(5)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert attempt.result.placements[0].node == "a1"


def test_a_claim_two_members_share_is_served_once() -> None:
    core = core_with(
        storage_class_obj("shared", provisioner="nfs.csi.k8s.io"),
        pvc_obj("shared", storage_class="shared", modes=["ReadWriteMany"]),
        *[with_claims(pod_obj(f"w-{i}", gang="g", min_member=2), "shared") for i in range(2)],
    )
    result = plan(core)
    assert isinstance(result, Plan)
    choices = {c.claim.key: c for cs in result.volumes.values() for c in cs}
    assert list(choices) == ["default/shared"]
    assert choices["default/shared"].volume == ""  # provisioned, node chosen once


# --- NodeVolumeLimits (CSI) -----------------------------------------------------------
EBS = "ebs.csi.aws.com"


def csi_pv(name: str) -> dict[str, Any]:
    volume = pv_obj(name, storage_class="gp3")
    volume["spec"]["csi"] = {"driver": EBS, "volumeHandle": f"vol-{name}"}
    return volume


def test_a_node_at_its_csi_attach_limit_takes_no_new_volume_of_that_driver() -> None:
    core = core_with(
        csinode_obj("a1", {EBS: 1}),
        csinode_obj("a2", {EBS: 2}),
        csi_pv("old"),
        pvc_obj("old", storage_class="gp3", volume_name="old"),
        with_claims(pod_obj("running", node_name="a1", phase="Running"), "old"),
        csi_pv("new"),
        pvc_obj("new", storage_class="gp3", volume_name="new"),
        with_claims(pod_obj("p", node_selector={HOSTNAME: "a1"}), "new"),
    )
    result = plan(core)
    assert isinstance(result, Unschedulable)
    assert "1 node(s) exceed max volume count" in result.message
    # The same volume mounted again needs no new attachment: a1 takes it.
    core.apply_pod("ADDED", with_claims(pod_obj("again", node_selector={HOSTNAME: "a1"}), "old"), 0)
    core.apply_pod("DELETED", pod_obj("p"), 0)
    again = core.schedule_next(100)
    assert again is not None and isinstance(again.result, Plan)
    assert again.result.placements[0].node == "a1"


def test_a_gang_never_attaches_more_than_a_nodes_limit_between_its_members() -> None:
    def gang(size: int) -> SchedulingCore:
        return core_with(
            storage_class_obj("gp3", provisioner=EBS),
            *[csinode_obj(node.name, {EBS: 1}) for node in NODES],
            *[pvc_obj(f"d-{i}", storage_class="gp3") for i in range(size)],
            *[
                with_claims(pod_obj(f"w-{i}", gang="g", min_member=size), f"d-{i}")
                for i in range(size)
            ],
        )

    result = plan(gang(3))
    assert isinstance(result, Plan)
    assert sorted(p.node for p in result.placements) == ["a1", "a2", "b1"]
    result = plan(gang(4))
    assert isinstance(result, Unschedulable)
    assert "exceed max volume count" in result.message


@settings(max_examples=60, deadline=None)
@given(
    pvs=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    size=st.integers(1, 5),
    shared=st.booleans(),
)
def test_no_plan_gives_a_pv_twice_or_puts_a_member_away_from_its_pv(
    pvs: list[int], size: int, shared: bool
) -> None:
    """Whatever the local PVs per node, a plan gives each claim one PV of its member's
    node, never one PV to two claims; and a gang is placed whenever every member can
    have its own PV."""
    objs: list[dict[str, Any]] = [LOCAL_WFFC]
    for node, count in zip(NODES, pvs, strict=True):
        objs += [pv_obj(f"pv-{node.name}-{i}", node=node.name) for i in range(count)]
    objs += [pvc_obj(f"data-{i}") for i in range(size)]
    if shared:
        objs.append(pvc_obj("shared", storage_class="nfs", modes=["ReadWriteMany"]))
        objs.append(storage_class_obj("nfs", provisioner="nfs.csi.k8s.io"))
    objs += [
        with_claims(
            pod_obj(f"w-{i}", gang="g", min_member=size),
            f"data-{i}",
            *(["shared"] if shared else []),
        )
        for i in range(size)
    ]
    result = plan(core_with(*objs))
    if sum(pvs) < size:
        assert isinstance(result, Unschedulable)
        return
    assert isinstance(result, Plan)
    nodes = {p.pod_uid: p.node for p in result.placements}
    given_to: dict[str, str] = {}
    for uid, choices in result.volumes.items():
        for choice in choices:
            if choice.claim.name == "shared":
                continue
            assert choice.volume.startswith(f"pv-{nodes[uid]}-")
            assert given_to.setdefault(choice.volume, choice.claim.key) == choice.claim.key
    assert len(given_to) == size
