"""The keys the device plugin checks an assignment's node signature with.

The scheduler signs every assignment twice (cache/signing.py): once for its own books,
once with keys derived one-way for the node agents, which it writes into the Secret
`kube-system/gang-scheduler-node-agent-key` at each start. The plugin reads that Secret
(RBAC: get on that name only) at every Allocate, so a rotation is seen at once, and
serves an assignment only when its node signature verifies for that pod, node and
devices: without the admission policy, a tenant's own or patched
`gang-scheduler.io/gpu-devices` is refused (docs/security.md).
"""

from __future__ import annotations

from typing import Protocol

from cache.signing import SigningKeys
from scheduler.kube.client import KubeClient
from scheduler.kube.signing_secret import read_secret, secret_entries
from scheduler.process.signing import KeyProblem, ring_from_entries

DEFAULT_KEY_SECRET = "kube-system/gang-scheduler-node-agent-key"


class KeySource(Protocol):
    async def current(self) -> SigningKeys | None:
        """The keys now, None when there are none (yet); raises on an API failure."""
        ...


class SecretKeySource:
    """The node agents' keys in a Secret, read through the API at each call."""

    def __init__(self, client: KubeClient, secret: str) -> None:
        self.client = client
        self.namespace, _, self.name = secret.partition("/")

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.name}"

    async def current(self) -> SigningKeys | None:
        secret = await read_secret(self.client, self.namespace, self.name)
        if secret is None:
            return None
        try:
            return ring_from_entries(secret_entries(secret, self.where), self.where)
        except KeyProblem:
            return None


def secret_problem(secret: str) -> str | None:
    """Why `--assignment-key-secret` is not `namespace/name` (or empty)."""
    if not secret:
        return None
    namespace, slash, name = secret.partition("/")
    if not (slash and namespace and name and "/" not in name):
        return f"--assignment-key-secret must be namespace/name (or empty), got {secret!r}"
    return None
