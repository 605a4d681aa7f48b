"""Storage records read from the API's JSON, the VolumeCache's event rules, and the
claims a pod mounts."""

from __future__ import annotations

from cache.pod import pod_from_api
from cache.terms import Requirement
from cache.volumes import (
    ClaimRef,
    PodClaim,
    VolumeCache,
    VolumeNeed,
    claim_from_api,
    class_from_api,
    volume_from_api,
)
from tests.factories import pod_obj
from tests.volume_objects import HOSTNAME, ZONE, pv_obj, pvc_obj, storage_class_obj, with_claims


def test_a_claim_record_keeps_what_binding_reads() -> None:
    obj = pvc_obj(
        "data",
        namespace="ml",
        size="1.5Gi",
        modes=["ReadWriteOncePod"],
        annotations={"volume.kubernetes.io/selected-node": "n1"},
        owner_uid="pod-uid",
    )
    obj["spec"]["selector"] = {
        "matchLabels": {"tier": "fast"},
        "matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["r9"]}],
    }
    claim = claim_from_api(obj)
    assert (claim.key, claim.storage_class, claim.volume_name) == ("ml/data", "local", "")
    assert claim.request_bytes == 1536 * 2**20
    assert claim.access_modes == frozenset({"ReadWriteOncePod"})
    assert claim.selected_node == "n1" and claim.owner_uids == ("pod-uid",)
    assert claim.selector is not None
    assert all(r.matches({"tier": "fast", "rack": "r1"}) for r in claim.selector)
    assert not all(r.matches({"tier": "fast", "rack": "r9"}) for r in claim.selector)
    assert claim_from_api(pvc_obj("d", storage_class=None)).storage_class is None
    assert claim_from_api(pvc_obj("d", deleting=True)).deleting


def test_a_claim_with_an_unreadable_request_carries_the_problem() -> None:
    claim = claim_from_api(pvc_obj("data", size="ten gigs"))
    assert claim.problems and "storage request" in claim.problems[0]


def test_a_volume_record_keeps_its_node_affinity_claim_and_driver() -> None:
    local = volume_from_api(pv_obj("pv1", node="n3", claim=("ml", "data"), size="100Gi"))
    assert local.node_affinity == ((Requirement(HOSTNAME, "In", ("n3",)),),)
    assert local.claim_ref == ClaimRef("ml", "data")
    assert local.capacity_bytes == 100 * 2**30 and local.phase == "Available"
    zonal = volume_from_api(pv_obj("pv2", zone="b"))
    assert zonal.node_affinity == ((Requirement(ZONE, "In", ("b",)),),)
    assert zonal.csi_driver == "pd.csi.storage.gke.io"
    assert volume_from_api(pv_obj("nfs")).node_affinity is None


def test_a_storage_class_record_reads_mode_provisioner_and_topologies() -> None:
    local = class_from_api(storage_class_obj("local"))
    assert local.delays_binding and not local.provisions
    zonal = class_from_api(
        storage_class_obj("z", provisioner="pd.csi.storage.gke.io", zones=["a", "b"])
    )
    assert zonal.provisions
    assert zonal.allowed_topologies == ((Requirement(ZONE, "In", ("a", "b")),),)
    defaulted = storage_class_obj("std", provisioner="x")
    del defaulted["volumeBindingMode"]
    assert not class_from_api(defaulted).delays_binding  # Immediate by default


def test_the_cache_drops_stale_events_and_counts_changes() -> None:
    cache = VolumeCache()
    cache.apply_claim("ADDED", pvc_obj("data", resource_version="5"))
    generation = cache.generation
    # An older version (a relist racing a watch) changes nothing.
    cache.apply_claim("MODIFIED", pvc_obj("data", volume_name="pv", resource_version="4"))
    assert cache.claim("default", "data").volume_name == ""  # type: ignore[union-attr]
    assert cache.generation == generation
    # The same content again is no change either.
    cache.apply_claim("MODIFIED", pvc_obj("data", resource_version="5"))
    assert cache.generation == generation
    cache.apply_claim("MODIFIED", pvc_obj("data", volume_name="pv", resource_version="6"))
    assert cache.claim("default", "data").volume_name == "pv"  # type: ignore[union-attr]
    assert cache.generation == generation + 1
    cache.apply_claim("DELETED", pvc_obj("data", resource_version="7"))
    assert cache.claim("default", "data") is None
    cache.apply_class("ADDED", storage_class_obj("local"))
    cache.forget("classes", ["local"])
    assert cache.classes == {}


def test_a_hold_on_a_pv_ends_when_its_event_shows_the_claim() -> None:
    cache = VolumeCache()
    cache.apply_volume("ADDED", pv_obj("pv", node="n1"))
    cache.hold("pv", "default/data")
    assert cache.held_for("pv") == "default/data"
    cache.apply_volume("MODIFIED", pv_obj("pv", node="n1", resource_version="2"))
    assert cache.held_for("pv") == "default/data"  # not bound yet
    bound = pv_obj("pv", node="n1", claim=("default", "data"), resource_version="3")
    cache.apply_volume("MODIFIED", bound)
    assert cache.held_for("pv") is None
    cache.hold("pv", "default/data")
    cache.release("pv", "default/other")  # not that claim's hold
    assert cache.held_for("pv") == "default/data"
    cache.release("pv", "default/data")
    assert cache.held_for("pv") is None


def test_a_pod_lists_its_claims_and_its_ephemeral_volumes_claims() -> None:
    pod = pod_from_api(with_claims(pod_obj("train-0"), "data", "ckpt", "data", ephemeral=["tmp"]))
    assert pod.claims == (PodClaim("data"), PodClaim("ckpt"), PodClaim("train-0-tmp", True))
    broken = pod_obj("p")
    broken["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {}}]
    assert "claimName is required" in pod_from_api(broken).problems[0]


def test_resolved_volume_needs_are_part_of_the_placement_signature() -> None:
    one = pod_from_api(with_claims(pod_obj("a"), "x"))
    two = pod_from_api(with_claims(pod_obj("b"), "y"))
    assert one.placement_signature() == two.placement_signature()
    one.volume_needs = (VolumeNeed("default/x", True, ((Requirement(ZONE, "In", ("a",)),),)),)
    assert one.placement_signature() != two.placement_signature()
