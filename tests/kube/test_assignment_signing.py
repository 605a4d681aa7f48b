"""The scheduler signs what it binds and, restarted with the same key, trusts exactly
that (docs/security.md): `run_scheduler` against the API emulator, then a fresh core
built from the same configuration reading what the API holds."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from cache.cluster import EventType
from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION, parse_assignment
from scheduler.kube.runner import run_scheduler
from scheduler.process.config import SchedulerConfig, build_core_from, config_from_mapping
from scheduler.process.signing import load_assignment_key
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.waiting import eventually, free_port

TEST_TIMEOUT = 20.0


def config_with_key(key_file: Path) -> SchedulerConfig:
    return config_from_mapping(
        {
            "http": {"address": "127.0.0.1", "port": free_port()},
            "leaderElection": {"enabled": False},
            "timeouts": {"initialBackoffSeconds": 0.1, "bindTimeoutSeconds": 2.0},
            "assignmentSigning": {"keyFile": str(key_file)},
        }
    )


@pytest.mark.asyncio
async def test_a_restarted_scheduler_trusts_its_signed_binds_and_nothing_else(
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("0123456789abcdef0123456789abcdef\n")
    config = config_with_key(key_file)

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=2, vgpu=2000))
            api.put_pod(pod_obj("a", vgpu=700))
            kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
            stop = asyncio.Event()
            task = asyncio.create_task(
                run_scheduler(config, str(kubeconfig), clock=time.monotonic, stop=stop)
            )
            try:
                await eventually(
                    lambda: bool((api.get_pod("default", "a") or {})["spec"].get("nodeName")),
                    "a bound",
                )
            finally:
                stop.set()
                assert await asyncio.wait_for(task, 10.0) == 0
            bound = api.get_pod("default", "a")
            assert bound is not None
            annotations = bound["metadata"]["annotations"]
            shares = parse_assignment(annotations[ASSIGNMENT_ANNOTATION])
            # A tenant's copy of the signed value, on a pod of its own on the same node.
            copy = pod_obj("copy", vgpu=700, node_name="n", annotations=dict(annotations))
            # The same configuration, a new process: its cache reads the API's pods.
            for key_file_is_the_same in (True, False):
                if not key_file_is_the_same:
                    key_file.write_text("another key, same length as before!\n")
                cache = build_core_from(config).cache
                cache.apply_node(EventType.ADDED, node_obj("n", gpus=2, vgpu=2000))
                cache.apply_pod(EventType.ADDED, bound)
                cache.apply_pod(EventType.ADDED, copy)
                trusted = cache.charged_shares(bound["metadata"]["uid"])
                other = 1 - shares[0][0]
                if key_file_is_the_same:
                    assert trusted == shares
                    # The copy is inferred: onto the other GPU, where 700 fit.
                    assert cache.charged_shares(copy["metadata"]["uid"]) == ((other, 700),)
                else:  # not this key's signature: both inferred, in (created, uid) order
                    assert SIGNATURE_ANNOTATION in annotations
                    charged = {trusted, cache.charged_shares(copy["metadata"]["uid"])}
                    assert charged == {((0, 700),), ((1, 700),)}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_the_key_file_is_read_or_a_random_key_is_used_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"  sixteen bytes at least  \n")
    assert load_assignment_key(str(good)) == b"sixteen bytes at least"
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    with caplog.at_level(logging.WARNING):
        first = load_assignment_key(str(short))
        second = load_assignment_key(str(tmp_path / "missing"))
        third = load_assignment_key("")
    assert len({first, second, third}) == 3 and all(len(k) == 32 for k in (first, second, third))
    assert "fewer than 16" in caplog.text and "does not exist" in caplog.text
