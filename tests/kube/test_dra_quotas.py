"""An ElasticQuota limiting DRA devices end to end: `run_scheduler` against the API
emulator through the real client. A quota of at most 4 devices of DeviceClass `gpu`
(`gpu.deviceclass.resource.k8s.io/devices`, the name ResourceQuota counts them under):
a gang of 2 members with 2 devices each binds; a further gang of 2 members with 1
device each waits whole, its members told which resource is exceeded, and the usage
is written to the quota's status.used (docs/quotas.md, "DRA devices")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.cache.test_quota import quota_obj
from tests.dra_objects import device_class_obj, slice_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_quotas import scheduled_message, used
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import (
    DEVICE_CLASSES,
    ELASTIC_QUOTAS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeApiEmulator,
)
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio
DEVICES = "gpu.deviceclass.resource.k8s.io/devices"


def claim(name: str, count: int) -> dict[str, Any]:
    """A claim of `count` devices of class gpu, as the API server stores it after its
    create (spec defaulted)."""
    exactly = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": count}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def member(name: str, gang: str) -> dict[str, Any]:
    pod = pod_obj(name, namespace="team", gang=gang, min_member=2)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    return pod


async def test_a_gang_over_the_device_quota_waits_with_the_resource_named(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0"))
            api.put(DEVICE_CLASSES, device_class_obj("gpu"))
            api.put(RESOURCE_SLICES, slice_obj("n0", gpus=8))
            api.put(ELASTIC_QUOTAS, quota_obj("team", {DEVICES: 4}))
            for i in range(2):
                api.put(RESOURCE_CLAIMS, claim(f"a-{i}", 2))
                api.put_pod(member(f"a-{i}", "a"))
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "a-")) == 2, "gang a bound")
                await eventually(lambda: used(api).get(DEVICES) == "4", "usage written")
                for i in range(2):
                    api.put(RESOURCE_CLAIMS, claim(f"b-{i}", 1))
                    api.put_pod(member(f"b-{i}", "b"))
                expected = f"gang team/b: quota team exceeds max {DEVICES}: 4 used + 2 asked > 4"
                for i in range(2):
                    await eventually(
                        lambda i=i: scheduled_message(api.get_pod("team", f"b-{i}")) == expected,
                        f"b-{i} told the quota's numbers",
                    )
                assert not bound(api, "b-")
            for i in range(2):
                stored = api.get(RESOURCE_CLAIMS, "team", f"b-{i}") or {}
                assert not stored.get("status", {}).get("allocation"), "b's claims unallocated"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
