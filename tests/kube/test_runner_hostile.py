"""`run_scheduler` end to end with hostile objects next to a well-formed gang (issue 10):
the gang binds, each hostile pod gets a Warning event and PodScheduled=False, and the
process stays up (the scheduler exits 0 when stopped, and a gang created after the
hostile objects still binds)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import cache.cluster
from cache.gpu import COUNT_LABEL, TOPOLOGY_ANNOTATION
from scheduler.kube.client import WatchBroken, _decode_event
from scheduler.kube.events import FeedbackRecorder
from scheduler.kube.informer import RECOVERABLE
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running, seed_gang, unschedulable_message
from tests.kube.test_runner_faults import assert_one_bind_per_pod, warning_reasons
from tests.kubeapi import EVENTS, KubeApiEmulator
from tests.waiting import eventually


def warning_messages(api: KubeApiEmulator, pod_name: str) -> str:
    return " | ".join(
        str(event.get("message"))
        for event in api.objects(EVENTS)
        if event.get("type") == "Warning"
        and event.get("involvedObject", {}).get("name") == pod_name
    )


def pod_named(api: KubeApiEmulator, name: str) -> dict[str, Any]:
    return next(p for p in api.pods() if p["metadata"]["name"] == name)


@pytest.mark.asyncio
async def test_hostile_pods_and_nodes_are_told_and_the_well_formed_gang_binds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug in reading one pod (injected: no known input causes one any more) must
    # stay with that pod.
    real = cache.cluster.pod_from_api

    def buggy(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj.get("metadata", {}).get("name") == "trigger":
            raise RuntimeError("injected parser bug")
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(cache.cluster, "pod_from_api", buggy)

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(2):
                api.put_node(node_obj(f"n{i}", gpus=2))
            # A GPU count label of a million: no million devices; the node offers none.
            million = node_obj("million", gpus=1)
            million["metadata"]["labels"][COUNT_LABEL] = str(10**6)
            api.put_node(million)
            deep = node_obj("deep", gpus=1)
            deep["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = "[" * 50_000 + "]" * 50_000
            api.put_node(deep)
            # Annotations are not validated by the API server: 5,000 digits get in.
            # (8 GPUs: it never fits, so it stays pending and keeps being told.)
            api.put_pod(pod_obj("digits-0", gang="digits", min_member="9" * 5000, gpus=8))
            # A negative request: the API server refuses it, a broken proxy need not.
            api.put_pod(pod_obj("negative", vgpu=-300))
            api.put_pod(pod_obj("trigger", gpus=1))
            seed_gang(api, "good", 4)
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "good")) == 4, "the good gang bound")
                await eventually(
                    lambda: "InvalidMinMember" in warning_reasons(api, "digits-0"),
                    "a warning on the 5,000-digit min-member",
                )
                await eventually(
                    lambda: "must not be negative" in warning_messages(api, "negative"),
                    "a warning on the negative request",
                )
                await eventually(
                    lambda: (
                        "internal error while reading the pod: RuntimeError: injected"
                        in warning_messages(api, "trigger")
                    ),
                    "a warning on the pod whose reading raised",
                )
                await eventually(
                    lambda: bool(unschedulable_message(pod_named(api, "trigger"))),
                    "PodScheduled=False on the pod whose reading raised",
                )
                assert unschedulable_message(pod_named(api, "negative"))
                # The loop is still running: a gang created now binds too.
                seed_gang(api, "late", 1)
                await eventually(lambda: len(bound(api, "late")) == 1, "a later gang bound")
            assert not {"digits-0", "negative", "trigger"} & set(bound(api))
            # The node with a million GPUs offers none; the one whose topology is nested
            # too deep still offers its GPU from allocatable (links unknown).
            assert "million" not in {p["spec"]["nodeName"] for p in bound(api).values()}
            assert_one_bind_per_pod(api)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_feedback_that_raises_for_one_gang_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = FeedbackRecorder.unschedulable

    def buggy(self: FeedbackRecorder, gang: Any, result: Any, now: float) -> None:
        if gang.name == "cursed":
            raise RuntimeError("injected recorder bug")
        real(self, gang, result, now)

    monkeypatch.setattr(FeedbackRecorder, "unschedulable", buggy)

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=2))
            api.put_pod(pod_obj("cursed-0", gang="cursed", min_member=1, gpus=8))
            api.put_pod(pod_obj("other-0", gang="other", min_member=1, gpus=8))
            async with running(api, tmp_path):
                await eventually(
                    lambda: bool(unschedulable_message(pod_named(api, "other-0"))),
                    "the other unschedulable gang told",
                )
                seed_gang(api, "good", 2)
                await eventually(lambda: len(bound(api, "good")) == 2, "a gang bound after")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_a_watch_event_nested_too_deep_breaks_the_watch_not_the_process() -> None:
    with pytest.raises(WatchBroken):
        _decode_event(b'{"type": "ADDED", "object": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert RecursionError in RECOVERABLE  # a list page like it: relisted with backoff
