"""Which bound pods this scheduler bound itself (docs/security.md, "Deleting and
evicting only what it bound").

The scheduler deletes pods (a partial gang past its grace) and evicts them (priority
preemption). Both must touch only pods it bound: a pod a tenant created with its own
`spec.nodeName` while naming this scheduler, or one another actor bound, is not the
scheduler's to remove, whatever its labels say. `schedulerName`, labels and
annotations are all tenant-writable, so none of them tells. What does:

- in this process, the plan it assumed whose bind the watch then showed on the same
  node (`note_bound`);
- after a restart (the cache is rebuilt by a relist and remembers nothing), the
  signature every Binding carries: HMAC-SHA256 over the pod's uid, its node and its
  GPU devices (none for a pod without GPUs), the same value and key as the GPU
  assignment's (cache.gpu.sign_assignment). Only the key's holder can make one; the
  uid is the API server's, so a signature copied onto another pod does not verify.

A pod found ours is remembered until it goes, so a later edit of its annotations
(possible only without the admission policy) does not change the answer while the
scheduler runs. Pure: no I/O, no clock.
"""

from __future__ import annotations

from cache.pod import PodInfo
from cache.signing import SigningKeys


def signed_by(keys: SigningKeys | bytes | None, pod: PodInfo) -> bool:
    """Whether `pod` is bound and carries the signature of the holder of `keys` (any
    key of the ring) over its uid, its node and its written GPU devices."""
    signature = pod.assignment_signature
    ring = SigningKeys.of(keys)
    if ring is None or signature is None or not pod.node_name:
        return False
    return ring.verifies(pod.uid, pod.node_name, pod.assignment or (), signature)


class BoundByUs:
    """The bound pods known to be this scheduler's binds, by uid (and node, so that a
    record never outlives the binding it was made for)."""

    def __init__(self) -> None:
        self._node_of: dict[str, str] = {}

    def note_bound(self, uid: str, node: str) -> None:
        """This process's bind of `uid` onto `node` was seen landed."""
        self._node_of[uid] = node

    def forget(self, uid: str) -> None:
        """The pod is gone."""
        self._node_of.pop(uid, None)

    def is_ours(self, pod: PodInfo, key: SigningKeys | bytes | None) -> bool:
        """Whether this scheduler bound `pod`: seen landing here, or signed with `key`.
        A signature is checked once per pod and remembered."""
        if not pod.node_name:
            return False
        node = self._node_of.get(pod.uid)
        if node is not None:
            return node == pod.node_name
        if signed_by(key, pod):
            self._node_of[pod.uid] = pod.node_name
            return True
        return False

    def __len__(self) -> int:
        return len(self._node_of)
