"""Gang assembly: membership, size rules, readiness, problems, speed, incremental index."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.pod import VOLCANO_GANG_ANNOTATION, PodInfo
from cache.podgroup import PodGroupInfo, podgroup_from_api
from scheduler.gangs.gang import (
    Gang,
    GangIndex,
    GangSet,
    Problem,
    assemble_gangs,
    parse_min_member,
)
from tests.factories import make_pod

SCHED = "gang-scheduler"


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}Z"


def workers(count: int, gang: str = "train", start: int = 0, **kwargs: Any) -> list[PodInfo]:
    return [
        make_pod(f"{gang}-{i}", gang=gang, created=at(start + i), **kwargs) for i in range(count)
    ]


def podgroup(name: str = "train", namespace: str = "default", **spec: Any) -> PodGroupInfo:
    return podgroup_from_api(
        {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": spec.pop("created", at(30)),
            },
            "spec": spec,
        }
    )


def groups(*items: PodGroupInfo) -> dict[str, PodGroupInfo]:
    return {item.key: item for item in items}


def only_gang(result: GangSet) -> Gang:
    assert len(result.gangs) == 1
    return next(iter(result.gangs.values()))


def reasons(problems: list[Problem]) -> Counter[str]:
    return Counter(problem.reason for problem in problems)


# --- membership -----------------------------------------------------------------------


def test_pod_without_gang_is_a_gang_of_one() -> None:
    pod = make_pod("notebook")
    gang = only_gang(assemble_gangs([pod], {}, SCHED))
    assert gang.key == "default/pod:notebook"
    assert (gang.name, gang.namespace) == ("notebook", "default")
    assert gang.size_source == "single"
    assert gang.min_member == 1
    assert gang.ready and gang.needed == 1 and gang.waiting_message is None
    assert gang.problems == []


def test_members_grouped_by_label_and_by_volcano_annotation() -> None:
    labelled = workers(2, "a", min_member=2)
    volcano = [
        make_pod(f"b-{i}", annotations={VOLCANO_GANG_ANNOTATION: "b"}, min_member=2)
        for i in range(2)
    ]
    result = assemble_gangs(labelled + volcano, {}, SCHED)
    assert set(result.gangs) == {"default/a", "default/b"}
    assert [pod.name for pod in result.gangs["default/b"].pending] == ["b-0", "b-1"]


def test_same_gang_name_in_two_namespaces_is_two_gangs() -> None:
    pods = workers(2, min_member=2, namespace="alice") + workers(2, min_member=2, namespace="bob")
    result = assemble_gangs(pods, {}, SCHED)
    assert set(result.gangs) == {"alice/train", "bob/train"}


def test_pending_sorted_by_creation_then_name() -> None:
    pods = [
        make_pod("w-b", gang="g", created=at(5), min_member=3),
        make_pod("w-c", gang="g", created=at(1), min_member=3),
        make_pod("w-a", gang="g", created=at(5), min_member=3),
    ]
    gang = only_gang(assemble_gangs(pods, {}, SCHED))
    assert [pod.name for pod in gang.pending] == ["w-c", "w-a", "w-b"]


def test_pending_excludes_other_schedulers_deleting_and_terminal_pods() -> None:
    pods = workers(2, min_member=4)
    pods.append(make_pod("train-other", gang="train", scheduler="default-scheduler"))
    pods.append(dataclasses.replace(make_pod("train-gone", gang="train"), deleting=True))
    pods.append(make_pod("train-failed", gang="train", phase="Failed"))
    gang = only_gang(assemble_gangs(pods, {}, SCHED))
    assert [pod.name for pod in gang.pending] == ["train-0", "train-1"]
    assert gang.waiting_message == "waiting for 2 more members: 2/4 exist"


def test_only_gangs_with_a_pending_member_of_ours() -> None:
    running = workers(4, "done", node_name="n1", phase="Running", min_member=4)
    theirs = workers(2, "theirs", scheduler="volcano", min_member=2)
    bad_group = podgroup("done", minMember=-1)
    result = assemble_gangs(running + theirs, groups(bad_group), SCHED)
    assert result.gangs == {}
    # Nothing to schedule there: its PodGroup's problems are another instance's business.
    assert result.problems == []


def test_a_pod_listed_twice_counts_once() -> None:
    pods = workers(2, min_member=3)
    gang = only_gang(assemble_gangs(pods + pods[:1], {}, SCHED))
    assert len(gang.pending) == 2


# --- bound members --------------------------------------------------------------------


def test_replacement_for_one_failed_worker_of_a_running_gang_needs_one() -> None:
    running = workers(3, node_name="n1", phase="Running", scheduler="other")
    replacement = make_pod("train-3b", gang="train", created=at(40))
    gang = only_gang(assemble_gangs([*running, replacement], groups(podgroup(minMember=4)), SCHED))
    assert [pod.name for pod in gang.bound] == ["train-0", "train-1", "train-2"]
    assert [pod.name for pod in gang.pending] == ["train-3b"]
    assert gang.needed == 1
    assert gang.missing == 0
    assert gang.ready


def test_bound_members_being_deleted_or_finished_do_not_count() -> None:
    old = workers(3, node_name="n1", phase="Running")
    terminating = [dataclasses.replace(pod, deleting=True) for pod in old[:2]]
    finished = make_pod("train-9", gang="train", node_name="n1", phase="Succeeded")
    new = [make_pod(f"train-new-{i}", gang="train", created=at(10 + i)) for i in range(2)]
    pods = [*terminating, old[2], finished, *new]
    gang = only_gang(assemble_gangs(pods, groups(podgroup(minMember=4)), SCHED))
    assert [pod.name for pod in gang.bound] == ["train-2"]
    assert gang.needed == 3
    assert not gang.ready
    assert gang.waiting_message == "waiting for 1 more member: 3/4 exist"


def test_more_bound_than_needed_places_extras_as_optional() -> None:
    running = workers(4, node_name="n1", phase="Running")
    extra = make_pod("train-extra", gang="train", created=at(50))
    gang = only_gang(assemble_gangs([*running, extra], groups(podgroup(minMember=4)), SCHED))
    assert gang.needed == 0
    assert gang.ready


# --- size rules -----------------------------------------------------------------------


def test_podgroup_gives_size_timeout_and_creation_time() -> None:
    group = podgroup(minMember=4, scheduleTimeoutSeconds=600, created=at(1))
    gang = only_gang(assemble_gangs(workers(3, start=10), groups(group), SCHED))
    assert gang.size_source == "podgroup"
    assert gang.min_member == 4
    assert gang.timeout_seconds == 600
    assert gang.created == group.created  # the PodGroup is older than its pods
    assert not gang.ready
    assert gang.missing == 1
    assert gang.waiting_message == "waiting for 1 more member: 3/4 exist"
    assert gang.problems == []


def test_podgroup_wins_over_annotation() -> None:
    pods = workers(2, min_member=2)
    gang = only_gang(assemble_gangs(pods, groups(podgroup(minMember=3)), SCHED))
    assert (gang.min_member, gang.size_source) == (3, "podgroup")
    assert not gang.ready


def test_gang_ready_when_all_members_exist() -> None:
    gang = only_gang(assemble_gangs(workers(4), groups(podgroup(minMember=4)), SCHED))
    assert gang.ready
    assert gang.needed == 4
    assert gang.waiting_message is None


def test_annotation_gives_size() -> None:
    gang = only_gang(assemble_gangs(workers(2, min_member=2), {}, SCHED))
    assert (gang.min_member, gang.size_source) == (2, "annotation")
    assert gang.ready and gang.problems == []


def test_conflicting_annotations_use_largest_and_say_so() -> None:
    pods = [
        make_pod("w-0", gang="g", min_member=2),
        make_pod("w-1", gang="g", min_member=4),
        make_pod("w-2", gang="g", min_member=4),
    ]
    gang = only_gang(assemble_gangs(pods, {}, SCHED))
    assert (gang.min_member, gang.size_source) == (4, "annotation")
    conflicts = [p for p in gang.problems if p.reason == "ConflictingMinMember"]
    assert [p.key for p in conflicts] == ["default/w-0", "default/w-1", "default/w-2"]
    assert {p.kind for p in conflicts} == {"Pod"}
    message = conflicts[0].message
    assert "2 on default/w-0" in message
    assert "4 on default/w-1, default/w-2" in message
    assert "using the largest, 4" in message


@pytest.mark.parametrize("text", ["abc", "0", "-1", "2.5", "", "1e3", "+3", "99999999999"])
def test_malformed_annotation_is_ignored_with_a_problem(text: str) -> None:
    bad = make_pod("w-bad", gang="g", annotations={"gang-scheduler.io/min-member": text})
    good = make_pod("w-good", gang="g", min_member=2)
    result = assemble_gangs([bad, good], {}, SCHED)
    gang = only_gang(result)
    assert (gang.min_member, gang.size_source) == (2, "annotation")
    (problem,) = gang.problems
    assert problem == result.problems[0]
    assert (problem.kind, problem.key, problem.reason) == (
        "Pod",
        "default/w-bad",
        "InvalidMinMember",
    )
    assert repr(text) in problem.message
    assert "default/w-bad" in problem.message
    assert "the gang's size is 2, from its members' annotations" in problem.message


def test_parse_min_member() -> None:
    assert parse_min_member("4") == 4
    assert parse_min_member(" 8 ") == 8
    assert parse_min_member("2147483647") == 2**31 - 1
    assert parse_min_member("2147483648") is None
    assert parse_min_member("٣") is None  # digits of other scripts are not accepted


def test_unknown_size_takes_existing_members_with_a_warning() -> None:
    running = make_pod("g-0", gang="g", node_name="n1", phase="Running")
    pending = [make_pod(f"g-{i}", gang="g") for i in (1, 2)]
    gang = only_gang(assemble_gangs([running, *pending], {}, SCHED))
    assert (gang.min_member, gang.size_source) == (3, "default")
    assert gang.ready
    assert gang.needed == 2
    unknown = [p for p in gang.problems if p.reason == "GangSizeUnknown"]
    assert [p.key for p in unknown] == ["default/g-1", "default/g-2"]
    assert "gang default/g has no size" in unknown[0].message
    assert "gang-scheduler.io/min-member" in unknown[0].message


def test_unknown_size_message_stable_while_members_arrive() -> None:
    first = only_gang(assemble_gangs(workers(1), {}, SCHED)).problems
    later = only_gang(assemble_gangs(workers(3), {}, SCHED)).problems
    assert first[0] in later  # the adapter publishes it once, not once per arrival


def test_all_annotations_malformed_falls_back_to_default() -> None:
    pods = workers(2, min_member="four")
    gang = only_gang(assemble_gangs(pods, {}, SCHED))
    assert gang.size_source == "default"
    assert reasons(gang.problems) == {"InvalidMinMember": 2, "GangSizeUnknown": 2}
    invalid = next(p for p in gang.problems if p.reason == "InvalidMinMember")
    assert "the members that exist are taken as the whole gang" in invalid.message


def test_invalid_podgroup_reported_and_annotation_used() -> None:
    group = podgroup(minMember="four")
    assert group.problems  # the cache flagged it
    gang = only_gang(assemble_gangs(workers(2, min_member=2), groups(group), SCHED))
    assert (gang.min_member, gang.size_source) == (2, "annotation")
    (problem,) = gang.problems
    assert (problem.kind, problem.key, problem.reason) == (
        "PodGroup",
        "default/train",
        "InvalidPodGroup",
    )
    assert "'four'" in problem.message
    assert "from its members' annotations" in problem.message


def test_invalid_podgroup_without_annotation_falls_back_to_default() -> None:
    gang = only_gang(assemble_gangs(workers(2), groups(podgroup(minMember=0)), SCHED))
    assert gang.size_source == "default"
    assert reasons(gang.problems) == {"InvalidPodGroup": 1, "GangSizeUnknown": 2}


def test_podgroup_with_bad_timeout_still_gives_size() -> None:
    group = podgroup(minMember=2, scheduleTimeoutSeconds=-5)
    gang = only_gang(assemble_gangs(workers(2), groups(group), SCHED))
    assert (gang.min_member, gang.size_source, gang.timeout_seconds) == (2, "podgroup", None)
    assert reasons(gang.problems) == {"InvalidPodGroup": 1}
    assert "scheduleTimeoutSeconds" in gang.problems[0].message


def test_podgroup_record_with_impossible_size_built_by_hand() -> None:
    group = PodGroupInfo(namespace="default", name="train", min_member=0)
    gang = only_gang(assemble_gangs(workers(2, min_member=2), groups(group), SCHED))
    assert gang.size_source == "annotation"
    assert reasons(gang.problems) == {"InvalidPodGroup": 1}


@pytest.mark.parametrize(
    ("text", "reason"), [("4", "MinMemberWithoutGang"), ("abc", "InvalidMinMember")]
)
def test_size_annotation_on_a_pod_without_gang(text: str, reason: str) -> None:
    gang = only_gang(assemble_gangs([make_pod("lonely", min_member=text)], {}, SCHED))
    assert (gang.min_member, gang.size_source) == (1, "single")
    (problem,) = gang.problems
    assert (problem.key, problem.reason) == ("default/lonely", reason)
    assert "scheduled alone" in problem.message
    assert gang.ready


def test_size_annotation_of_one_on_a_pod_without_gang_is_fine() -> None:
    gang = only_gang(assemble_gangs([make_pod("lonely", min_member=1)], {}, SCHED))
    assert gang.problems == []


# --- members that cannot be placed ----------------------------------------------------


def test_member_with_problems_blocks_readiness_and_is_reported() -> None:
    pods = workers(4, min_member=4)
    pods[2] = dataclasses.replace(pods[2], problems=("nvidia.com/vgpu 1500 is not allowed",))
    result = assemble_gangs(pods, {}, SCHED)
    gang = only_gang(result)
    assert not gang.ready
    assert len(gang.placeable) == 3
    assert gang.waiting_message == (
        "1 member cannot be scheduled as written: 3/4 schedulable; "
        f"{pods[2].key}: nvidia.com/vgpu 1500 is not allowed"
    )
    (problem,) = result.problems
    assert (problem.kind, problem.key, problem.reason) == (
        "Pod",
        "default/train-2",
        "InvalidPodSpec",
    )
    assert "nvidia.com/vgpu 1500 is not allowed" in problem.message


def test_gang_properties_by_hand() -> None:
    gang = Gang(key="ns/g", namespace="ns", name="g", min_member=2)
    assert not gang.ready
    assert gang.waiting_message == "waiting for 2 more members: 0/2 exist"
    gang.bound = workers(2, node_name="n1", phase="Running")
    assert gang.waiting_message == "no member is waiting to be scheduled"


# --- speed ----------------------------------------------------------------------------


def _big_cluster() -> tuple[list[PodInfo], dict[str, PodGroupInfo]]:
    pods = []
    podgroups = {}
    for g in range(2500):
        namespace = f"team-{g % 50}"
        name = f"job-{g}"
        if g % 2:
            podgroups[f"{namespace}/{name}"] = PodGroupInfo(namespace, name, min_member=8)
        for m in range(8):
            bound = g % 5 == 0 and m < 4
            pods.append(
                PodInfo(
                    uid=f"{g}-{m}",
                    namespace=namespace,
                    name=f"{name}-{m}",
                    scheduler_name=SCHED,
                    node_name="node-1" if bound else "",
                    phase="Running" if bound else "Pending",
                    created=float(g * 10 + m),
                    gang_name=name,
                    min_member_text=None if g % 2 else "8",
                )
            )
    return pods, podgroups


def test_twenty_thousand_pods_assemble_into_their_gangs() -> None:
    # Speed is measured in bench/, not asserted here.
    pods, podgroups = _big_cluster()
    result = assemble_gangs(pods, podgroups, SCHED)
    assert len(result.gangs) == 2500
    assert all(gang.ready for gang in result.gangs.values())


# --- properties -----------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "c", "pod:a", "x/y", ""]) | st.text(max_size=8)
_texts = st.sampled_from(["1", "2", "4", "abc", "0", "-1", "2.5", " 3 "]) | st.text(max_size=6)


@st.composite
def pod_infos(draw: st.DrawFn, name: str) -> PodInfo:
    return PodInfo(
        uid=name,
        namespace=draw(st.sampled_from(["default", "ml", ""])),
        name=name,
        scheduler_name=draw(st.sampled_from([SCHED, "default-scheduler", ""])),
        node_name=draw(st.sampled_from(["", "", "n1"])),
        phase=draw(st.sampled_from(["Pending", "Running", "Failed", "Succeeded", "Unknown"])),
        priority=draw(st.integers(-(2**40), 2**40)),
        created=draw(st.floats(allow_nan=True, allow_infinity=True)),
        deleting=draw(st.booleans()),
        gang_name=draw(st.none() | _names),
        min_member_text=draw(st.none() | _texts),
        problems=tuple(draw(st.lists(st.text(max_size=5), max_size=2))),
    )


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[PodInfo], dict[str, PodGroupInfo]]:
    names = draw(st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=25))
    pods = [draw(pod_infos(name)) for name in names]
    podgroups = {}
    for key in draw(st.lists(st.sampled_from([p.gang_key for p in pods] or ["default/a"]))):
        namespace, _, name = key.partition("/")
        podgroups[key] = PodGroupInfo(
            namespace=namespace,
            name=name,
            min_member=draw(st.none() | st.integers(-3, 10)),
            schedule_timeout_seconds=draw(st.none() | st.integers(-1, 100)),
            created=draw(st.floats(allow_nan=True)),
            problems=tuple(draw(st.lists(st.text(max_size=5), max_size=2))),
        )
    return pods, podgroups


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_every_pending_pod_of_ours_lands_in_exactly_one_gang(
    cluster: tuple[list[PodInfo], dict[str, PodGroupInfo]],
) -> None:
    pods, podgroups = cluster
    result = assemble_gangs(pods, podgroups, SCHED)
    placed = Counter(pod.key for gang in result.gangs.values() for pod in gang.pending)
    for pod in pods:
        ours = (
            pod.scheduler_name == SCHED
            and not pod.node_name
            and not pod.deleting
            and pod.phase not in ("Succeeded", "Failed")
        )
        assert placed[pod.key] == (1 if ours else 0)
        if ours:
            assert pod in result.gangs[pod.gang_key].pending
    for key, gang in result.gangs.items():
        assert gang.key == key and gang.pending and gang.min_member >= 1
        assert gang.waiting_message is None or gang.waiting_message
        assert all(problem.message for problem in gang.problems)
    assert len(result.problems) == sum(len(g.problems) for g in result.gangs.values())


def _problem_order(problem: Problem) -> tuple[str, str, str, str]:
    return (problem.kind, problem.key, problem.reason, problem.message)


@settings(max_examples=100, deadline=None)
@given(clusters(), st.data())
def test_incremental_index_matches_full_rebuild(
    cluster: tuple[list[PodInfo], dict[str, PodGroupInfo]], data: st.DataObject
) -> None:
    pods, podgroups = cluster
    index = GangIndex(SCHED)
    live: dict[str, PodInfo] = {}
    for pod in pods:
        index.upsert_pod(pod)
        live[pod.uid] = pod
    for group in podgroups.values():
        index.upsert_podgroup(group)
    index.assemble()
    # Then a few changes: pods deleted, pods bound, a PodGroup removed.
    for pod in data.draw(st.lists(st.sampled_from(pods), max_size=5)) if pods else []:
        if data.draw(st.booleans()):
            index.delete_pod(pod.uid)
            live.pop(pod.uid, None)
        else:
            moved = dataclasses.replace(pod, node_name="n2", phase="Running")
            index.upsert_pod(moved)
            live[pod.uid] = moved
    live_groups = dict(podgroups)
    if podgroups and data.draw(st.booleans()):
        gone = data.draw(st.sampled_from(sorted(podgroups)))
        index.delete_podgroup(gone)
        del live_groups[gone]
    incremental, _ = index.assemble()
    full = assemble_gangs(live.values(), live_groups, SCHED)
    assert incremental.gangs == full.gangs
    assert incremental.partial == full.partial
    assert sorted(incremental.problems, key=_problem_order) == sorted(
        full.problems, key=_problem_order
    )


def test_index_reports_changed_gangs() -> None:
    index = GangIndex(SCHED)
    for pod in workers(2, min_member=3) + workers(1, "other", min_member=1):
        index.upsert_pod(pod)
    result, changed = index.assemble()
    assert changed == {"default/train", "default/other"}
    assert not result.gangs["default/train"].ready
    index.upsert_pod(make_pod("train-9", gang="train", min_member=3))
    result, changed = index.assemble()
    assert changed == {"default/train"}
    assert result.gangs["default/train"].ready
    index.delete_pod("uid-default-other-0")
    result, changed = index.assemble()
    assert changed == {"default/other"}
    assert set(result.gangs) == {"default/train"}


def test_min_member_text_with_control_characters_is_refused_not_raised() -> None:
    assert parse_min_member(" 3\t") == 3
    assert parse_min_member("0\x1f") is None
    assert parse_min_member("3\x1f") is None
