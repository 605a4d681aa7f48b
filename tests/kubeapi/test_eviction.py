"""pods/eviction and PodDisruptionBudgets in the emulator, through the real client, as
pkg/registry/core/pod/storage/eviction.go answers (tests/kubeapi/eviction.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.factories import pod_obj
from tests.kubeapi import KubeApiEmulator, api_client
from tests.kubeapi.resources import POD_DISRUPTION_BUDGETS

LABELS = {"app": "train"}


@pytest_asyncio.fixture
async def core() -> AsyncIterator[tuple[KubeApiEmulator, client.CoreV1Api]]:
    async with KubeApiEmulator() as api, await api_client(api.base_url) as http:
        yield api, client.CoreV1Api(http)


def running_pod(name: str, phase: str = "Running") -> dict[str, Any]:
    pod = pod_obj(name, node_name="n", phase=phase)
    pod["metadata"]["labels"] = dict(LABELS)
    return pod


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default", "generation": 1},
        "spec": {"selector": {"matchLabels": LABELS}, **spec},
    }


def eviction(name: str) -> client.V1Eviction:
    return client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="default"))


async def evict(core: client.CoreV1Api, name: str, body: Any = None) -> None:
    await core.create_namespaced_pod_eviction(name, "default", body or eviction(name))


@pytest.mark.asyncio
async def test_a_budget_with_room_takes_one_disruption_and_the_pod_goes(
    core: tuple[KubeApiEmulator, client.CoreV1Api],
) -> None:
    api, v1 = core
    for i in range(3):
        api.put_pod(running_pod(f"p-{i}"))
    api.put(POD_DISRUPTION_BUDGETS, budget("b", maxUnavailable=1))
    await evict(v1, "p-0")
    assert api.get_pod("default", "p-0") is None
    status = (api.get(POD_DISRUPTION_BUDGETS, "default", "b") or {})["status"]
    assert status["disruptionsAllowed"] == 0 and "p-0" in status["disruptedPods"]
    assert (status["expectedPods"], status["currentHealthy"], status["desiredHealthy"]) == (
        3,
        3,
        2,
    )


@pytest.mark.asyncio
async def test_a_budget_without_room_answers_429_with_its_cause_and_keeps_the_pod(
    core: tuple[KubeApiEmulator, client.CoreV1Api],
) -> None:
    api, v1 = core
    for i in range(2):
        api.put_pod(running_pod(f"p-{i}"))
    api.put(POD_DISRUPTION_BUDGETS, budget("b", minAvailable="100%"))
    with pytest.raises(ApiException) as raised:
        await evict(v1, "p-0")
    assert raised.value.status == 429
    body = json.loads(raised.value.body)
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget b needs 2 healthy pods and has 2 currently",
        }
    ]
    assert api.get_pod("default", "p-0") is not None


@pytest.mark.asyncio
async def test_pending_pods_skip_budgets_and_two_budgets_are_a_500(
    core: tuple[KubeApiEmulator, client.CoreV1Api],
) -> None:
    api, v1 = core
    api.put_pod(running_pod("waiting", phase="Pending"))
    api.put_pod(running_pod("busy"))
    api.put(POD_DISRUPTION_BUDGETS, budget("b", minAvailable=5))
    await evict(v1, "waiting")  # a Pending pod never counted as available
    assert api.get_pod("default", "waiting") is None
    api.put(POD_DISRUPTION_BUDGETS, budget("c", minAvailable=0))
    with pytest.raises(ApiException) as raised:
        await evict(v1, "busy")
    assert raised.value.status == 500
    assert "more than one PodDisruptionBudget" in json.loads(raised.value.body)["message"]


@pytest.mark.asyncio
async def test_a_mismatched_name_is_400_and_a_missing_pod_404(
    core: tuple[KubeApiEmulator, client.CoreV1Api],
) -> None:
    api, v1 = core
    api.put_pod(running_pod("p"))
    with pytest.raises(ApiException) as raised:
        await evict(v1, "p", eviction("other"))
    assert raised.value.status == 400
    with pytest.raises(ApiException) as missing:
        await evict(v1, "gone")
    assert missing.value.status == 404
    assert api.get_pod("default", "p") is not None
