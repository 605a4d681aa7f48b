"""Pods as this scheduler binds them: signed with its key (cache/ownership.py).

A test that means "a member the scheduler bound before it restarted" writes the pod
with `spec.nodeName` and the signature its Binding would have carried; a pod with a
node and no signature is one a tenant pinned, which the scheduler never deletes or
evicts. `with_key` gives a scheduler configuration that signs with the same key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION, parse_assignment, sign_assignment
from cache.signing import NODE_SIGNATURE_ANNOTATION, SigningKeys
from scheduler.process.config import AssignmentSigningConfig, SchedulerConfig

TEST_KEY = b"test-key-0123456789abcdef-0123456789"


def signed(pod: dict[str, Any], key: bytes = TEST_KEY) -> dict[str, Any]:
    """`pod` (bound: `spec.nodeName` set) with the signature of a Binding made with
    `key`, over its uid, node and written GPU devices."""
    meta = pod["metadata"]
    annotations = meta.setdefault("annotations", {})
    written = annotations.get(ASSIGNMENT_ANNOTATION)
    shares = parse_assignment(written) if written else ()
    annotations[SIGNATURE_ANNOTATION] = sign_assignment(
        key, meta["uid"], pod["spec"]["nodeName"], shares
    )
    return pod


def with_key(config: SchedulerConfig, directory: Path, key: bytes = TEST_KEY) -> SchedulerConfig:
    """`config` signing with `key`, written to a file in `directory`."""
    key_file = directory / "assignment-key"
    key_file.write_bytes(key)
    return dataclasses.replace(
        config, assignment_signing=AssignmentSigningConfig(key_file=str(key_file))
    )


def node_signed(pod: dict[str, Any], key: bytes = TEST_KEY) -> dict[str, Any]:
    """`pod` (bound, with an assignment) signed as a Binding made with `key` signs it
    for the device plugin: the node agents' signature (cache/signing.py)."""
    meta = pod["metadata"]
    annotations = meta.setdefault("annotations", {})
    shares = parse_assignment(annotations[ASSIGNMENT_ANNOTATION])
    annotations[NODE_SIGNATURE_ANNOTATION] = (
        SigningKeys(key).for_node_agents().sign(meta["uid"], pod["spec"]["nodeName"], shares)
    )
    return pod


def node_agent_secret(key: bytes = TEST_KEY) -> dict[str, Any]:
    """The Secret the scheduler signing with `key` writes for the node agents."""
    import base64

    from scheduler.kube.signing_secret import node_agent_entries

    return {
        "metadata": {"name": "gang-scheduler-node-agent-key", "namespace": "kube-system"},
        "type": "Opaque",
        "data": {
            name: base64.b64encode(value).decode()
            for name, value in node_agent_entries(SigningKeys(key)).items()
        },
    }
