"""The allocator's words on a member's refused node (scheduler/planner/dra_choice.py)
are worded only when read, yet say what the node looked like when it was refused: the
devices the gang's earlier members held then, not what they hold when the words are
read."""

from __future__ import annotations

from cache.cluster import ClusterCache, EventType
from cache.dra.store import DraCache
from cache.snapshot import Snapshot
from policies.dra.allocator import ClaimAllocator
from scheduler.planner.dra_choice import DraChoiceKind
from tests.dra_builders import DRIVER, claim_obj, class_obj, device, exactly, slice_obj
from tests.factories import node_obj
from tests.scheduler.dra_cores import claiming


def test_a_refusals_words_describe_the_node_as_it_was_when_refused() -> None:
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("node-1"))
    dra = DraCache()
    for obj in (slice_obj("s", [device("gpu-0")]), class_obj()):
        (dra.apply_slice if obj["kind"] == "ResourceSlice" else dra.apply_class)("ADDED", obj)
    for name in ("a", "b"):
        dra.apply_claim("ADDED", claim_obj(name, [exactly()]))
        cache.apply_pod(EventType.ADDED, claiming(f"p-{name}", name, size=2))
    first, second = (cache.pod(f"uid-ns-p-{name}") for name in ("a", "b"))
    assert first is not None and second is not None
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    node = snapshot.nodes["node-1"]
    kind = DraChoiceKind(
        ClaimAllocator(dra, {}),
        {first.uid: ("ns/a",), second.uid: ("ns/b",)},
        {first.uid: first, second.uid: second},
    )
    choices = kind.start()
    take = choices.offer(first, node)
    assert take is not None
    take()  # the first member holds the node's only device
    assert choices.offer(second, node) is None
    choices.tentative.release(first.uid)  # and lets it go before the words are read
    assert kind.detail(second.uid, ()) == (
        "on node node-1: cannot allocate all claims: claim ns/b request gpu: 0 of 1 "
        f"devices of class {DRIVER} match (1 devices, 1 in use)"
    )


def test_a_member_refused_as_one_asking_alike_gets_words_naming_its_own_claim() -> None:
    """The third of three alike members is refused without a search (the second asked
    alike on the node as it stood, dra_choice.refusal_key); its words still name its
    own claim and the node as it was."""
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("node-1"))
    dra = DraCache()
    dra.apply_slice("ADDED", slice_obj("s", [device("gpu-0")]))
    dra.apply_class("ADDED", class_obj())
    pods = []
    for name in ("a", "b", "c"):
        dra.apply_claim("ADDED", claim_obj(name, [exactly()]))
        cache.apply_pod(EventType.ADDED, claiming(f"p-{name}", name, size=3))
        pod = cache.pod(f"uid-ns-p-{name}")
        assert pod is not None
        pods.append(pod)
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    node = snapshot.nodes["node-1"]
    kind = DraChoiceKind(
        ClaimAllocator(dra, {}),
        {pod.uid: (f"ns/{name}",) for pod, name in zip(pods, "abc", strict=True)},
        {pod.uid: pod for pod in pods},
    )
    choices = kind.start()
    take = choices.offer(pods[0], node)
    assert take is not None
    take()
    assert choices.offer(pods[1], node) is None
    assert len(kind.refused) == 1
    assert choices.offer(pods[2], node) is None
    choices.tentative.release(pods[0].uid)
    assert kind.detail(pods[2].uid, ()) == (
        "on node node-1: cannot allocate all claims: claim ns/c request gpu: 0 of 1 "
        f"devices of class {DRIVER} match (1 devices, 1 in use)"
    )
