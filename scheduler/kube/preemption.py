"""Carrying out a preemption decision against the API (scheduler/sharing/preemption.py).

Every member of each victim gang is evicted through the Eviction API
(`POST pods/{name}/eviction`, policy/v1), so PodDisruptionBudgets are respected; the
preemptor's pods get `status.nominatedNodeName`; victims get a Warning `Preempted`
event naming the preemptor and why, the preemptor a Normal `Preempting` event (or a
Warning `PreemptionRefused` saying why the decision was dropped).

A 429 (a budget refuses the disruption) means that gang cannot be a victim now: the
decision is dropped (the core releases the room it held and spares that gang a while)
and the preemptor retries later. A victim pod already gone (404) is as good as
evicted. Members of a gang are evicted in turn, so a budget that refuses a later
member leaves that gang partial: the partial-gang rule then deals with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from cache.pod import PodInfo
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.client import ApiError, KubeClient, transient, transient_not_refused
from scheduler.kube.events import MERGE, FeedbackRecorder, pod_ref
from scheduler.process.metrics import SchedulerMetrics
from scheduler.sharing.preemption import RECLAIM, Preemption, VictimGang

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Refusal:
    victim: str  # the gang whose eviction was refused
    reason: str
    refused: bool = True  # a budget's 429; False for any other error


def eviction_body(pod: PodInfo) -> dict[str, object]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        # Only this pod, as we saw it: a pod recreated under the name is not a victim.
        "deleteOptions": {"preconditions": {"uid": pod.uid}},
    }


def _why(decision: Preemption, victim: VictimGang) -> str:
    """The victim's `Preempted` message: by whom, and why (priority, or reclaim), and
    which of its ResourceClaims give their DRA devices to the preemptor."""
    if decision.reason == RECLAIM:
        why = (
            f"Preempted by gang {decision.preemptor} (reclaim): gang {victim.key} "
            f"(priority {victim.priority}) borrows beyond its quota's min and is evicted "
            f"whole so that {decision.preemptor}, within its own quota's min, fits"
        )
    else:
        why = (
            f"Preempted by gang {decision.preemptor} (priority {decision.priority}): "
            f"gang {victim.key} (priority {victim.priority}) is evicted whole so "
            f"that {decision.preemptor} fits"
        )
    claims = [key for key, owner in decision.released_claims if owner == victim.key]
    if claims:
        why += f"; the DRA devices of its claims {', '.join(claims)} go to {decision.preemptor}"
    return why


# An eviction whose answer is lost (no answer in time, the connection cut, a 5xx from
# the API server or a proxy after the write) may have been carried out. It is repeated
# under the call policy (call_policy.py), since a repeat is safe: the uid precondition
# keeps it to the pod we saw, a pod already terminating is evicted again with success
# (the API server's canIgnorePDB) and a pod gone answers 404. Given up on instead, the
# victim's first members would be gone while the next decision chose another gang: two
# gangs disrupted for one. A 429 is a PodDisruptionBudget's answer, never retried here.
async def _evict(client: KubeClient, pod: PodInfo) -> None:
    """POST the pod's eviction, repeated while its outcome is unknown; ApiError (or the
    transport's error) once it is known to have failed or the attempts ran out."""
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
    await client.call("POST", path, body=eviction_body(pod), retry_on=transient_not_refused)


async def _delete(client: KubeClient, pod: PodInfo) -> None:
    """Delete the pod we saw (uid precondition, so a repeat is safe), with its own
    grace period."""
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod.uid}}
    await client.call("DELETE", path, body=body, retry_on=transient)


async def evict_victims(
    client: KubeClient, decision: Preemption, bound_by_us: Callable[[PodInfo], bool]
) -> Refusal | None:
    """Evict every member of every victim gang; the first refusal stops it.

    Nothing is evicted when any victim pod was not bound by this scheduler
    (`bound_by_us`, the cache's word): the victim search picks only such gangs, and this
    is the last check before the API, so that no path evicts a pod a tenant pinned or
    another actor bound.

    A reclaim is not stopped by a PodDisruptionBudget: the victims hold capacity on
    loan from the reclaimer's guarantee, and a budget (which a tenant's `edit` Role may
    create) would otherwise make the loan permanent. The eviction is still tried first,
    so a budget that allows the disruption is honoured as usual; on its refusal the pod
    is deleted, as kube-scheduler's own preemption treats budgets (best effort).
    Priority preemption keeps to budgets."""
    for victim in decision.victims:
        for pod in victim.pods:
            if not bound_by_us(pod):
                why = f"pod {pod.key} was not bound by this scheduler: it is never evicted"
                return Refusal(victim.key, why, refused=False)
    for victim in decision.victims:
        for pod in victim.pods:
            try:
                try:
                    await _evict(client, pod)
                except ApiError as err:
                    if err.status != 429 or decision.reason != RECLAIM:
                        raise
                    log.info("reclaim: %s is under a budget that refuses; deleted", pod.key)
                    await _delete(client, pod)
            except ApiError as err:
                if err.status in (404, 409):
                    continue  # gone already, or another pod under the name now
                budget = err.status == 429
                why = "a PodDisruptionBudget refuses" if budget else "failed"
                return Refusal(victim.key, f"eviction of {pod.key} {why}: {err}", budget)
    return None


class PreemptionActions:
    """Runs decisions as background tasks, reporting back to the core."""

    def __init__(
        self,
        client: KubeClient,
        core: SchedulingCore,
        recorder: FeedbackRecorder,
        clock: Callable[[], float],
        wake: Callable[[], None],
        metrics: SchedulerMetrics,
    ) -> None:
        self.client = client
        self.core = core
        self.recorder = recorder
        self.clock = clock
        self.wake = wake
        self.metrics = metrics
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, decision: Preemption) -> None:
        task = asyncio.create_task(self._carry_out(decision), name=f"preempt-{decision.preemptor}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _carry_out(self, decision: Preemption) -> None:
        try:
            refusal = await evict_victims(self.client, decision, self.core.cache.bound_by_us)
        except Exception as error:  # the API unreachable, ...: drop it, retry later
            # The type too: a timeout's own message is empty.
            refusal = Refusal(
                "", f"eviction failed: {type(error).__name__}: {error}".rstrip(": "), refused=False
            )
        if refusal is not None:
            self.metrics.preemption("refused" if refusal.refused else "failed", 0)
            log.warning("gang %s: preemption dropped: %s", decision.preemptor, refusal.reason)
            # Only a budget's refusal spares the victim: after any other failure some of
            # its members may be gone already, and sparing it would send the next
            # decision to another gang.
            spared = refusal.victim if refusal.refused and refusal.victim else None
            self.core.preempter.refuse(decision.preemptor, spared, refusal.reason, self.clock())
            for placement in decision.placements:
                member = self.core.cache.pod(placement.pod_uid)
                if member is not None:
                    self.recorder.event(
                        pod_ref(member),
                        "Warning",
                        "PreemptionRefused",
                        f"gang {decision.preemptor} could not preempt: {refusal.reason}; "
                        "it waits and retries",
                    )
            self.wake()
            return
        log.info("%s", decision.message)
        self.metrics.preemption("evicted", len(decision.victims))
        for victim in decision.victims:
            for pod in victim.pods:
                self.recorder.event(pod_ref(pod), "Warning", "Preempted", _why(decision, victim))
        for placement in decision.placements:
            member = self.core.cache.pod(placement.pod_uid)
            if member is None:
                continue
            await self._nominate(member, placement.node)
            self.recorder.event(
                pod_ref(member),
                "Normal",
                "Preempting",
                f"{decision.message}; nominated node {placement.node}",
            )

    async def _nominate(self, pod: PodInfo, node: str) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        body = {"status": {"nominatedNodeName": node}}
        try:
            # Sets one value: repeating it is harmless.
            await self.client.call("PATCH", path, body=body, content_type=MERGE, retry_on=transient)
        except ApiError as err:
            if err.status != 404:
                log.warning("pod %s: nominatedNodeName not written: %s", pod.key, err)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            # Feedback: the preemption stands; the events below still go out.
            log.warning(
                "pod %s: nominatedNodeName not written: %s: %s", pod.key, type(err).__name__, err
            )
