"""metrics.namespaceLabels reaches the running scheduler's /metrics, end to end against
the API emulator: off, no series names a namespace; on, pending pods by namespace."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import aiohttp
import pytest

from scheduler.process.config import MetricsConfig
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, fast_config, running_with
from tests.kubeapi import KubeApiEmulator
from tests.waiting import eventually_async, free_port

pytestmark = pytest.mark.asyncio


async def scrape(port: int) -> str:
    """The scrape, or "" while the server is not listening yet."""
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return await response.text()
    except aiohttp.ClientConnectorError:
        return ""


@pytest.mark.parametrize("namespace_labels", [False, True])
async def test_namespace_series_follow_the_configuration(
    tmp_path: Path, namespace_labels: bool
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=1))
            for i in range(2):
                api.put_pod(pod_obj(f"w-{i}", namespace="team-a", gang="w", min_member=3))
            port = free_port()
            config = dataclasses.replace(
                fast_config(port), metrics=MetricsConfig(namespace_labels=namespace_labels)
            )
            async with running_with(api, tmp_path, config):
                want = 'gang_scheduler_pending_pods_by_reason{reason="incomplete_gang"} 2.0'
                scraped = [""]

                async def shown() -> bool:  # the gauges follow the informers
                    scraped[0] = await scrape(port)
                    return want in scraped[0]

                await eventually_async(shown, "the pending pods in the scrape")
                text = scraped[0]
                line = (
                    'gang_scheduler_namespace_pending_pods{namespace="team-a",'
                    'reason="incomplete_gang"} 2.0'
                )
                assert (line in text) is namespace_labels
                assert ("team-a" in text) is namespace_labels
                assert "\nprocess_resident_memory_bytes " in text

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
