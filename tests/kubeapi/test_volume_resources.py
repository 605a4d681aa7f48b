"""The emulator's storage resources, driven by the real kubernetes_asyncio client: claims
and PVs (core/v1), StorageClasses (storage.k8s.io/v1), with the checks the API makes on
a claim update."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.kubeapi import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    KubeApiEmulator,
    api_client,
)
from tests.volume_objects import pv_obj, pvc_obj, storage_class_obj

pytestmark = pytest.mark.asyncio
SELECTED = "volume.kubernetes.io/selected-node"


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator() as emulator:
        yield emulator


@pytest_asyncio.fixture
async def http(api: KubeApiEmulator) -> AsyncIterator[client.ApiClient]:
    async with await api_client(api.base_url) as api_http:
        yield api_http


def new_claim(name: str) -> dict[str, object]:
    body = pvc_obj(name, namespace="ml")
    del body["metadata"]["resourceVersion"]  # type: ignore[attr-defined]
    del body["status"]
    return body


async def test_claims_are_created_listed_and_patched_with_a_resource_version_precondition(
    http: client.ApiClient, api: KubeApiEmulator
) -> None:
    core = client.CoreV1Api(http)
    created = await core.create_namespaced_persistent_volume_claim("ml", new_claim("data"))
    assert created.metadata.uid and created.spec.storage_class_name == "local"
    listed = await core.list_persistent_volume_claim_for_all_namespaces()
    assert [c.metadata.name for c in listed.items] == ["data"]
    version = created.metadata.resource_version
    patch = {"metadata": {"resourceVersion": version, "annotations": {SELECTED: "n1"}}}
    patched = await core.patch_namespaced_persistent_volume_claim("data", "ml", patch)
    assert patched.metadata.annotations[SELECTED] == "n1"
    # The same precondition again is stale now: 409, the annotation unchanged.
    stale = {"metadata": {"resourceVersion": version, "annotations": {SELECTED: "n2"}}}
    with pytest.raises(ApiException) as conflict:
        await core.patch_namespaced_persistent_volume_claim("data", "ml", stale)
    assert conflict.value.status == 409
    stored = api.get(PERSISTENT_VOLUME_CLAIMS, "ml", "data")
    assert stored is not None and stored["metadata"]["annotations"][SELECTED] == "n1"


async def test_a_claims_spec_is_immutable_but_for_its_request_and_a_first_volume_name(
    http: client.ApiClient,
) -> None:
    core = client.CoreV1Api(http)
    await core.create_namespaced_persistent_volume_claim("ml", new_claim("data"))
    with pytest.raises(ApiException) as refused:
        await core.patch_namespaced_persistent_volume_claim(
            "data", "ml", {"spec": {"storageClassName": "other"}}
        )
    assert refused.value.status == 422
    assert "spec is immutable after creation" in json.loads(refused.value.body)["message"]
    bound = await core.patch_namespaced_persistent_volume_claim(
        "data", "ml", {"spec": {"volumeName": "pv-1"}}
    )
    assert bound.spec.volume_name == "pv-1"
    with pytest.raises(ApiException) as rebind:
        await core.patch_namespaced_persistent_volume_claim(
            "data", "ml", {"spec": {"volumeName": "pv-2"}}
        )
    assert rebind.value.status == 422
    grown = await core.patch_namespaced_persistent_volume_claim(
        "data", "ml", {"spec": {"resources": {"requests": {"storage": "20Gi"}}}}
    )
    assert grown.spec.resources.requests["storage"] == "20Gi"
    # A claim's status is not written through the main resource.
    kept = await core.patch_namespaced_persistent_volume_claim(
        "data", "ml", {"status": {"phase": "Lost"}}
    )
    assert kept.status is None or kept.status.phase != "Lost"


async def test_volumes_and_storage_classes_are_cluster_scoped(
    http: client.ApiClient, api: KubeApiEmulator
) -> None:
    api.put(PERSISTENT_VOLUMES, pv_obj("disk", zone="a"))
    api.put(STORAGE_CLASSES, storage_class_obj("zonal", provisioner="pd.csi", zones=["a"]))
    core = client.CoreV1Api(http)
    volumes = await core.list_persistent_volume()
    assert [v.metadata.name for v in volumes.items] == ["disk"]
    ref = {"spec": {"claimRef": {"namespace": "ml", "name": "data", "uid": "u1"}}}
    patched = await core.patch_persistent_volume("disk", ref)
    assert patched.spec.claim_ref.name == "data"
    classes = await client.StorageV1Api(http).list_storage_class()
    [zonal] = classes.items
    assert zonal.volume_binding_mode == "WaitForFirstConsumer"
    assert zonal.allowed_topologies[0].match_label_expressions[0].values == ["a"]
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{api.base_url}/api/v1/namespaces/ml/persistentvolumes") as answer,
    ):
        assert answer.status == 404  # a cluster-scoped kind has no namespaced path
