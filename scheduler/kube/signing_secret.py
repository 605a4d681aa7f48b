"""The signing keys' Secrets: read (and at first start created) by the scheduler, read by
the node agents (docs/security.md, "The signing key"; docs/decisions.md).

- `kube-system/gang-scheduler-assignment-key` (assignmentSigning.secretName) holds the
  scheduler's keys (entries key-1, key-2, ...: the highest signs, every one verifies).
  Each replica reads it at start; where it does not exist, the replica creates it with
  one random key. A create is atomic in the API server: of two replicas starting
  together one creates it, the other gets 409 AlreadyExists and reads the winner's, so
  both sign with the same key. No secret byte is ever in git or in a chart.
- `kube-system/gang-scheduler-node-agent-key` (assignmentSigning.nodeAgentSecretName)
  holds the node agents' keys, derived one-way from the scheduler's
  (cache.signing.node_agent_key), written by the scheduler at start whenever it differs
  (a rotation), read by the node agents' device plugin.

RBAC (deploy/rbac-scheduler.yaml): get and update on those two names only; create on
Secrets of the namespace, since a create cannot be limited by name (the name is not in
its URL). The agent: get on the node agents' Secret only.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from collections.abc import Mapping
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from cache.signing import SigningKeys
from scheduler.kube.client import ApiError, KubeClient
from scheduler.process.config import AssignmentSigningConfig
from scheduler.process.signing import (
    FIRST_ENTRY,
    NEW_KEY_BYTES,
    KeyProblem,
    load_key_file,
    process_key,
    ring_from_entries,
)
from scheduler.process.startup import StartupError

log = logging.getLogger(__name__)

LABELS = {"app.kubernetes.io/name": "gang-scheduler", "app.kubernetes.io/component": "scheduler"}
_ATTEMPTS = 5
_TRANSIENT = frozenset({429, 500, 502, 503, 504})


def secret_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/secrets"
    return f"{base}/{name}" if name else base


def _transient(error: BaseException) -> bool:
    if isinstance(error, ApiError):
        return error.status in _TRANSIENT
    return isinstance(error, aiohttp.ClientError | TimeoutError | ConnectionError)


def _retrying() -> AsyncRetrying:
    return AsyncRetrying(
        retry=retry_if_exception(_transient),
        stop=stop_after_attempt(_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.2, max=5.0),
        reraise=True,
    )


def secret_entries(secret: Mapping[str, Any], where: str) -> dict[str, bytes]:
    """The decoded `data` of a Secret (KeyProblem on a value that is not base64)."""
    data = secret.get("data")
    entries: dict[str, bytes] = {}
    for name, value in data.items() if isinstance(data, Mapping) else ():
        try:
            entries[str(name)] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise KeyProblem(f"{where}: entry {name!r} is not base64") from None
    return entries


def _encoded(entries: Mapping[str, bytes]) -> dict[str, str]:
    return {name: base64.b64encode(value).decode() for name, value in entries.items()}


async def read_secret(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The Secret, None when it does not exist (transient errors retried)."""
    async for attempt in _retrying():
        with attempt:
            try:
                return await client.request_json("GET", secret_path(namespace, name))
            except ApiError as error:
                if error.status == 404:
                    return None
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _create(
    client: KubeClient, namespace: str, name: str, entries: Mapping[str, bytes]
) -> bool:
    """Create the Secret; False when it exists already (another replica won the race)."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
        "type": "Opaque",
        "data": _encoded(entries),
    }
    async for attempt in _retrying():
        with attempt:
            try:
                await client.request_json("POST", secret_path(namespace), body=body)
            except ApiError as error:
                if error.status == 409:
                    return False
                raise
    return True


async def scheduler_keys(client: KubeClient, namespace: str, name: str) -> SigningKeys:
    """The ring in the Secret, which is created with one random key where it does not
    exist. KeyProblem when it holds no usable key; ApiError when the API refuses."""
    where = f"Secret {namespace}/{name}"
    for _ in range(_ATTEMPTS):
        secret = await read_secret(client, namespace, name)
        if secret is not None:
            return ring_from_entries(secret_entries(secret, where), where)
        if await _create(client, namespace, name, {FIRST_ENTRY: os.urandom(NEW_KEY_BYTES)}):
            log.info("created the assignment signing key %s (first start)", where)
        # Created by us or by the other replica: read what the API holds, so that both
        # sign with the stored key whoever won.
    raise KeyProblem(f"{where} was created but cannot be read back")


def node_agent_entries(keys: SigningKeys) -> dict[str, bytes]:
    """The node agents' Secret data for `keys`: key-1 the oldest ... key-<n> the newest,
    each derived (cache.signing.node_agent_key)."""
    ring = keys.for_node_agents()
    ordered = (*reversed(ring.older), ring.newest)
    return {f"key-{number}": key for number, key in enumerate(ordered, start=1)}


async def publish_node_agent_keys(
    client: KubeClient, namespace: str, name: str, keys: SigningKeys
) -> None:
    """Make the node agents' Secret hold exactly the keys derived from `keys`: created
    when missing, replaced when it differs (a rotation), left alone when equal."""
    wanted = node_agent_entries(keys)
    where = f"Secret {namespace}/{name}"
    for _ in range(_ATTEMPTS):
        secret = await read_secret(client, namespace, name)
        if secret is None:
            if await _create(client, namespace, name, wanted):
                log.info("created the node agents' key %s", where)
                return
            continue
        try:
            current = secret_entries(secret, where)
        except KeyProblem:
            current = {}
        if current == wanted:
            return
        replaced = dict(secret)
        replaced["data"] = _encoded(wanted)
        replaced.pop("stringData", None)
        try:
            await client.request_json("PUT", secret_path(namespace, name), body=replaced)
        except ApiError as error:
            if error.status == 409:  # the other replica wrote it meanwhile: compare again
                continue
            raise
        log.info("updated the node agents' key %s (%d keys)", where, len(wanted))
        return
    raise KeyProblem(f"{where} keeps changing while it is written")


async def obtain_signing_keys(client: KubeClient, settings: AssignmentSigningConfig) -> SigningKeys:
    """The keys this scheduler signs and verifies with, and the node agents' keys
    published. StartupError when the configured source cannot give them: a scheduler
    that signs with a key the other replica lacks would make the other one, once it
    leads, hold every GPU those pods sit on (cache/cluster.py), so it does not start."""
    namespace = settings.namespace
    try:
        if settings.key_file:
            keys = load_key_file(settings.key_file)
        elif settings.secret_name:
            keys = await scheduler_keys(client, namespace, settings.secret_name)
        else:
            return process_key()
        if settings.node_agent_secret_name:
            await publish_node_agent_keys(client, namespace, settings.node_agent_secret_name, keys)
    except KeyProblem as problem:
        raise StartupError(f"assignmentSigning: {problem}") from None
    except ApiError as error:
        hint = (
            " (deploy/rbac-scheduler.yaml grants get and update on the two Secrets by "
            "name, and create on Secrets of that namespace)"
            if error.status == 403
            else ""
        )
        raise StartupError(
            f"assignmentSigning: cannot read or write the signing keys: {error}{hint}"
        ) from None
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as error:
        raise StartupError(
            f"assignmentSigning: cannot reach the API for the signing keys: {error}"
        ) from None
    return keys
