"""Volumes end to end: the scheduler (informers for claims, PVs and StorageClasses, the
planner, PreBind, the binder) against the API emulator over real HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cache.volumes import SELECTED_NODE_ANNOTATION
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import bound, fast_config, running_with, unschedulable_message
from tests.kubeapi import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    KubeApiEmulator,
)
from tests.volume_objects import (
    HOSTNAME,
    ZONE,
    csinode_obj,
    pv_obj,
    pvc_obj,
    storage_class_obj,
    with_claims,
)
from tests.waiting import HANG, eventually, free_port

TEST_TIMEOUT = 4 * HANG  # turns a hang into a failure, whatever the speed


@asynccontextmanager
async def running(api: KubeApiEmulator, tmp_path: Path) -> AsyncIterator[None]:
    """The scheduler against `api`, with a short feedback window so that a pod's
    PodScheduled message follows each new reason."""
    config = fast_config(free_port())
    config = dataclasses.replace(
        config, events=dataclasses.replace(config.events, aggregation_window_seconds=0.2)
    )
    async with running_with(api, tmp_path, config):
        yield


def nodes(api: KubeApiEmulator, count: int = 4) -> None:
    for i in range(count):
        zone = "a" if i < count // 2 else "b"
        api.put_node(node_obj(f"n{i}", gpus=1, labels={ZONE: zone, HOSTNAME: f"n{i}"}))


def claim(api: KubeApiEmulator, name: str) -> dict[str, Any]:
    found = api.get(PERSISTENT_VOLUME_CLAIMS, "default", name)
    assert found is not None
    return found


def selected(api: KubeApiEmulator, name: str) -> str | None:
    annotations = claim(api, name)["metadata"].get("annotations") or {}
    value = annotations.get(SELECTED_NODE_ANNOTATION)
    return str(value) if value is not None else None


@pytest.mark.asyncio
async def test_a_pod_whose_claim_is_missing_waits_then_binds_when_it_appears(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(
                STORAGE_CLASSES, storage_class_obj("fast", provisioner="pd.csi", mode="Immediate")
            )
            api.put_pod(with_claims(pod_obj("job", gpus=1), "data"))
            async with running(api, tmp_path):
                await eventually(
                    lambda: (
                        'persistentvolumeclaim "data" not found'
                        in unschedulable_message(api.get_pod("default", "job") or {})
                    ),
                    "the pod says why it waits",
                )
                assert bound(api) == {}
                # A changed reason inside the 0.2 s feedback window is held back, then
                # written when the window ends (the loop's tick): the wait below sees it.
                # The claim appears, unbound in an Immediate class: still waiting.
                api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj("data", storage_class="fast"))
                await eventually(
                    lambda: (
                        "pod has unbound immediate PersistentVolumeClaims"
                        in unschedulable_message(api.get_pod("default", "job") or {})
                    ),
                    "the Immediate claim is not bound yet",
                )
                assert bound(api) == {}
                # The PV controller binds it to a zonal disk in zone b.
                api.put(PERSISTENT_VOLUMES, pv_obj("disk", storage_class="fast", zone="b"))
                api.put(
                    PERSISTENT_VOLUME_CLAIMS,
                    pvc_obj("data", storage_class="fast", volume_name="disk"),
                )
                await eventually(lambda: "job" in bound(api), "bound once the claim is")
                assert bound(api)["job"]["spec"]["nodeName"] in ("n2", "n3")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_bound_claims_pv_node_affinity_restricts_the_nodes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(PERSISTENT_VOLUMES, pv_obj("local-n3", node="n3", claim=("default", "data")))
            api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj("data", volume_name="local-n3"))
            api.put_pod(with_claims(pod_obj("job", gpus=1), "data"))
            # The only node its volume reaches is full: it waits, with the reason.
            api.put_pod(pod_obj("hog", gpus=1, node_name="n3", phase="Running"))
            async with running(api, tmp_path):
                await eventually(
                    lambda: (
                        "3 node(s) had volume node affinity conflict"
                        in unschedulable_message(api.get_pod("default", "job") or {})
                    ),
                    "the affinity conflict is reported",
                )
                assert bound(api, "job") == {}
                api.delete_pod("default", "hog")
                await eventually(lambda: "job" in bound(api), "bound where its volume is")
                assert bound(api)["job"]["spec"]["nodeName"] == "n3"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_wait_for_first_consumer_gang_gets_selected_node_on_every_claim_before_any_bind(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(
                STORAGE_CLASSES,
                storage_class_obj("zonal", provisioner="pd.csi.storage.gke.io", zones=["b"]),
            )
            for i in range(4):
                api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj(f"data-{i}", storage_class="zonal"))
            api.reset_request_counts()
            for i in range(4):
                api.put_pod(
                    with_claims(pod_obj(f"w-{i}", gang="w", min_member=4, cpu="20"), f"data-{i}")
                )
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "w-")) == 4, "the gang is bound")
            writes = [
                (r.verb, r.resource, r.subresource)
                for r in api.request_log
                if r.verb in ("patch", "create")
                and r.resource in ("persistentvolumeclaims", "pods")
                and r.subresource in ("", "binding")
            ]
            claim_patches = [w for w in writes if w[1] == "persistentvolumeclaims"]
            binds = [i for i, w in enumerate(writes) if w == ("create", "pods", "binding")]
            assert len(claim_patches) == 4 and len(binds) == 4
            assert max(i for i, w in enumerate(writes) if w in claim_patches) < min(binds)
            # Each claim names the node its pod was bound to, inside the allowed zone.
            for i in range(4):
                node = bound(api, "w-")[f"w-{i}"]["spec"]["nodeName"]
                assert selected(api, f"data-{i}") == node
                assert node in ("n2", "n3")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_gang_that_breaks_mid_bind_has_its_selected_node_annotations_removed(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(STORAGE_CLASSES, storage_class_obj("any", provisioner="ebs.csi.aws.com"))
            for i in range(2):
                api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj(f"data-{i}", storage_class="any"))
            # The second bind is refused: the gang breaks after its claims were written.
            api.fail_next_binds(1, status=409, after=1)
            for i in range(2):
                api.put_pod(with_claims(pod_obj(f"b-{i}", gang="b", min_member=2), f"data-{i}"))
            async with running(api, tmp_path):
                await eventually(
                    lambda: api.request_count("patch", "persistentvolumeclaims") >= 4,
                    "annotations written, then taken back",
                )
                await eventually(
                    lambda: all(selected(api, f"data-{i}") is None for i in range(2)),
                    "no claim keeps a node of the broken gang",
                )
                # The deleted member is recreated (as its controller would): the gang is
                # retried and bound, with its claims written again.
                await eventually(lambda: len(api.pods()) == 1, "the bound member deleted")
                for i in range(2):
                    if api.get_pod("default", f"b-{i}") is None:
                        api.put_pod(
                            with_claims(pod_obj(f"b-{i}", gang="b", min_member=2), f"data-{i}")
                        )
                await eventually(lambda: len(bound(api, "b-")) == 2, "bound on the retry")
                for i in range(2):
                    pod = bound(api, "b-")[f"b-{i}"]
                    assert selected(api, f"data-{i}") == pod["spec"]["nodeName"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_static_local_pv_is_bound_to_its_claim_before_the_pod(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(STORAGE_CLASSES, storage_class_obj("local"))
            api.put(PERSISTENT_VOLUMES, pv_obj("local-n1", node="n1"))
            api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj("data"))
            api.put_pod(with_claims(pod_obj("db"), "data"))
            async with running(api, tmp_path):
                await eventually(lambda: "db" in bound(api), "bound")
            assert bound(api)["db"]["spec"]["nodeName"] == "n1"
            volume = api.get(PERSISTENT_VOLUMES, "", "local-n1")
            assert volume is not None
            ref = volume["spec"]["claimRef"]
            assert (ref["namespace"], ref["name"], ref["uid"]) == (
                "default",
                "data",
                claim(api, "data")["metadata"]["uid"],
            )
            order = [
                r.resource
                for r in api.request_log
                if (r.verb, r.subresource) in (("patch", ""), ("create", "binding"))
            ]
            assert order == ["persistentvolumes", "pods"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_csi_attach_limits_from_csinodes_keep_a_full_node_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            driver = "ebs.csi.aws.com"
            api.put(STORAGE_CLASSES, storage_class_obj("gp3", provisioner=driver, mode="Immediate"))
            for i in range(4):
                api.put(CSI_NODES, csinode_obj(f"n{i}", {driver: 1}))
            # n0..n2 each have one EBS volume attached already (limit 1).
            for i in range(3):
                volume = pv_obj(f"old-{i}", storage_class="gp3")
                volume["spec"]["csi"] = {"driver": driver, "volumeHandle": f"vol-old-{i}"}
                api.put(PERSISTENT_VOLUMES, volume)
                api.put(
                    PERSISTENT_VOLUME_CLAIMS,
                    pvc_obj(f"old-{i}", storage_class="gp3", volume_name=f"old-{i}"),
                )
                running_pod = pod_obj(f"old-{i}", node_name=f"n{i}", phase="Running")
                api.put_pod(with_claims(running_pod, f"old-{i}"))
            new = pv_obj("new", storage_class="gp3")
            new["spec"]["csi"] = {"driver": driver, "volumeHandle": "vol-new"}
            api.put(PERSISTENT_VOLUMES, new)
            api.put(
                PERSISTENT_VOLUME_CLAIMS, pvc_obj("new", storage_class="gp3", volume_name="new")
            )
            api.put_pod(with_claims(pod_obj("job"), "new"))
            async with running(api, tmp_path):
                await eventually(lambda: "job" in bound(api), "bound")
            assert bound(api)["job"]["spec"]["nodeName"] == "n3"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
