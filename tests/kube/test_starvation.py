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
from tests.kube.test_runner import (
    TEST_TIMEOUT,
    bound,
    fast_config,
    running_with,
    unschedulable_message,
)
from tests.kube.test_runner_faults import SteppedClock
from tests.kubeapi import KubeApiEmulator
from tests.kubeapi.resources import EVENTS
from tests.signed import signed, with_key
from tests.waiting import HANG, cycles_pass, eventually, free_port


@pytest.mark.asyncio
async def test_a_starving_gang_is_told_its_reservation_and_later_work_stays_off(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            # Bound by the scheduler (signed): work the guard waits for.
            api.put_pod(signed(pod_obj("running", gpus=4, node_name="n", phase="Running")))
            port = free_port()
            config = with_key(fast_config(port), tmp_path)
            # A guard no test outlasts in wall time: only the clock's jump crosses it, so
            # big starves and the small work, however slow the machine, does not.
            config = dataclasses.replace(config, starvation=StarvationConfig(guard_seconds=HANG))
            clock = SteppedClock()
            async with running_with(api, tmp_path, config, clock=clock):
                for i in range(2):
                    api.put_pod(pod_obj(f"big-{i}", gang="big", min_member=2, gpus=4))
                await eventually(
                    lambda: "big-0" in events(api, "FailedScheduling"), "big tried and waits"
                )
                clock.offset += HANG + 1.0  # big past the guard, on the scheduler's clock
                # A stream of small work: each wakes the loop, is tried, and finds the
                # room reserved.
                for i in range(3):
                    api.put_pod(pod_obj(f"small-{i}", gpus=1))
                    await eventually(
                        lambda i=i: bool(
                            unschedulable_message(api.get_pod("default", f"small-{i}") or {})
                        ),
                        f"small-{i} tried",
                    )
                await eventually(lambda: len(events(api, "Reserved")) == 1, "reserved told")
                assert not bound(api, "small-")
                api.delete_pod("default", "running")
                await eventually(lambda: len(bound(api, "big-")) == 2, "big bound")
                # Cycles after: none announces the reservation again (their writes are
                # drained when the scheduler stops).
                await cycles_pass(port)
            (message,) = events(api, "Reserved").values()
            assert "gang default/big has waited too long: 1 node(s) reserved for it" in message
            told = [e for e in api.objects(EVENTS) if e.get("reason") == "Reserved"]
            assert len(told) == 1  # once

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
