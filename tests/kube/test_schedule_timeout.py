"""A PodGroup's spec.scheduleTimeoutSeconds: how long its gang may stay partially bound
(members holding GPUs while the rest cannot be placed) before the bound members are
deleted, as coscheduling's Permit wait lets reserved members hold their room for that
long; never longer than binding.partialGangGraceSeconds (docs/decisions.md)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cache.pod import pod_from_api
from cache.podgroup import podgroup_from_api
from scheduler.gangs.gang import Gang, build_gang
from scheduler.kube.binder import PartialGangs
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.kube.test_runner import fast_config, running_with
from tests.kubeapi import PODGROUPS, KubeApiEmulator
from tests.signed import signed, with_key
from tests.waiting import HANG, eventually, free_port


def group(timeout: int | None) -> dict[str, object]:
    obj = podgroup_obj("g", 4)
    if timeout is not None:
        obj["spec"] = {"minMember": 4, "scheduleTimeoutSeconds": timeout}
    return obj


def partial_gang(timeout: int | None) -> Gang:
    """2 of 4 members bound, the other 2 pending, sized by a PodGroup."""
    pods = [
        pod_from_api(pod_obj(f"p{i}", gang="g", node_name="n0" if i < 2 else "")) for i in range(4)
    ]
    gang = build_gang("default/g", pods, podgroup_from_api(group(timeout)), "gang-scheduler")
    assert gang is not None and len(gang.bound) == 2
    return gang


def test_the_podgroup_timeout_shortens_the_grace_and_never_lengthens_it() -> None:
    tracker = PartialGangs(grace=60.0)
    assert tracker.grace_for(partial_gang(None)) == 60.0
    assert tracker.grace_for(partial_gang(5)) == 5.0
    assert tracker.grace_for(partial_gang(3600)) == 60.0  # a tenant cannot hold GPUs longer


def test_a_partial_gang_is_released_after_its_podgroup_timeout() -> None:
    tracker = PartialGangs(grace=60.0)
    gang = partial_gang(5)
    assert tracker.found_at_start([gang], 100.0) == ["default/g"]
    tracker.attempted(gang.key, placeable=False)
    assert tracker.review({gang.key: gang}, 104.0) == {gang.key: "wait"}
    assert tracker.review({gang.key: gang}, 105.0) == {gang.key: "delete"}


@pytest.mark.asyncio
async def test_the_scheduler_deletes_a_stuck_partial_gang_after_its_timeout(
    tmp_path: Path,
) -> None:
    """Found partial at start (2 of 4 bound, no room for the rest); the default grace is
    60 s, the PodGroup asks for 1 s: its bound members are deleted within seconds."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(2):
                api.put_node(node_obj(f"n{i}", gpus=1))
            api.put(PODGROUPS, group(1))
            for i in range(4):
                node = f"n{i}" if i < 2 else ""
                member = pod_obj(f"g-{i}", gang="g", gpus=1, node_name=node)
                # The bound two were bound by this scheduler (signed) before a restart.
                api.put_pod(signed(member) if node else member)
            config = with_key(fast_config(free_port()), tmp_path)
            grace = config.binding.partial_gang_grace_seconds
            assert grace == 60.0
            # The deletion is dated by the scheduler's own clock: before the default
            # grace had passed on it, only the PodGroup's 1 s can have decided it (a
            # slow machine takes longer, and can still tell the two apart).
            clock = time.monotonic
            began = clock()
            deleted_at: list[float] = []

            def deleted() -> bool:
                if api.request_count("delete", "pods") == 2 and not deleted_at:
                    deleted_at.append(clock())
                return bool(deleted_at)

            async with running_with(api, tmp_path, config, clock=clock):
                await eventually(deleted, "the partial gang's bound members deleted", grace)
            assert deleted_at[0] - began < grace
            assert api.request_count("create", "pods", "binding") == 0

    await asyncio.wait_for(scenario(), 4 * HANG)
