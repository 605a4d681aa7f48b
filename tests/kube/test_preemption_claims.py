"""A gang whose member mounts a claim preempts, end to end against the API emulator:
the victim is the gang on the node its local volume is on, and once it is gone the
preemptor is bound there with that PV (docs/quotas.md, "Gangs with volume claims")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.factories import node_obj, pod_obj
from tests.kube.test_preemption import events
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    KubeApiEmulator,
)
from tests.volume_objects import pv_obj, pvc_obj, storage_class_obj, with_claims
from tests.waiting import eventually


@pytest.mark.asyncio
async def test_a_gang_with_a_local_volume_evicts_the_gang_on_its_node_and_gets_the_pv(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for name in ("n0", "n1"):
                api.put_node(node_obj(name, gpus=8, labels={"pool": name}))
            api.put(STORAGE_CLASSES, storage_class_obj("local"))
            api.put(PERSISTENT_VOLUMES, pv_obj("disk-n1", node="n1"))
            api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj("data"))
            async with running(api, tmp_path):
                # Bound by the scheduler first (only its own binds are evicted); low is
                # the cheaper victim, but on the node the volume cannot reach.
                for name, node, priority in [("low", "n0", 1), ("mid", "n1", 5)]:
                    api.put_pod(
                        pod_obj(
                            f"{name}-0",
                            gang=name,
                            min_member=1,
                            gpus=8,
                            priority=priority,
                            node_selector={"pool": node},
                        )
                    )
                await eventually(lambda: len(bound(api, "low-") | bound(api, "mid-")) == 2, "bound")
                high = pod_obj("high-0", gang="high", min_member=1, gpus=8, priority=10)
                api.put_pod(with_claims(high, "data"))
                await eventually(lambda: len(bound(api, "high-")) == 1, "high bound")
            assert len(bound(api, "low-")) == 1
            assert not bound(api, "mid-")
            assert set(events(api, "Preempted")) == {"mid-0"}
            pod = api.get_pod("default", "high-0") or {}
            assert pod["spec"]["nodeName"] == "n1"
            assert pod["status"].get("nominatedNodeName") == "n1"
            volume = api.get(PERSISTENT_VOLUMES, "", "disk-n1") or {}
            assert volume["spec"]["claimRef"]["name"] == "data"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
