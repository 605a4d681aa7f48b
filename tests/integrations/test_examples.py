"""deploy/examples/integrations/: each example's user object, turned into the pods (and
gang objects) its controller creates, is placed by the scheduling core as ONE whole
gang; with a required member missing, nothing is placed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cache.cluster import EventType
from cache.native_gang import native_podgroup_from_api
from cache.volcano import volcano_podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj
from tests.integrations import operators
from tests.integrations.operators import Created

EXAMPLES = Path(__file__).parents[2] / "deploy" / "examples" / "integrations"
ADDED = EventType.ADDED
PARSERS = {
    "scheduling.volcano.sh": volcano_podgroup_from_api,
    "scheduling.k8s.io": native_podgroup_from_api,
}

CONTROLLERS: dict[str, Callable[[dict[str, Any]], Created]] = {
    "pytorchjob.yaml": lambda obj: operators.training_operator(obj, "pytorchReplicaSpecs"),
    "mpijob.yaml": operators.mpi_operator,
    "jobset.yaml": operators.jobset_controller,
    "indexed-job.yaml": lambda obj: Created(
        operators.job_controller(obj, obj["metadata"]["name"], "default")
    ),
    "volcano-job.yaml": operators.volcano_controller,
}


def created(path: str) -> Created:
    [obj] = [doc for doc in yaml.safe_load_all((EXAMPLES / path).read_text()) if doc]
    return CONTROLLERS[path](obj)


def core_for(result: Created, skip: str = "") -> SchedulingCore:
    core = SchedulingCore(build_profile())
    for i in range(2):
        core.apply_node(ADDED, node_obj(f"gpu-{i}", gpus=8), 0)
    for api, obj in result.groups:
        if api == "scheduling.x-k8s.io":
            core.apply_podgroup(ADDED, obj, 0)
        else:
            core.apply_gang_group(PARSERS[api], ADDED, obj, 0)
    for pod in result.pods:
        if pod["metadata"]["name"] != skip:
            core.apply_pod(ADDED, pod, 0)
    return core


def test_every_example_has_its_controller() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(CONTROLLERS)


@pytest.mark.parametrize("path", sorted(CONTROLLERS))
def test_the_pods_the_controller_creates_are_placed_as_one_whole_gang(path: str) -> None:
    result = created(path)
    core = core_for(result)
    core.refresh(0)
    gangs = core.gangs
    assert len(gangs) == 1, sorted(gangs)
    [gang] = gangs.values()
    assert gang.problems == []
    assert gang.size_source in ("podgroup", "annotation")
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    placed = {p.pod_uid for p in attempt.result.placements}
    assert placed == {pod["metadata"]["uid"] for pod in result.pods}
    assert core.schedule_next(0) is None  # nothing left: the gang went whole


@pytest.mark.parametrize("path", sorted(CONTROLLERS))
def test_with_a_required_member_missing_nothing_is_placed(path: str) -> None:
    result = created(path)
    # The first pod is a role every example requires (master, launcher, driver, ps, rank 0).
    first = result.pods[0]["metadata"]["name"]
    if path == "volcano-job.yaml":
        # Volcano sizes the job by minAvailable (4 of 5): its only ps is what it cannot lack.
        first = next(p["metadata"]["name"] for p in result.pods if "-ps-" in p["metadata"]["name"])
    core = core_for(result, skip=first)
    core.refresh(0)
    [gang] = core.gangs.values()
    assert not gang.ready and gang.waiting_message
    assert core.schedule_next(0) is None
    assert list(core.cache.assumed()) == []
