"""Preemption under a flaky network (docs/security.md, "Network"): an eviction whose
answer is lost must not widen the disruption to a second victim gang."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.factories import node_obj
from tests.kube.test_preemption import gang
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import KubeApiEmulator
from tests.waiting import eventually


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [500, 503, 504])
async def test_an_eviction_whose_answer_is_lost_evicts_one_victim_gang_not_two(
    tmp_path: Path, status: int
) -> None:
    """The first eviction is carried out but its answer is an error (a proxy's 5xx after
    the write): the victim's first member is gone. The scheduler must finish evicting
    that gang (the eviction is idempotent under its uid precondition) rather than spare
    it and evict another gang too."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for name in ("n1", "n2"):
                api.put_node(node_obj(name, gpus=8))
            for pod in gang("lowa", 1, node="n1"):
                api.put_pod(pod)
            for pod in gang("lowb", 1, node="n2"):
                api.put_pod(pod)
            # Room for one more 8-GPU gang only once one low gang is gone.
            api.fail_requests("create", "pods", "eviction", 1, status, committed=True)
            async with running(api, tmp_path):
                for pod in gang("high", 10):
                    api.put_pod(pod)
                await eventually(lambda: len(bound(api, "high-")) == 2, "high bound")
                await asyncio.sleep(0.5)
            left = set(bound(api, "low"))
            # Exactly one low gang evicted, whole; the other untouched.
            assert left in ({"lowa-0", "lowa-1"}, {"lowb-0", "lowb-1"}), left

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
