"""The starvation guard end to end against the API emulator (scheduler/sharing/starvation.py):
a gang that waited past `starvation.guardSeconds` gets one Normal `Reserved` event, later
work is kept off its node, and it is bound once the work there leaves."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from scheduler.process.config import StarvationConfig
from tests.factories import node_obj, pod_obj
from tests.kube.test_preemption import events
from tests.kube.test_runner import TEST_TIMEOUT, bound, fast_config, running_with
from tests.kubeapi import KubeApiEmulator
from tests.kubeapi.resources import EVENTS
from tests.signed import signed, with_key
from tests.waiting import eventually, free_port


@pytest.mark.asyncio
async def test_a_starving_gang_is_told_its_reservation_and_later_work_stays_off(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            # Bound by the scheduler (signed): work the guard waits for.
            api.put_pod(signed(pod_obj("running", gpus=4, node_name="n", phase="Running")))
            config = with_key(fast_config(free_port()), tmp_path)
            config = dataclasses.replace(config, starvation=StarvationConfig(guard_seconds=0.5))
            async with running_with(api, tmp_path, config):
                for i in range(2):
                    api.put_pod(pod_obj(f"big-{i}", gang="big", min_member=2, gpus=4))
                await eventually(
                    lambda: "big-0" in events(api, "FailedScheduling"), "big tried and waits"
                )
                await asyncio.sleep(0.8)  # past the guard
                # A stream of small work: it wakes the loop, and finds the room reserved.
                for i in range(3):
                    api.put_pod(pod_obj(f"small-{i}", gpus=1))
                    await asyncio.sleep(0.2)
                await eventually(lambda: len(events(api, "Reserved")) == 1, "reserved told")
                assert not bound(api, "small-")
                api.delete_pod("default", "running")
                await eventually(lambda: len(bound(api, "big-")) == 2, "big bound")
                await asyncio.sleep(0.3)
            (message,) = events(api, "Reserved").values()
            assert "gang default/big has waited too long: 1 node(s) reserved for it" in message
            told = [e for e in api.objects(EVENTS) if e.get("reason") == "Reserved"]
            assert len(told) == 1  # once

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
