"""The scheduling cycle: queue, planner and cache together, with binds outcomes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import EventType, Reservation
from policies.profile import build_profile
from scheduler.cli.demo import run_demo
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan, Unschedulable
from scheduler.process.config import build_core_from, config_from_mapping
from tests.factories import node_obj, pod_obj

ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED


def core_with(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> SchedulingCore:
    core = SchedulingCore(build_profile())
    for node in nodes:
        core.apply_node(ADDED, node, 0)
    for pod in pods:
        core.apply_pod(ADDED, pod, 0)
    return core


def gang(name: str, size: int, gpus: int, created: int = 0) -> list[dict[str, Any]]:
    return [
        pod_obj(
            f"{name}-{i}",
            gang=name,
            min_member=size,
            gpus=gpus,
            created=f"2026-01-01T00:00:{created:02d}Z",
        )
        for i in range(size)
    ]


def test_demo_places_what_it_promises() -> None:
    report = run_demo()
    placed = {row.pod: row for row in report.placed}
    assert {placed[f"resnet-w{i}"].node for i in range(4)} in ({"dgx-a1"}, {"dgx-a2"})
    assert all(placed[f"bert-w{i}"].links == "PIX" for i in range(4))
    assert placed["notebook-alice"].node == placed["notebook-bob"].node == "t4-b3"
    waiting = dict(report.waiting)
    assert "gang ml/llm: 1/2 members placeable" in waiting["ml/llm"]
    assert waiting["ml/gpt"].startswith("waiting for 1 more member: 3/4 exist")
    assert "whole multiple" in waiting["ml/pod:odd-share"]
    assert not any(pod.startswith("llm") or pod.startswith("gpt") for pod in placed)


def test_planned_gang_is_not_planned_again_while_binding() -> None:
    core = core_with([node_obj("n", gpus=4)], gang("g", 2, 1))
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    # A late event of a member, still pending in the API, changes nothing.
    core.apply_pod(
        MODIFIED, pod_obj("g-0", gang="g", min_member=2, gpus=1, resource_version="2"), 1
    )
    assert core.schedule_next(1) is None
    assert list(core.cache.pending_pods("gang-scheduler")) == []


def test_bind_failure_releases_everything_and_retries_after_backoff() -> None:
    core = core_with([node_obj("n", gpus=4)], gang("g", 2, 1))
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    core.bind_failed("default/g", attempt.result.placements, 0, "node n vanished")
    assert core.cache.node("n").gpu_free == [1000] * 4  # type: ignore[union-attr]
    assert core.queue.state("default/g") == "unschedulable"
    assert core.schedule_next(0.5) is None
    core.apply_node(
        MODIFIED, node_obj("n", gpus=4, labels={"fixed": "yes"}, resource_version="2"), 0.5
    )
    retry = core.schedule_next(2)
    assert retry is not None and isinstance(retry.result, Plan)


def test_reservations_never_expire_and_an_unknown_bind_waits_for_a_read() -> None:
    core = core_with([node_obj("n", gpus=1)], [pod_obj("solo", gpus=1), pod_obj("late", gpus=1)])
    first = core.schedule_next(0)
    assert first is not None and isinstance(first.result, Plan)
    placement = first.result.placements[0]
    # However long the bind takes, the room is not planned again.
    late = core.schedule_next(1e6)
    assert late is not None and isinstance(late.result, Unschedulable)
    core.bind_unknown([placement])
    assert core.cache.reservation(placement.pod_uid) == Reservation.UNKNOWN
    assert core.cache.node("n").gpu_free == [0]  # type: ignore[union-attr]
    # A read that shows the pod unbound releases it, and the room is planned again.
    assert core.bind_resolved(placement, landed=False, now=3e6)
    assert not core.bind_resolved(placement, landed=False, now=3e6)  # settled already
    again = core.schedule_next(3e6 + 100)
    assert again is not None and isinstance(again.result, Plan)


def test_two_big_gangs_finish_one_after_the_other_without_deadlock() -> None:
    nodes = [node_obj(f"n{i}", gpus=1) for i in range(4)]
    core = core_with(nodes, gang("first", 3, 1, created=0) + gang("second", 3, 1, created=1))
    first = core.schedule_next(0)
    assert first is not None and first.gang.key == "default/first"
    assert isinstance(first.result, Plan)
    for placement in first.result.placements:
        core.bound(placement)
    second = core.schedule_next(1)
    assert second is not None and isinstance(second.result, Unschedulable)
    assert second.result.placeable == 1  # and it holds nothing while it waits
    assert sum(n.free_whole_gpus for n in core.cache.nodes()) == 1
    assert core.schedule_next(2) is None  # no spinning while nothing changes
    for i in range(3):  # the first job finishes
        done = pod_obj(
            f"first-{i}",
            gang="first",
            min_member=3,
            gpus=1,
            node_name=first.result.placements[i].node,
            phase="Succeeded",
            resource_version="9",
        )
        core.apply_pod(MODIFIED, done, 3)
    retry = core.schedule_next(3)
    assert retry is not None and retry.gang.key == "default/second"
    assert isinstance(retry.result, Plan) and len(retry.result.placements) == 3


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_no_gang_is_ever_partially_bound(data: st.DataObject) -> None:
    nodes = [node_obj(f"n{i}", gpus=data.draw(st.sampled_from([1, 2, 4]))) for i in range(3)]
    core = core_with(nodes, [])
    sizes: dict[str, int] = {}
    finished: dict[str, int] = {}
    clock = 0.0
    for step in range(data.draw(st.integers(1, 12))):
        action = data.draw(st.sampled_from(["arrive", "arrive", "cycle", "cycle", "finish"]))
        clock += data.draw(st.sampled_from([0.5, 2.0, 70.0]))
        if action == "arrive":
            size = data.draw(st.integers(1, 4))
            name = f"j{step}"
            sizes[f"default/{name}"] = size
            count = data.draw(st.integers(max(1, size - 1), size + 1))
            for i in range(count):
                core.apply_pod(
                    ADDED,
                    pod_obj(
                        f"{name}-{i}",
                        gang=name,
                        min_member=size,
                        gpus=data.draw(st.sampled_from([1, 2])),
                    ),
                    clock,
                )
        elif action == "finish":
            running = [p for p in core.cache.pods() if p.node_name and p.phase == "Running"]
            if running:
                victim = data.draw(st.sampled_from(running))
                finished[victim.gang_key] = finished.get(victim.gang_key, 0) + 1
                core.apply_pod(DELETED, pod_obj(victim.name, resource_version="99"), clock)
        else:
            attempt = core.schedule_next(clock)
            if attempt is not None and isinstance(attempt.result, Plan):
                if data.draw(st.booleans()):
                    for placement in attempt.result.placements:
                        core.bound(placement)
                else:
                    core.bind_failed(attempt.gang.key, attempt.result.placements, clock, "test")
        for node in core.cache.nodes():
            assert all(free >= 0 for free in node.gpu_free)
        bound: dict[str, int] = {}
        for pod in core.cache.pods():
            if pod.node_name or core.cache.is_assumed(pod.uid):
                bound[pod.gang_key] = bound.get(pod.gang_key, 0) + 1
        for key, size in sizes.items():
            # Bound (or being bound) members are none or a whole gang; only members
            # that finished afterwards may bring the count below minMember.
            count = bound.get(key, 0)
            assert count == 0 or count + finished.get(key, 0) >= size


def test_fgd_profile_learns_its_workload_from_the_pods_that_arrive() -> None:
    core = SchedulingCore(build_profile("fgd"))
    core.apply_node(ADDED, node_obj("n", gpus=2), 0)
    for i in range(3):
        core.apply_pod(ADDED, pod_obj(f"p{i}", vgpu=300), 0)
    core.apply_pod(ADDED, pod_obj("theirs", vgpu=300, scheduler="default-scheduler"), 0)
    workload = core.profile.workload
    assert workload is not None and len(workload.current()) == 1
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)


def test_relist_reconciles_and_keeps_reservations_of_pods_that_still_exist() -> None:
    core = core_with([node_obj("n", gpus=4), node_obj("gone", gpus=4)], gang("g", 2, 1))
    core.apply_pod(ADDED, pod_obj("finished", gpus=1, node_name="n", phase="Running"), 0)
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    # The watch broke; meanwhile "finished" and node "gone" were deleted.
    core.replace_nodes([node_obj("n", gpus=4)], 1)
    core.replace_pods(gang("g", 2, 1), 1)
    assert core.cache.node("gone") is None and core.cache.pod("uid-default-finished") is None
    kept = [p for p in attempt.result.placements if p.node == "n"]
    assert all(core.cache.is_assumed(p.pod_uid) for p in kept)
    assert core.schedule_next(2) is None  # the gang is not planned twice
    core.replace_podgroups([], 2)


def test_a_given_queue_is_kept_and_attempts_say_when_the_gang_became_ready() -> None:
    from scheduler.gangs.queue import GangQueue

    queue = GangQueue(initial_backoff_seconds=5, max_backoff_seconds=5)
    core = SchedulingCore(build_profile(), queue=queue)
    assert core.queue is queue
    core.apply_node(ADDED, node_obj("n", gpus=1), 0)
    core.apply_pod(ADDED, pod_obj("solo", gpus=1), 3)
    attempt = core.schedule_next(7)
    assert attempt is not None and attempt.ready_since == 7


def test_a_coarser_share_unit_counts_vgpu_in_tenths_of_a_gpu() -> None:
    """fractionalGPU.unitsPerGPU: 100, for a device plugin advertising 100 units a GPU
    (--vgpu-unit 10): `nvidia.com/vgpu: 50` is half a GPU, and the assignment the bind
    writes is in milli, as always."""
    config = config_from_mapping({"fractionalGPU": {"unitsPerGPU": 100}})
    core = build_core_from(config)
    core.apply_node(ADDED, node_obj("n", gpus=2, vgpu=200), 0)
    assert core.cache.node("n") is not None and len(core.cache.node("n").devices) == 2
    for name, units in (("a", 50), ("b", 60), ("c", 50), ("odd", 150)):
        core.apply_pod(ADDED, pod_obj(name, vgpu=units), 0)
    placed: dict[str, tuple[tuple[int, int], ...]] = {}
    while (attempt := core.schedule_next(0)) is not None:
        if isinstance(attempt.result, Plan):
            (placement,) = attempt.result.placements
            placed[placement.pod_uid.rsplit("-", 1)[-1]] = placement.shares
    assert sorted(milli for shares in placed.values() for _, milli in shares) == [500, 500, 600]
    # 500 + 600 do not share a GPU; the two halves do.
    (device_b,) = [index for index, _ in placed["b"]]
    assert device_b not in {index for name in "ac" for index, _ in placed[name]}
    odd = core.cache.pod("uid-default-odd")
    assert odd is not None
    assert odd.problems == (
        "nvidia.com/vgpu: 150 is above 100 but not a whole multiple of it; a share under "
        "100 fits on one GPU, larger requests take whole GPUs",
    )


def test_configured_gang_keys_group_and_size_pods_and_name_themselves_in_problems() -> None:
    """gang.label and gang.minMemberAnnotation of a cluster still on scheduler-plugins'
    older label: its pods form gangs, and the default keys mean nothing there."""
    config = config_from_mapping(
        {
            "gang": {
                "label": "pod-group.scheduling.sigs.k8s.io",
                "minMemberAnnotation": "example.com/gang-size",
            }
        }
    )
    core = build_core_from(config)
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    for i in range(2):
        member = pod_obj(f"old-{i}", gpus=1)
        member["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io"] = "legacy"
        member["metadata"]["annotations"] = {"example.com/gang-size": "3"}
        core.apply_pod(ADDED, member, 0)
    # The default label is not read: this pod is a gang of its own, and its size
    # annotation without the configured label is pointed out with the configured names.
    plain = pod_obj("plain", gpus=1, gang="legacy")
    plain["metadata"]["annotations"] = {"example.com/gang-size": "2"}
    core.apply_pod(ADDED, plain, 0)
    core.refresh(0)
    legacy = core.gangs["default/legacy"]
    assert legacy.min_member == 3 and len(legacy.pending) == 2 and not legacy.ready
    assert core.gangs["default/pod:plain"].min_member == 1
    (problem,) = [p for p in core.problems if p.key == "default/plain"]
    assert problem.message == (
        "pod default/plain has annotation example.com/gang-size='2' but no "
        "pod-group.scheduling.sigs.k8s.io label, so it belongs to no gang; it is scheduled alone"
    )


def test_a_gang_is_not_planned_while_a_bind_of_a_member_is_in_flight() -> None:
    """A member deleted and recreated (new uid) while the gang's binds are in flight
    makes the gang ready again; it is planned only once those binds have an outcome."""
    core = core_with([node_obj(f"n{i}", gpus=1) for i in range(3)], gang("g", 2, 1))
    first = core.schedule_next(0)
    assert first is not None and isinstance(first.result, Plan)
    kept, lost = first.result.placements
    doomed = next(p for p in gang("g", 2, 1) if p["metadata"]["uid"] == lost.pod_uid)
    core.apply_pod(DELETED, doomed, 1)
    recreated = pod_obj(
        doomed["metadata"]["name"], gang="g", min_member=2, gpus=1, uid="uid-recreated"
    )
    core.apply_pod(ADDED, recreated, 1)
    assert core.schedule_next(2) is None  # the bind of `kept` is still in flight
    assert core.cache.is_assumed(kept.pod_uid)
    # The API accepted it and the watch shows it bound: the gang is planned again, for
    # its recreated member only.
    core.bind_accepted([kept])
    name = next(p for p in gang("g", 2, 1) if p["metadata"]["uid"] == kept.pod_uid)
    bound = pod_obj(
        name["metadata"]["name"],
        gang="g",
        min_member=2,
        gpus=1,
        node_name=kept.node,
        resource_version="5",
        annotations={"gang-scheduler.io/gpu-devices": "0:1000"},
    )
    core.apply_pod(MODIFIED, bound, 3)
    again = core.schedule_next(10)
    assert again is not None and isinstance(again.result, Plan)
    assert [p.pod_uid for p in again.result.placements] == ["uid-recreated"]
    assert again.result.placements[0].node != kept.node
