"""Storage objects with hostile or broken values: reading them never raises, never
builds anything sized by a number in them, and leaves a problem that the pod using
them waits with (docs/kubernetes.md, Volumes: what is refused)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from cache.pod import pod_from_api
from cache.volumes import MAX_SELECTOR_REQUIREMENTS, VolumeCache
from policies.filters.volume_binding import resolve_pod
from tests.factories import pod_obj
from tests.volume_objects import csinode_obj, pv_obj, pvc_obj, storage_class_obj, with_claims


def _set(obj: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here = obj
    for part in parents:
        here = here.setdefault(part, {})
    here[last] = value
    return obj


HOSTILE_CLAIM_FIELDS: list[tuple[str, object]] = [
    ("spec", "not an object"),
    ("spec.selector", {"matchExpressions": 5}),
    ("spec.selector", {"matchExpressions": [{"key": "k", "operator": "In", "values": 5}]}),
    ("spec.selector", {"matchExpressions": ["not an object"]}),
    ("spec.resources", {"requests": {"storage": ["1Gi"]}}),
    ("spec.resources", {"requests": {"storage": "9" * 5000}}),
    ("spec.resources", {"requests": {"storage": "-1Gi"}}),
    ("metadata.ownerReferences", 5),
    ("metadata.ownerReferences", [5, None]),
    ("spec.accessModes", ["ReadWriteOnce", "Everything"]),
]


@pytest.mark.parametrize(("path", "value"), HOSTILE_CLAIM_FIELDS)
def test_a_hostile_claim_never_raises_and_its_pod_waits_with_a_reason(
    path: str, value: object
) -> None:
    volumes = VolumeCache()
    volumes.apply_class("ADDED", storage_class_obj("local"))
    volumes.apply_claim("ADDED", _set(pvc_obj("data"), path, value))
    claim = volumes.claim("default", "data")
    assert claim is not None
    pod = pod_from_api(with_claims(pod_obj("job"), "data"))
    resolution = resolve_pod(pod, volumes)
    if claim.problems:
        assert resolution.wait is not None and "persistentvolumeclaim" in resolution.wait


def test_a_claim_with_negative_storage_or_unknown_access_modes_is_refused() -> None:
    """The API server refuses both (ValidatePersistentVolumeClaimSpec); an object an
    older or lenient server let through waits with the reason instead of binding."""
    for obj in (
        _set(pvc_obj("data"), "spec.resources", {"requests": {"storage": "-1Gi"}}),
        _set(pvc_obj("data"), "spec.accessModes", ["ReadWriteOnce", "Everything"]),
    ):
        volumes = VolumeCache()
        volumes.apply_claim("ADDED", obj)
        claim = volumes.claim("default", "data")
        assert claim is not None and claim.problems


HOSTILE_VOLUME_FIELDS: list[tuple[str, object]] = [
    ("spec", 7),
    ("spec.nodeAffinity", {"required": 5}),
    ("spec.nodeAffinity", {"required": {"nodeSelectorTerms": 5}}),
    ("spec.nodeAffinity", {"required": {"nodeSelectorTerms": [{"matchExpressions": [5]}]}}),
    ("spec.capacity", {"storage": {"a": 1}}),
    ("spec.claimRef", {"name": ["x"], "namespace": 5}),
    ("metadata.labels", ["a", "b"]),
]


@pytest.mark.parametrize(("path", "value"), HOSTILE_VOLUME_FIELDS)
def test_a_hostile_pv_never_raises(path: str, value: object) -> None:
    volumes = VolumeCache()
    volumes.apply_volume("ADDED", _set(pv_obj("disk"), path, value))
    assert "disk" in volumes.volumes


HOSTILE_TOPOLOGIES: list[object] = [
    5,
    "zone-a",
    [5],
    [{"matchLabelExpressions": 5}],
    [{"matchLabelExpressions": [5]}],
    [{"matchLabelExpressions": [{"key": "zone", "values": 5}]}],
    [{"matchLabelExpressions": [{"key": "zone", "values": []}]}],
]


@pytest.mark.parametrize("topologies", HOSTILE_TOPOLOGIES)
def test_a_storage_class_with_broken_allowed_topologies_never_raises_and_is_refused(
    topologies: object,
) -> None:
    volumes = VolumeCache()
    volumes.apply_class("ADDED", _set(storage_class_obj("zonal"), "allowedTopologies", topologies))
    volumes.apply_claim("ADDED", pvc_obj("data", storage_class="zonal"))
    klass = volumes.classes.get("zonal")
    assert klass is not None and klass.problems
    pod = pod_from_api(with_claims(pod_obj("job"), "data"))
    wait = resolve_pod(pod, volumes).wait
    assert wait is not None and 'storageclass "zonal"' in wait and "allowedTopologies" in wait


HOSTILE_DRIVERS: list[object] = [5, "x", [5], [{"name": "d", "allocatable": 5}]]


@pytest.mark.parametrize("drivers", HOSTILE_DRIVERS)
def test_a_csinode_with_broken_drivers_never_raises(drivers: object) -> None:
    volumes = VolumeCache()
    volumes.apply_csinode("ADDED", _set(csinode_obj("n0", {}), "spec.drivers", drivers))
    assert "n0" in volumes.csinodes


@pytest.mark.parametrize(
    ("count", "expected"), [(10**30, 2**31 - 1), (-5, 0), (2**31 - 1, 2**31 - 1), (3, 3)]
)
def test_a_csinode_attach_count_is_bounded_to_what_the_api_can_hold(
    count: int, expected: int
) -> None:
    """allocatable.count is an int32 that validation keeps >= 0; anything else from a
    lenient server is clamped, so a limit is never negative or unbounded."""
    volumes = VolumeCache()
    volumes.apply_csinode("ADDED", csinode_obj("n0", {"pd.csi": count}))
    assert volumes.csinodes["n0"].limits == {"pd.csi": expected}


APPLY: dict[str, Callable[[VolumeCache, str, Any], object]] = {
    "claims": VolumeCache.apply_claim,
    "volumes": VolumeCache.apply_volume,
    "classes": VolumeCache.apply_class,
    "csinodes": VolumeCache.apply_csinode,
}


@pytest.mark.parametrize("kind", sorted(APPLY))
@pytest.mark.parametrize("obj", [None, 5, "x", [], {"metadata": 5}, {"metadata": {"name": 5}}])
def test_objects_that_are_not_objects_never_raise(kind: str, obj: object) -> None:
    APPLY[kind](VolumeCache(), "ADDED", obj)


def test_an_ephemeral_claim_is_the_pods_only_when_the_pod_controls_it() -> None:
    """A tenant who can create claims in the namespace names one `<pod>-<volume>` with
    a plain (non-controller) owner reference to the pod: kube-scheduler refuses it
    (IsControlledBy), and so does this scheduler; the pod waits."""
    pod = pod_from_api(with_claims(pod_obj("job"), ephemeral=["scratch"]))
    volumes = VolumeCache()
    volumes.apply_class("ADDED", storage_class_obj("local"))
    planted = pvc_obj("job-scratch")
    planted["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "job", "uid": pod.uid}
    ]
    volumes.apply_claim("ADDED", planted)
    wait = resolve_pod(pod, volumes).wait
    assert wait is not None and "pod is not owner" in wait
    # The ephemeral volume controller's own claim (controller: true) is the pod's.
    volumes.apply_claim("MODIFIED", pvc_obj("job-scratch", owner_uid=pod.uid, resource_version="2"))
    assert resolve_pod(pod, volumes).wait is None


def test_a_huge_value_in_a_storage_object_is_quoted_short() -> None:
    """The problem becomes the pod's event and condition message: a megabyte of the
    tenant's text is not copied into them."""
    huge = "x" * 1_000_000
    volumes = VolumeCache()
    volumes.apply_claim(
        "ADDED",
        _set(pvc_obj("data"), "spec.selector", {"matchExpressions": [{"operator": huge}]}),
    )
    volumes.apply_class(
        "ADDED",
        _set(storage_class_obj("c"), "allowedTopologies", [{"matchLabelExpressions": [huge]}]),
    )
    claim = volumes.claim("default", "data")
    klass = volumes.classes["c"]
    assert claim is not None and klass is not None
    assert claim.problems and all(len(p) < 300 for p in claim.problems)
    assert klass.problems and all(len(p) < 300 for p in klass.problems)


def test_a_bound_claims_pv_whose_node_affinity_cannot_be_read_makes_the_pod_wait() -> None:
    """Reading the broken affinity as "no affinity" would place the pod on any node,
    where a local volume cannot be mounted."""
    volumes = VolumeCache()
    broken = _set(
        pv_obj("disk", node="n3", claim=("default", "data")),
        "spec.nodeAffinity",
        {
            "required": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "?"}]}]
            }
        },
    )
    volumes.apply_volume("ADDED", broken)
    volumes.apply_claim("ADDED", pvc_obj("data", volume_name="disk"))
    wait = resolve_pod(pod_from_api(with_claims(pod_obj("job"), "data")), volumes).wait
    assert wait is not None and "persistentvolume 'disk': nodeAffinity" in wait


def test_resource_versions_of_any_length_are_ordered_without_int() -> None:
    volumes = VolumeCache()
    long_version = "9" * 5000
    volumes.apply_claim("ADDED", pvc_obj("data", resource_version=long_version))
    volumes.apply_claim("MODIFIED", pvc_obj("data", resource_version="12", size="1Gi"))
    claim = volumes.claim("default", "data")
    assert claim is not None and claim.resource_version == long_version  # older dropped
    volumes.apply_claim("MODIFIED", pvc_obj("data", resource_version="1" + "0" * 5000))
    claim = volumes.claim("default", "data")
    assert claim is not None and claim.resource_version == "1" + "0" * 5000
    # Unicode digits are not decimal versions: never compared.
    volumes.apply_claim("MODIFIED", pvc_obj("data", resource_version="\u0663", size="2Gi"))


def test_a_claim_selector_too_long_to_match_is_a_problem() -> None:
    def claim_with(count: int) -> dict[str, Any]:
        expressions = [{"key": f"k{i}", "operator": "Exists"} for i in range(count)]
        return _set(pvc_obj("data"), "spec.selector", {"matchExpressions": expressions})

    volumes = VolumeCache()
    volumes.apply_claim("ADDED", claim_with(MAX_SELECTOR_REQUIREMENTS))
    claim = volumes.claim("default", "data")
    assert claim is not None and not claim.problems
    volumes.apply_claim("MODIFIED", claim_with(MAX_SELECTOR_REQUIREMENTS + 1))
    claim = volumes.claim("default", "data")
    assert claim is not None and "more than 100 requirements" in claim.problems[0]
