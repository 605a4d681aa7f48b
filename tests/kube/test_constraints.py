"""Pod constraints end to end through the API emulator: a DRA pod whose claim is not
made yet is told why and never bound, host port conflicts read as kube-scheduler's
FailedScheduling, and a pod the API already placed is never bound again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.factories import node_obj, pod_obj
from tests.kube.test_events import condition, events
from tests.kube.test_runner import TEST_TIMEOUT, bound, running, unschedulable_message
from tests.kubeapi import KubeApiEmulator
from tests.waiting import cycles_pass, eventually

PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"


def with_host_port(obj: dict[str, Any], number: int) -> dict[str, Any]:
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": number}]
    return obj


@pytest.mark.asyncio
async def test_a_pod_whose_dra_claim_is_not_made_yet_waits_and_is_never_bound(
    tmp_path: Path,
) -> None:
    """A pod's DRA claims are allocated by this scheduler now (docs/dra.md); one made
    from a template waits, saying so, until the claim exists, and is never bound
    meanwhile."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            claimed = pod_obj("claimed", gpus=1)
            claimed["spec"]["resourceClaims"] = [
                {"name": "gpu", "resourceClaimTemplateName": "a100"}
            ]
            claimed["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
            api.put_pod(claimed)
            api.put_pod(pod_obj("plain", gpus=1))
            waiting = "waiting for the ResourceClaim of template a100 to be created"
            async with running(api, tmp_path) as port:
                await eventually(lambda: "plain" in bound(api), "the plain pod bound")

                def told() -> bool:
                    pod = api.get_pod("default", "claimed") or {}
                    return waiting in unschedulable_message(pod)

                await eventually(told, "the condition says what the pod waits for")
                await cycles_pass(port)  # cycles that saw it waiting: still never bound
            state = condition(api, "claimed")
            assert state is not None
            assert (state["status"], state["reason"]) == ("False", "Unschedulable")
            assert "claimed" not in bound(api)
            assert not events(api, "InvalidPodSpec")
            assert api.request_count("create", "pods", "binding") == 1

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_host_port_conflicts_read_as_kube_schedulers_failed_scheduling(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(2):
                api.put_node(node_obj(f"n{i}"))
            for i in range(3):
                api.put_pod(with_host_port(pod_obj(f"g-{i}", gang="g", min_member=3), 8080))
            async with running(api, tmp_path):

                def said_so() -> bool:
                    return any(
                        PORTS_REASON in e["message"] for e in events(api, "FailedScheduling")
                    )

                await eventually(said_so, "FailedScheduling naming the ports")
                assert bound(api) == {}
                api.put_node(node_obj("n2"))
                await eventually(lambda: len(bound(api)) == 3, "the gang bound on three nodes")
            nodes = {p["spec"]["nodeName"] for p in bound(api).values()}
            assert nodes == {"n0", "n1", "n2"}
            [event] = [e for e in events(api, "FailedScheduling") if PORTS_REASON in e["message"]]
            assert f"0/2 nodes are available: 2 {PORTS_REASON}." in event["message"]
            assert "gang default/g: 2/3 members placeable" in event["message"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_pod_of_ours_with_a_node_name_is_counted_and_never_bound(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", cpu="8"))
            api.put_node(node_obj("n1", cpu="8"))
            # Ours by name, but placed by the user: it holds n0's cpu and port.
            api.put_pod(with_host_port(pod_obj("pinned", cpu="6", node_name="n0"), 8080))
            api.put_pod(with_host_port(pod_obj("next", cpu="1"), 8080))
            async with running(api, tmp_path) as port:
                await eventually(lambda: "next" in bound(api), "the other pod bound")
                # Cycles after the bind: the pinned pod is neither bound nor told anything
                # (the writes they queued are drained when the scheduler stops).
                await cycles_pass(port)
            assert bound(api)["next"]["spec"]["nodeName"] == "n1"
            assert api.request_count("create", "pods", "binding") == 1
            assert condition(api, "pinned") is None

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
