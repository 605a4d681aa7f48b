"""Which bound pods the scheduler bound itself (cache/ownership.py): what it may delete
or evict. Proof is its own bind seen landing, or its signature on the pod, which
survives a restart and which nobody without the key can make."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType, Placement
from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION
from tests.factories import node_obj, pod_obj
from tests.signed import TEST_KEY, signed


def cache_with(*pods: dict[str, Any], key: bytes | None = TEST_KEY) -> ClusterCache:
    cache = ClusterCache(assignment_key=key)
    cache.apply_node(EventType.ADDED, node_obj("n0", gpus=2))
    cache.apply_node(EventType.ADDED, node_obj("n1", gpus=2))
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)
    return cache


def is_ours(cache: ClusterCache, name: str) -> bool:
    pod = cache.pod(f"uid-default-{name}")
    assert pod is not None
    return cache.bound_by_us(pod)


def test_a_pod_pinned_by_its_creator_is_not_ours_a_signed_one_is() -> None:
    cache = cache_with(
        pod_obj("pinned", node_name="n0"),
        signed(pod_obj("cpu", node_name="n0")),
        signed(
            pod_obj("gpu", gpus=1, node_name="n1", annotations={ASSIGNMENT_ANNOTATION: "0:1000"})
        ),
        pod_obj("pending"),
    )
    assert not is_ours(cache, "pinned")
    assert is_ours(cache, "cpu")
    assert is_ours(cache, "gpu")
    assert not is_ours(cache, "pending")


def test_a_signature_proves_nothing_on_another_pod_node_or_assignment_or_key() -> None:
    original = signed(pod_obj("ours", node_name="n0"))
    signature = original["metadata"]["annotations"][SIGNATURE_ANNOTATION]
    copied = pod_obj("copy", node_name="n0", annotations={SIGNATURE_ANNOTATION: signature})
    elsewhere = pod_obj("ours", node_name="n1", annotations={SIGNATURE_ANNOTATION: signature})
    elsewhere["metadata"]["uid"] = "uid-default-ours"
    with_devices = pod_obj(
        "ours",
        gpus=1,
        node_name="n0",
        annotations={SIGNATURE_ANNOTATION: signature, ASSIGNMENT_ANNOTATION: "0:1000"},
    )
    assert not is_ours(cache_with(copied), "copy")
    assert not is_ours(cache_with(elsewhere), "ours")
    assert not is_ours(cache_with(with_devices), "ours")
    assert not is_ours(cache_with(original, key=b"another key of 32 bytes or so..."), "ours")
    assert not is_ours(cache_with(original, key=None), "ours")


def test_its_own_bind_seen_landing_is_ours_without_a_key_and_a_nomination_is_not() -> None:
    cache = cache_with(pod_obj("a"), pod_obj("b"), key=None)
    cache.assume([Placement("uid-default-a", "n0")], 0.0)
    cache.nominate([Placement("uid-default-b", "n1")], 0.0)
    # Both show up bound (b by somebody else, onto the node held for it).
    cache.apply_pod(EventType.MODIFIED, pod_obj("a", node_name="n0", resource_version="2"))
    cache.apply_pod(EventType.MODIFIED, pod_obj("b", node_name="n1", resource_version="2"))
    assert is_ours(cache, "a")
    assert not is_ours(cache, "b")


def test_once_ours_an_edit_of_the_annotations_changes_nothing_until_the_pod_goes() -> None:
    pod = signed(pod_obj("ours", node_name="n0"))
    cache = cache_with(pod)
    assert is_ours(cache, "ours")
    stripped = pod_obj("ours", node_name="n0", resource_version="2")
    cache.apply_pod(EventType.MODIFIED, stripped)
    assert is_ours(cache, "ours")
    cache.apply_pod(EventType.DELETED, stripped)
    # The same uid back without the signature (a relist of an edited object) is not.
    cache.apply_pod(EventType.ADDED, pod_obj("ours", node_name="n0", resource_version="3"))
    assert not is_ours(cache, "ours")


@given(st.text(max_size=80), st.sampled_from(["n0", "n1"]))
def test_no_written_signature_makes_an_unsigned_pod_ours(signature: str, node: str) -> None:
    forged = pod_obj("forged", node_name=node, annotations={SIGNATURE_ANNOTATION: signature})
    assert not is_ours(cache_with(forged), "forged")
