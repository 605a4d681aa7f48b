"""ElasticQuota end to end against the API emulator, through the real client: the
quota is read by its informer, a gang over max is refused with the numbers, and the
namespace's usage is written to status.used (docs/quotas.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from cache.cluster import ClusterCache, EventType
from scheduler.kube.events import WriteQueue
from scheduler.kube.quota_status import QuotaStatusWriter
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import ELASTIC_QUOTAS, KubeApiEmulator
from tests.waiting import eventually


def used(api: KubeApiEmulator) -> dict[str, Any]:
    quota = api.get(ELASTIC_QUOTAS, "team", "quota") or {}
    return dict(quota.get("status", {}).get("used", {}))


def scheduled_message(pod: dict[str, Any] | None) -> str:
    for entry in (pod or {}).get("status", {}).get("conditions", []):
        if entry.get("type") == "PodScheduled":
            return str(entry.get("message", ""))
    return ""


@pytest.mark.asyncio
async def test_max_is_refused_with_its_numbers_and_usage_is_written_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(ELASTIC_QUOTAS, quota_obj("team", {"nvidia.com/gpu": 6}))
            for i in range(2):
                api.put_pod(pod_obj(f"a-{i}", namespace="team", gang="a", min_member=2, gpus=2))
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "a-")) == 2, "gang a bound")
                await eventually(lambda: used(api).get("nvidia.com/gpu") == "4", "usage")
                for i in range(2):
                    api.put_pod(pod_obj(f"b-{i}", namespace="team", gang="b", min_member=2, gpus=2))
                expected = (
                    "gang team/b: quota team exceeds max nvidia.com/gpu: 4 used + 4 asked > 6"
                )
                await eventually(
                    lambda: scheduled_message(api.get_pod("team", "b-0")) == expected,
                    "gang b refused with the quota's numbers",
                )
                assert not bound(api, "b-")
                # Gang a finishes: its usage goes, and b fits under max.
                for i in range(2):
                    api.delete_pod("team", f"a-{i}")
                await eventually(lambda: len(bound(api, "b-")) == 2, "gang b bound")
                await eventually(lambda: used(api).get("nvidia.com/gpu") == "4", "usage of b")
            # 4 GPUs, then 0, then 4 again within the write interval: one write.
            assert api.request_count("patch", "elasticquotas", "status") == 1

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_usage_is_written_when_it_changes_at_most_once_per_interval() -> None:
    cache = ClusterCache()
    cache.quotas.apply("ADDED", quota_obj("team", {"nvidia.com/gpu": 6}))
    queue = WriteQueue(cast(Any, None))  # never started: the writes stay queued
    writer = QuotaStatusWriter(queue, min_interval=10.0)
    writer.publish(cache.quotas, 0.0)
    assert writer.writes == 1  # the first usage (none) is written at once
    writer.publish(cache.quotas, 1.0)
    assert writer.writes == 1  # unchanged: nothing
    cache.apply_node(EventType.ADDED, node_obj("n", gpus=8))
    cache.apply_pod(EventType.ADDED, pod_obj("p", namespace="team", gpus=1, node_name="n"))
    writer.publish(cache.quotas, 5.0)
    assert writer.writes == 1  # changed, but within the interval: held back
    writer.publish(cache.quotas, 10.0)
    assert writer.writes == 2 and len(queue) == 1  # coalesced under the quota's key
    # Recreated under its name (a new uid): written at once.
    cache.quotas.apply("DELETED", quota_obj("team"))
    recreated = quota_obj("team", {"nvidia.com/gpu": 6})
    recreated["metadata"]["uid"] = "new"
    cache.quotas.apply("ADDED", recreated)
    writer.publish(cache.quotas, 11.0)
    assert writer.writes == 3
