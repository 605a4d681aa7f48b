"""Preemption against a flaky network and a hostile tenant (docs/security.md): an
eviction whose answer is lost must not widen the disruption to a second victim gang,
and a tenant's PodDisruptionBudgets must not make borrowed GPUs its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.factories import node_obj
from tests.kube.test_preemption import gang, team_b_borrows_from_a
from tests.kube.test_runner import TEST_TIMEOUT, bound, fast_config, running_with
from tests.kubeapi import KubeApiEmulator
from tests.kubeapi.resources import POD_DISRUPTION_BUDGETS
from tests.signed import with_key
from tests.waiting import cycles_pass, eventually, free_port, metric_reaches


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [500, 503, 504])
async def test_an_eviction_whose_answer_is_lost_evicts_one_victim_gang_not_two(
    tmp_path: Path, status: int
) -> None:
    """The first eviction is carried out but its answer is an error (a proxy's 5xx after
    the write): the victim's first member is gone. The scheduler must finish evicting
    that gang (the eviction is idempotent under its uid precondition) rather than spare
    it and evict another gang too."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for name in ("n1", "n2"):
                api.put_node(node_obj(name, gpus=8))
            for pod in gang("lowa", 1, node="n1"):
                api.put_pod(pod)
            for pod in gang("lowb", 1, node="n2"):
                api.put_pod(pod)
            # Room for one more 8-GPU gang only once one low gang is gone.
            api.fail_requests("create", "pods", "eviction", 1, status, committed=True)
            port = free_port()
            async with running_with(api, tmp_path, with_key(fast_config(port), tmp_path)):
                for pod in gang("high", 10):
                    api.put_pod(pod)
                await eventually(lambda: len(bound(api, "high-")) == 2, "high bound")
                await cycles_pass(port)  # cycles after: no second gang evicted
            left = set(bound(api, "low"))
            # Exactly one low gang evicted, whole; the other untouched.
            assert left in ({"lowa-0", "lowa-1"}, {"lowb-0", "lowb-1"}), left

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_tenants_budget_does_not_turn_borrowed_gpus_into_its_own(tmp_path: Path) -> None:
    """Team b borrows team a's idle guarantee and puts a PodDisruptionBudget on each
    of its gangs (an `edit` Role may create them). Reclaim must still take it back:
    otherwise a budget would make any loan permanent and a's min meaningless. The
    eviction is tried first; a budget's refusal is followed by a delete (as
    kube-scheduler's own preemption treats budgets: best effort)."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            team_b_borrows_from_a(api)
            for name in ("own", "borrow"):  # every gang of b under a budget
                api.put(POD_DISRUPTION_BUDGETS, budget("b", name))
            async with running_with(api, tmp_path, with_key(fast_config(free_port()), tmp_path)):
                for pod in gang("job", 1, namespace="a"):
                    api.put_pod(pod)
                await eventually(lambda: len(bound(api, "job-")) == 2, "a's gang bound")
            # One of b's gangs is taken back whole, the other kept (b keeps its min).
            left = set(bound(api, "own-")) | set(bound(api, "borrow-"))
            assert left in ({"own-0", "own-1"}, {"borrow-0", "borrow-1"}), left
            assert api.request_count("create", "pods", "eviction") >= 1  # tried first

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_budget_still_holds_against_priority_preemption(tmp_path: Path) -> None:
    """Priority alone does not override a budget: only a guarantee does."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            for pod in gang("low", 1, node="n"):
                api.put_pod(pod)
            api.put(POD_DISRUPTION_BUDGETS, budget("default", "low"))
            port = free_port()
            async with running_with(api, tmp_path, with_key(fast_config(port), tmp_path)):
                for pod in gang("high", 10):
                    api.put_pod(pod)
                await eventually(
                    lambda: api.request_count("create", "pods", "eviction") >= 1, "eviction"
                )
                # The refusal is taken (the decision dropped), and cycles after it ran.
                refusals = 'gang_scheduler_preemptions_total{result="refused"}'
                await metric_reaches(port, refusals, 1, "the refusal counted")
                await cycles_pass(port)
                assert len(bound(api, "low-")) == 2
                assert not bound(api, "high-")
            assert api.request_count("delete", "pods") == 0

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def budget(namespace: str, gang_name: str) -> dict[str, object]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": gang_name, "namespace": namespace},
        "spec": {
            "minAvailable": 2,
            "selector": {"matchLabels": {"scheduling.x-k8s.io/pod-group": gang_name}},
        },
    }
