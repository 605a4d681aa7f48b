"""The scheduler deletes and evicts only pods it bound itself (cache/ownership.py,
docs/security.md): a pod a tenant created with its own `spec.nodeName` while naming
this scheduler is never removed by it, whatever gang it claims to be part of."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cache.cluster import Placement
from cache.gpu import SIGNATURE_ANNOTATION
from cache.pod import PodInfo, pod_from_api
from scheduler.kube.binder import GangBinder, binding_body
from scheduler.kube.client import KubeClient
from scheduler.kube.preemption import evict_victims
from scheduler.sharing.preemption import Preemption, VictimGang
from tests.factories import make_pod, node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound
from tests.kube.test_runner_faults import run_past_the_grace
from tests.kubeapi import KubeApiEmulator
from tests.signed import TEST_KEY, signed


@pytest.mark.asyncio
async def test_a_partial_gang_loses_only_the_members_the_scheduler_bound(
    tmp_path: Path,
) -> None:
    """Found partial on taking over: one member bound by this scheduler before it
    restarted (signed), one pinned to its node by the tenant, one pinned with a
    signature copied from the first; the fourth cannot fit. Past the grace only the
    signed member is deleted."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(3):
                api.put_node(node_obj(f"n{i}", gpus=1))
            ours = signed(pod_obj("train-0", gang="train", min_member=4, gpus=1, node_name="n0"))
            api.put_pod(ours)
            api.put_pod(pod_obj("train-1", gang="train", min_member=4, gpus=1, node_name="n1"))
            copied = {SIGNATURE_ANNOTATION: ours["metadata"]["annotations"][SIGNATURE_ANNOTATION]}
            api.put_pod(
                pod_obj(
                    "train-2",
                    gang="train",
                    min_member=4,
                    gpus=1,
                    node_name="n2",
                    annotations=copied,
                )
            )
            api.put_pod(pod_obj("train-3", gang="train", min_member=4, gpus=1))
            await run_past_the_grace(
                api,
                tmp_path,
                lambda: api.get_pod("default", "train-0") is None,
                "the signed member deleted",
            )
            assert api.request_count("delete", "pods") == 1
            assert sorted(bound(api)) == ["train-1", "train-2"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_every_binding_is_signed_a_pod_without_gpus_too() -> None:
    pod = make_pod("cpu-only", cpu="2")
    body = binding_body(pod, Placement(pod.uid, "n0"), TEST_KEY)
    annotations = body["metadata"]["annotations"]  # type: ignore[index]
    assert set(annotations) == {SIGNATURE_ANNOTATION}
    bound_pod = signed(pod_obj("cpu-only", cpu="2", node_name="n0"))
    assert (
        annotations[SIGNATURE_ANNOTATION]
        == (bound_pod["metadata"]["annotations"][SIGNATURE_ANNOTATION])
    )


@pytest.mark.asyncio
async def test_the_binder_never_deletes_a_pod_it_did_not_sign(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    api.put_node(node_obj("n0", gpus=2))
    api.put_pod(signed(pod_obj("ours", gpus=1, node_name="n0")))
    api.put_pod(pod_obj("pinned", gpus=1, node_name="n0"))
    pods = [as_cached(api, "ours"), as_cached(api, "pinned")]
    undo = await GangBinder(client, signing_key=TEST_KEY).delete_members(pods)
    assert undo.deleted == ("default/ours",)
    assert undo.kept == ("default/pinned",)
    assert api.get_pod("default", "pinned") is not None
    assert api.request_count("delete", "pods") == 1


@pytest.mark.asyncio
async def test_an_eviction_of_a_pod_the_scheduler_did_not_bind_is_never_sent(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    api.put_node(node_obj("n0", gpus=2))
    api.put_pod(pod_obj("pinned", gpus=1, node_name="n0", phase="Running"))
    victim = VictimGang("default/pinned", 0, (make_pod("pinned", gpus=1, node_name="n0"),))
    decision = Preemption("default/high", 10, (victim,), (), "test")
    refusal = await evict_victims(client, decision, lambda pod: False)
    assert refusal is not None and "not bound by this scheduler" in refusal.reason
    assert api.request_count("create", "pods", "eviction") == 0
    assert api.get_pod("default", "pinned") is not None


def as_cached(api: KubeApiEmulator, name: str) -> PodInfo:
    """The pod as the scheduler's cache reads it from the API."""
    obj = api.get_pod("default", name)
    assert obj is not None
    return pod_from_api(obj)


@pytest.mark.asyncio
async def test_a_pod_read_back_bound_without_our_signature_is_not_taken_for_our_bind(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """A bind whose answer was lost is settled by reading the pod: found on the planned
    node, it counts as our bind (and would be deleted if its gang broke) only when it
    carries the signature our Binding wrote."""
    api.put_node(node_obj("n0", gpus=2))
    api.put_pod(pod_obj("theirs", gpus=1, node_name="n0"))
    api.put_pod(signed(pod_obj("ours", gpus=1, node_name="n0")))
    binder = GangBinder(client, signing_key=TEST_KEY, retry_jitter=0.01)
    theirs, ours = as_cached(api, "theirs"), as_cached(api, "ours")
    state, why = await binder.resolve(theirs, Placement(theirs.uid, "n0"))
    assert state == "failed" and "by someone else" in why
    assert await binder.resolve(ours, Placement(ours.uid, "n0")) == ("bound", "")
