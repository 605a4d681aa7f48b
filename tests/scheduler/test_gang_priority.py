"""Members of a gang must agree on priority (scheduler/gangs/gang.py, issue 12)."""

from __future__ import annotations

from scheduler.gangs.gang import assemble_gangs
from tests.factories import make_pod
from tests.scheduler.test_gang import SCHED, at, only_gang, workers


def test_members_that_agree_give_the_gang_their_priority_and_no_problem() -> None:
    gang = only_gang(assemble_gangs(workers(3, min_member=3, priority=50), {}, SCHED))
    assert gang.priority == 50
    assert not [p for p in gang.problems if p.reason == "ConflictingPriority"]


def test_a_mismatch_is_a_problem_on_every_pending_member_and_the_lowest_counts() -> None:
    pods = workers(2, min_member=3, priority=100)
    pods.append(make_pod("train-2", gang="train", min_member=3, created=at(5), priority=0))
    gang = only_gang(assemble_gangs(pods, {}, SCHED))
    assert gang.priority == 0  # one low member does not ride on the others' class
    conflicts = [p for p in gang.problems if p.reason == "ConflictingPriority"]
    assert {p.key for p in conflicts} == {"default/train-0", "default/train-1", "default/train-2"}
    assert conflicts[0].message == (
        "members of gang default/train disagree on priority: "
        "100 (default/train-0, default/train-1); 0 (default/train-2); the gang is queued "
        "at the lowest, 0; give every member the same PriorityClass"
    )


def test_a_bound_member_with_another_priority_counts_too() -> None:
    pods = workers(1, min_member=2, priority=10)
    pods.append(
        make_pod("train-1", gang="train", min_member=2, priority=20, node_name="n", phase="Running")
    )
    gang = only_gang(assemble_gangs(pods, {}, SCHED))
    assert gang.priority == 10
    assert [p.key for p in gang.problems if p.reason == "ConflictingPriority"] == [
        "default/train-0"
    ]
