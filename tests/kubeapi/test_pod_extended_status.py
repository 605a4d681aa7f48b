"""The emulator's check of a pod's `status.extendedResourceClaimStatus` (Kubernetes
1.36.2 validatePodExtendedResourceClaimStatus), through the real kubernetes_asyncio
client over HTTP: what a scheduler writes is accepted; each refusal with its 422."""

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

pytestmark = pytest.mark.asyncio
GPU = "nvidia.com/gpu"


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator() as emulator:
        yield emulator


@pytest_asyncio.fixture
async def core(api: KubeApiEmulator) -> AsyncIterator[client.CoreV1Api]:
    async with await api_client(api.base_url) as http:
        yield client.CoreV1Api(http)


def mapping(
    container: str = "main", resource: str = GPU, request: str = "container-0-request-2"
) -> dict[str, str]:
    return {"containerName": container, "resourceName": resource, "requestName": request}


async def patch(core: client.CoreV1Api, status: dict[str, Any]) -> Any:
    return await core.patch_namespaced_pod_status(
        "p", "default", {"status": {"extendedResourceClaimStatus": status}}
    )


async def refused(core: client.CoreV1Api, status: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as error:
        await patch(core, status)
    assert error.value.status == 422
    message = json.loads(error.value.body)["message"]
    assert isinstance(message, str)
    return message


async def test_what_a_scheduler_writes_is_accepted(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p", gpus=2))
    await patch(core, {"requestMappings": [mapping()], "resourceClaimName": "p-extended-x"})
    stored = api.get_pod("default", "p")
    assert stored is not None
    assert stored["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == "p-extended-x"


async def test_each_refusal_of_the_real_server(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p", gpus=2))
    message = await refused(core, {"requestMappings": [], "resourceClaimName": "c"})
    assert "status.extendedResourceClaimStatus.requestMappings: Required value" in message
    message = await refused(
        core, {"requestMappings": [mapping(container="other")], "resourceClaimName": "c"}
    )
    assert "requestMappings[0].containerName: Invalid value" in message
    message = await refused(
        core, {"requestMappings": [mapping(resource="example.com/x")], "resourceClaimName": "c"}
    )
    assert "requestMappings[0].resourceName: Invalid value" in message
    message = await refused(
        core, {"requestMappings": [mapping(request="Not_A_Label")], "resourceClaimName": "c"}
    )
    assert "status.extendedResourceClaimStatus.requestName: Invalid value" in message
    message = await refused(
        core, {"requestMappings": [mapping(), mapping()], "resourceClaimName": "c"}
    )
    assert "requestMappings[1].requestName: Duplicate value" in message
    message = await refused(core, {"requestMappings": [mapping()]})
    assert "status.extendedResourceClaimStatus.resourceClaimName: Required value" in message
    message = await refused(core, {"requestMappings": [mapping()], "resourceClaimName": "Bad_Name"})
    assert "resourceClaimName: Invalid value" in message
    stored = api.get_pod("default", "p")
    assert stored is not None and "extendedResourceClaimStatus" not in stored.get("status", {})
