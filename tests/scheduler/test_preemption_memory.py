"""The preempter's memory stays bounded under churn (scheduler/sharing/preemption.py):
refusals are forgotten when they expire or their gang goes, dropped decisions when
their gang goes; a tenant creating and deleting gangs of new names cannot grow them."""

from __future__ import annotations

from cache.cluster import EventType
from scheduler.sharing.preemption import REFUSED_VICTIM_SECONDS
from tests.factories import node_obj
from tests.scheduler.test_preemption_core import core_with, delete, members, run


def test_churn_of_refused_evictions_leaves_the_preempter_bounded() -> None:
    core = core_with([node_obj("n0", gpus=8)], [])
    for turn in range(300):
        now = float(turn)  # one second apart: 60 refusals would still be in force
        low = members(f"low{turn}", 1, 8, priority=1, nodes=["n0"])
        high = members(f"high{turn}", 1, 8, priority=10)
        for pod in low + high:
            core.apply_pod(EventType.ADDED, pod, now)
        [attempt] = run(core, now)
        decision = attempt.preemption
        assert decision is not None
        core.preempter.refuse(decision.preemptor, decision.victims[0].key, "budget", now)
        delete(core, low + high, now)  # both gangs go, as a churning tenant's do
    preempter = core.preempter
    assert len(preempter.refused) <= 1, len(preempter.refused)
    assert len(preempter.dropped) <= 1, len(preempter.dropped)


def test_a_refusal_is_forgotten_once_it_expires_even_while_its_gang_runs() -> None:
    runners = [members(f"low{i}", 1, 1, priority=1, nodes=["n0"]) for i in range(5)]
    core = core_with([node_obj("n0", gpus=8)], [pod for gang in runners for pod in gang])
    for i in range(5):
        core.preempter.refuse(f"default/x{i}", f"default/low{i}", "budget", float(i))
    assert len(core.preempter.refused) == 5
    later = 5.0 + REFUSED_VICTIM_SECONDS
    high = members("high", 1, 8, priority=10)
    for pod in high:
        core.apply_pod(EventType.ADDED, pod, later)
    [attempt] = run(core, later)  # a search: every refusal has expired
    assert attempt.preemption is not None
    assert core.preempter.refused == {}
