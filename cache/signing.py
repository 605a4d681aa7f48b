"""The keys that sign the scheduler's GPU assignments, and the node agents' keys.

Pure: the keys arrive as bytes (scheduler/process/signing.py and scheduler/kube/
signing_secret.py find them); nothing here reads a file or the API.

- A key ring signs with its newest key and verifies with any of its keys, so that a
  rotation (a new key added, the old one kept until the pods it signed end) never leaves
  a bound pod unverifiable (docs/security.md, "The signing key").
- The node agents verify a second signature, over the same text, with a key derived
  from each scheduler key (HMAC of a fixed label): one-way, so the key a node holds
  signs nothing the scheduler's cache trusts (docs/decisions.md, "Who verifies an
  assignment").
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

from cache.gpu import DeviceShares, sign_assignment, verify_assignment

# The signature the node agents' device plugin checks (the scheduler's own check reads
# cache.gpu.SIGNATURE_ANNOTATION): same text, a key derived for the node agents.
NODE_SIGNATURE_ANNOTATION = "gang-scheduler.io/gpu-devices-node-signature"
_NODE_AGENT_LABEL = b"gang-scheduler node agents v1"


def node_agent_key(key: bytes) -> bytes:
    """The node agents' key derived from a scheduler key. Knowing it does not give the
    scheduler key (HMAC-SHA256 is one-way in its key)."""
    return hmac.new(key, _NODE_AGENT_LABEL, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class SigningKeys:
    """Sign with `newest`; verify with `newest` or any of `older`."""

    newest: bytes
    older: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, keys: SigningKeys | bytes | None) -> SigningKeys | None:
        """A key ring from a ring, a single key, or nothing."""
        if keys is None or isinstance(keys, SigningKeys):
            return keys
        return cls(bytes(keys))

    @property
    def all(self) -> tuple[bytes, ...]:
        return (self.newest, *self.older)

    def sign(self, uid: str, node: str, shares: DeviceShares) -> str:
        return sign_assignment(self.newest, uid, node, shares)

    def verifies(self, uid: str, node: str, shares: DeviceShares, signature: str) -> bool:
        """Whether `signature` was made with any of these keys for this pod, node and
        devices."""
        return any(verify_assignment(key, uid, node, shares, signature) for key in self.all)

    def for_node_agents(self) -> SigningKeys:
        """The node agents' ring: each key derived (node_agent_key), same order."""
        return SigningKeys(node_agent_key(self.newest), tuple(map(node_agent_key, self.older)))


def ring_of(keys: Sequence[bytes]) -> SigningKeys | None:
    """The ring of `keys`, newest first; None when there is none."""
    if not keys:
        return None
    return SigningKeys(keys[0], tuple(keys[1:]))
