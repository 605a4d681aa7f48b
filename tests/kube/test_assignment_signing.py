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
from scheduler.process.signing import KeyProblem, load_key_file, process_key
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.waiting import HANG, eventually, free_port

TEST_TIMEOUT = 4 * HANG  # turns a hang into a failure, whatever the speed


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
                assert await asyncio.wait_for(task, HANG) == 0
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
                if key_file_is_the_same:
                    assert trusted == shares
                    # The copy does not verify: signed, so held at its worst (both GPUs),
                    # and the real bind stays where it is.
                    assert cache.charged_shares(copy["metadata"]["uid"]) == ((0, 700), (1, 700))
                else:
                    # Signed with a key this process lacks (a key replaced without keeping
                    # the old one): the bound pod may hold either GPU, so it is charged on
                    # both, never inferred onto one that looks free. The copy too.
                    assert SIGNATURE_ANNOTATION in annotations
                    assert trusted == ((0, 700), (1, 700))
                    assert cache.charged_shares(copy["metadata"]["uid"]) == trusted

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_a_key_file_or_directory_is_read_and_anything_unusable_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"  sixteen bytes at least  \n")
    assert load_key_file(str(good)).all == (b"sixteen bytes at least",)
    # A mounted Secret: one file per entry (and the kubelet's own ..data links); the
    # highest key-<N> signs, every key verifies.
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "key-1").write_bytes(b"the first key, long enough")
    (mounted / "key-10").write_bytes(b"the tenth key, long enough")
    (mounted / "key-2").write_bytes(b"the second key, long enough")
    (mounted / "..data").mkdir()
    (mounted / "README").write_bytes(b"not a key")
    ring = load_key_file(str(mounted))
    assert ring.newest == b"the tenth key, long enough"
    assert ring.older == (b"the second key, long enough", b"the first key, long enough")
    short = tmp_path / "short"
    short.write_bytes(b"too short")
    empty = tmp_path / "empty"
    empty.mkdir()
    for path, why in (
        (short, "fewer than 16"),
        (tmp_path / "missing", "cannot read"),
        (empty, "no signing key"),
    ):
        with pytest.raises(KeyProblem, match=why):
            load_key_file(str(path))
    with caplog.at_level(logging.WARNING):
        first, second = process_key(), process_key()
    assert first != second and len(first.newest) == 32
    assert "a key of this process only" in caplog.text
