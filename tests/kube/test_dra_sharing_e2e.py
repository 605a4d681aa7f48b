"""Consumable capacity and partitions end to end: `run_scheduler` against the API
emulator (which validates claim status as Kubernetes 1.36 does), a gang whose members
each ask a share of one device, and a gang of two asking "a whole GPU, or else half of
one" of one partitioned GPU (kubernetes#138765). The claims' status as written: every
share with its own shareID and consumedCapacity, never more than the device has; the
partitions never beyond their counter set."""

from __future__ import annotations

import asyncio
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from cache.quantity import parse_quantity
from tests.dra_objects import GPU_CLASS, device_class_obj, slice_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES, KubeApiEmulator
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio
GI = 2**30


def claim(name: str, exactly: dict[str, Any] | None = None, **request: Any) -> dict[str, Any]:
    """A claim as the API server stores it after its create (spec defaulted)."""
    body = {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 1}
    body.update(exactly or {})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", **request, "exactly": body}]}},
    }


def member(name: str, gang: str, size: int) -> dict[str, Any]:
    pod = pod_obj(name, gang=gang, min_member=size)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    return pod


def results(api: KubeApiEmulator) -> list[dict[str, Any]]:
    return [
        r
        for c in api.objects(RESOURCE_CLAIMS)
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results", []
        )
    ]


async def test_a_gang_sharing_one_device_binds_with_a_share_each(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0"))
            api.put(DEVICE_CLASSES, device_class_obj())
            shared = slice_obj("n0", gpus=1)
            device = shared["spec"]["devices"][0]
            device["allowMultipleAllocations"] = True
            device["capacity"] = {
                "memory": {
                    "value": "40Gi",
                    "requestPolicy": {
                        "default": "8Gi",
                        "validRange": {"min": "8Gi", "max": "40Gi", "step": "8Gi"},
                    },
                }
            }
            api.put(RESOURCE_SLICES, shared)
            asks = {"share-0": "8Gi", "share-1": "9Gi", "share-2": "16Gi"}
            for name, amount in asks.items():
                api.put(
                    RESOURCE_CLAIMS, claim(name, {"capacity": {"requests": {"memory": amount}}})
                )
                api.put_pod(member(name, "share", len(asks)))
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "share-")) == 3, "the gang bound")
            written = results(api)
            assert {r["device"] for r in written} == {"gpu-0"}
            ids = [r["shareID"] for r in written]
            assert len(set(ids)) == 3 and all(str(uuid.UUID(i)) == i for i in ids)
            consumed = sorted(parse_quantity(r["consumedCapacity"]["memory"]) for r in written)
            # 9Gi rounds up to a step: 16Gi. Together 40Gi, the whole device.
            assert consumed == [8 * GI, 16 * GI, 16 * GI]
            assert sum(consumed, Fraction(0)) <= 40 * GI

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_kubernetes_138765_binds_on_one_partitioned_gpu(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0"))
            api.put(DEVICE_CLASSES, device_class_obj())
            counters = slice_obj("n0", gpus=0)
            counters["metadata"]["name"] = "n0-counters"
            del counters["spec"]["devices"]
            counters["spec"]["pool"]["resourceSliceCount"] = 2
            counters["spec"]["sharedCounters"] = [
                {"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}
            ]
            parts = slice_obj("n0", gpus=0)
            parts["spec"]["pool"]["resourceSliceCount"] = 2
            parts["spec"]["devices"] = [
                {
                    "name": name,
                    "attributes": {"kind": {"string": name.split("-")[0]}},
                    "consumesCounters": [
                        {"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}
                    ],
                }
                for name, size in (("whole", "80Gi"), ("half-0", "40Gi"), ("half-1", "40Gi"))
            ]
            api.put(RESOURCE_SLICES, counters)
            api.put(RESOURCE_SLICES, parts)
            kind = 'device.attributes["gpu.example.com"].kind'
            flexible = [
                {
                    "name": part,
                    "deviceClassName": GPU_CLASS,
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "selectors": [{"cel": {"expression": f'{kind} == "{part}"'}}],
                }
                for part in ("whole", "half")
            ]
            for name in ("flex-0", "flex-1"):
                body = claim(name)
                body["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": flexible}]
                api.put(RESOURCE_CLAIMS, body)
                api.put_pod(member(name, "flex", 2))
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "flex-")) == 2, "the gang bound")
            assert sorted(r["device"] for r in results(api)) == ["half-0", "half-1"]
            assert {r["request"] for r in results(api)} == {"gpu/half"}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
