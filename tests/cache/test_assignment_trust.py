"""Only what the scheduler decided moves a GPU charge (issue 10, docs/security.md).

A bound pod's `gang-scheduler.io/gpu-devices` counts only when the scheduler bound it in
this run or the value carries its signature over (pod uid, node, devices); an unsigned
value a tenant wrote is ignored and the charge inferred exactly as if no value were
there. A value with a signature no key verifies (a copy, or a real bind signed with a
key this process lacks) is charged on every GPU of its node: never inferred onto a GPU
that may be in use (issue 26).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType, Placement
from cache.gpu import (
    ASSIGNMENT_ANNOTATION,
    SIGNATURE_ANNOTATION,
    DeviceShares,
    format_assignment,
    sign_assignment,
)
from cache.signing import SigningKeys
from tests.factories import node_obj, pod_obj

KEY = b"k" * 32
ADDED, MODIFIED = EventType.ADDED, EventType.MODIFIED


def signed(uid: str, node: str, shares: DeviceShares, key: bytes = KEY) -> dict[str, str]:
    return {
        ASSIGNMENT_ANNOTATION: format_assignment(shares),
        SIGNATURE_ANNOTATION: sign_assignment(key, uid, node, shares),
    }


def cluster(key: bytes | None = KEY) -> ClusterCache:
    cache = ClusterCache(assignment_key=key)
    cache.apply_node(ADDED, node_obj("n", gpus=2))
    return cache


def free(cache: ClusterCache) -> list[int]:
    node = cache.node("n")
    assert node is not None
    return list(node.gpu_free)


def scheduled(cache: ClusterCache, name: str, milli: int, device: int) -> None:
    """`name` placed by this scheduler on `device`: assumed, then its bind seen."""
    cache.apply_pod(ADDED, pod_obj(name, vgpu=milli))
    uid = f"uid-default-{name}"
    cache.assume([Placement(uid, "n", ((device, milli),))], now=0)
    bound = pod_obj(
        name,
        vgpu=milli,
        node_name="n",
        resource_version="2",
        annotations=signed(uid, "n", ((device, milli),)),
    )
    cache.apply_pod(MODIFIED, bound)


def test_a_pod_created_with_a_node_and_its_own_assignment_is_inferred() -> None:
    cache = cluster()
    scheduled(cache, "victim", 700, 0)
    # The tenant's pod claims GPU 0, where 300 are left: before, GPU 0 carried 1200.
    cache.apply_pod(
        ADDED,
        pod_obj("forged", vgpu=500, node_name="n", annotations={ASSIGNMENT_ANNOTATION: "0:500"}),
    )
    assert free(cache) == [300, 500]


def test_a_tenant_patching_its_running_pod_does_not_move_the_charge() -> None:
    cache = cluster()
    scheduled(cache, "victim", 700, 0)
    scheduled(cache, "tenant", 500, 1)
    uid = "uid-default-tenant"
    for written in (
        {ASSIGNMENT_ANNOTATION: "0:500"},  # unsigned
        {**signed(uid, "n", ((1, 500),)), ASSIGNMENT_ANNOTATION: "0:500"},  # old signature
        signed(uid, "n", ((0, 500),), key=b"x" * 32),  # signed with another key
        {},  # removed
    ):
        patched = pod_obj(
            "tenant", vgpu=500, node_name="n", resource_version="3", annotations=written
        )
        cache.apply_pod(MODIFIED, patched)
        assert free(cache) == [300, 500]
        assert cache.charged_shares(uid) == ((1, 500),)


def test_a_signed_value_copied_onto_another_pod_does_not_verify() -> None:
    cache = cluster()
    copied = signed("uid-default-victim", "n", ((0, 700),))
    cache.apply_pod(ADDED, pod_obj("victim", vgpu=700, node_name="n", annotations=copied))
    cache.apply_pod(ADDED, pod_obj("thief", vgpu=700, node_name="n", annotations=copied))
    assert cache.charged_shares("uid-default-victim") == ((0, 700),)
    # Not verified, but signed: it may be a real bind, so it holds every GPU in the books.
    assert cache.charged_shares("uid-default-thief") == ((0, 700), (1, 700))


def test_a_pod_bound_by_another_scheduler_is_inferred() -> None:
    cache = cluster()
    other = pod_obj(
        "other",
        vgpu=400,
        scheduler="default-scheduler",
        node_name="n",
        annotations={ASSIGNMENT_ANNOTATION: "1:400"},
    )
    scheduled(cache, "ours", 500, 0)
    cache.apply_pod(ADDED, other)
    assert cache.charged_shares("uid-default-other") == ((0, 400),)  # tightest fit


SHARE = ((1, 300),)
A_ON_N = signed("uid-default-a", "n", SHARE)


def test_after_a_restart_signed_assignments_are_charged_as_written() -> None:
    cache = cluster()
    cache.apply_pod(
        ADDED,
        pod_obj("a", vgpu=300, node_name="n", annotations=A_ON_N),
    )
    assert free(cache) == [1000, 700]
    # Without the key nothing written verifies: the same pod may hold either GPU, and is
    # charged on both (before, it was inferred onto GPU 0 while it ran on GPU 1).
    keyless = cluster(key=None)
    keyless.apply_pod(
        ADDED,
        pod_obj("a", vgpu=300, node_name="n", annotations=A_ON_N),
    )
    assert free(keyless) == [700, 700]
    # With the key among the older ones of a ring (a rotation), it verifies.
    rotated = ClusterCache(assignment_key=SigningKeys(b"n" * 32, (KEY,)))
    rotated.apply_node(ADDED, node_obj("n", gpus=2))
    rotated.apply_pod(ADDED, pod_obj("a", vgpu=300, node_name="n", annotations=A_ON_N))
    assert free(rotated) == [1000, 700]


def test_a_signature_for_another_node_does_not_verify() -> None:
    cache = cluster()
    cache.apply_pod(
        ADDED,
        pod_obj("a", vgpu=300, node_name="n", annotations=signed("uid-default-a", "m", SHARE)),
    )
    assert free(cache) == [700, 700]


def test_confirmed_binds_need_no_signature() -> None:
    """The simulator confirms its binds; they count as decided."""
    cache = cluster(key=None)
    cache.apply_pod(ADDED, pod_obj("a", vgpu=300))
    cache.assume([Placement("uid-default-a", "n", ((1, 300),))], now=0)
    cache.confirm("uid-default-a", "n")
    assert free(cache) == [1000, 700]


VALUES = st.one_of(
    st.none(),
    st.text(alphabet="0123456789:,x", max_size=12),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 1000)), min_size=1, max_size=3).map(
        lambda pairs: format_assignment(tuple(sorted(dict(pairs).items())))
    ),
)


@given(st.lists(st.tuples(st.integers(1, 1000), VALUES, st.booleans()), max_size=6))
def test_forged_values_never_shift_a_charge(pods: list[tuple[int, str | None, bool]]) -> None:
    """Whatever tenants write, unsigned, the accounting is the one of the same pods
    without any value; a signature they copy only makes their own pod hold more (every
    GPU of the node). Never does a forged value move the scheduler's own charge or
    leave more room in all than the same pods without values."""

    def build(with_values: bool, signatures: bool = True) -> list[int]:
        cache = built(with_values, signatures)
        assert cache.charged_shares("uid-default-ours") == ((1, 600),)
        return free(cache)

    def built(with_values: bool, signatures: bool) -> ClusterCache:
        cache = cluster()
        scheduled(cache, "ours", 600, 1)
        for i, (milli, value, fake_signature) in enumerate(pods):
            annotations: dict[str, Any] = {}
            if with_values and value is not None:
                annotations[ASSIGNMENT_ANNOTATION] = value
                if fake_signature and signatures:
                    annotations[SIGNATURE_ANNOTATION] = sign_assignment(
                        KEY, "uid-default-ours", "n", ((1, 600),)
                    )
            cache.apply_pod(
                ADDED, pod_obj(f"p{i}", vgpu=milli, node_name="n", annotations=annotations)
            )
        return cache

    assert build(True, signatures=False) == build(False)
    forged = build(True)
    assert sum(forged) <= sum(build(False))
