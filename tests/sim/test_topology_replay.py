"""Required topology in the time-based simulator (issue 30): racks and NVLink cliques in
cluster files, a task's `topology` carried to the core in a PodGroup `spec.topology`,
the generator's required gangs, the domain choice, and the report's figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cache.cluster import Placement
from cache.podgroup import podgroup_from_api
from cache.topology_requirement import TopologyRequirement
from policies.profile import build_profile
from scheduler.cli.main import main
from scheduler.cycle.core import SchedulingCore
from scheduler.sim.cluster_spec import (
    CLIQUE_LABEL,
    RACK_LABEL,
    ClusterSpecError,
    parse_cluster,
    topology_levels,
)
from scheduler.sim.report import TimelineRun, timeline_json, timeline_tables
from scheduler.sim.timeline import TimelineResult, replay_timeline
from scheduler.sim.workload import (
    TopologyLevel,
    WorkloadError,
    generate_workload,
    parse_workload,
    task_podgroup,
    task_pods,
    workload_yaml,
)

RACKS = """
pools:
  - {name: n, count: 10, cpu: 64, memory: 256Gi, gpus: 4, gpu_model: A100,
     links: nvlink, rack_nodes: 4, clique_nodes: 2}
"""


def _labels(nodes: list[dict]) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}


# --- cluster files -----------------------------------------------------------------------
def test_rack_and_clique_labels_cut_the_pool_into_consecutive_blocks() -> None:
    labels = _labels(parse_cluster(RACKS))
    racks = [labels[f"n-{i:02d}"][RACK_LABEL] for i in range(10)]
    cliques = [labels[f"n-{i:02d}"][CLIQUE_LABEL] for i in range(10)]
    assert racks == ["n-r0"] * 4 + ["n-r1"] * 4 + ["n-r2"] * 2
    assert cliques == [
        "n-r0-c0", "n-r0-c0", "n-r0-c1", "n-r0-c1",
        "n-r1-c0", "n-r1-c0", "n-r1-c1", "n-r1-c1",
        "n-r2-c0", "n-r2-c0",
    ]  # fmt: skip
    assert topology_levels(parse_cluster(RACKS)) == [
        TopologyLevel(CLIQUE_LABEL, 8),
        TopologyLevel(RACK_LABEL, 16),
    ]


def test_a_clique_larger_than_its_rack_is_refused() -> None:
    text = RACKS.replace("clique_nodes: 2", "clique_nodes: 5")
    with pytest.raises(ClusterSpecError, match="'clique_nodes' \\(5\\) must not exceed"):
        parse_cluster(text)


def test_the_bundled_default_cluster_has_no_rack_or_clique_level() -> None:
    from scheduler.sim.cluster_spec import default_cluster

    assert topology_levels(default_cluster()) == []


# --- workload files ------------------------------------------------------------------------
TASK = """
- name: big
  arrival: 0
  duration: 60
  topology: {requiredKey: topology.kubernetes.io/rack, sliceSize: 2,
             sliceKey: nvidia.com/gpu.clique}
  roles: [{name: w, replicas: 4, cpu: 8, memory: 32Gi, gpus: 4}]
"""


def test_a_tasks_topology_reaches_the_core_as_a_podgroup_a_user_writes() -> None:
    (task,) = parse_workload(TASK)
    assert task.topology is not None
    assert task.topology.required_key == RACK_LABEL
    assert (task.topology.slice_size, task.topology.slice_key) == (2, CLIQUE_LABEL)
    group = task_podgroup(task)
    assert group is not None
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["spec"] == {
        "minMember": 4,
        "topology": {
            "requiredKey": RACK_LABEL,
            "sliceSize": 2,
            "sliceKey": CLIQUE_LABEL,
        },
    }
    # The core's own PodGroup reader reads the same requirement back.
    info = podgroup_from_api(group)
    assert info.topology is not None
    assert info.topology.required_key == RACK_LABEL
    # Its pods name the PodGroup and carry no min-member annotation of their own.
    pods = task_pods(task)
    assert all(p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "big" for p in pods)
    assert all(not p["metadata"]["annotations"] for p in pods)
    assert parse_workload(workload_yaml([task])) == [task]


@pytest.mark.parametrize(
    ("topology", "refusal"),
    [
        ("{sliceSize: 0, sliceKey: nvidia.com/gpu.clique}", "sliceSize"),
        ("{requiredKey: 'bad key!'}", "requiredKey"),
        ("{requiredKey: topology.kubernetes.io/rack, sliceSize: 9, sliceKey: x}", "slice"),
        ("{requiredKey: topology.kubernetes.io/rack, color: red}", "color"),
        ("[topology.kubernetes.io/rack]", "must be an object"),
    ],
)
def test_a_topology_the_scheduler_would_refuse_is_refused_naming_the_task(
    topology: str, refusal: str
) -> None:
    text = f"""
- name: t
  arrival: 0
  duration: 1
  topology: {topology}
  roles: [{{name: w, replicas: 2, cpu: 1, memory: 1Gi, gpus: 1}}]
"""
    with pytest.raises(WorkloadError, match=f"task 't'.*{refusal}"):
        parse_workload(text)


# --- the generator ---------------------------------------------------------------------------
LEVELS = (TopologyLevel(CLIQUE_LABEL, 16), TopologyLevel(RACK_LABEL, 64))


def test_required_gangs_change_nothing_else_of_the_workload() -> None:
    plain = generate_workload(7, 400, 448, 0.9)
    required = generate_workload(7, 400, 448, 0.9, required_share=1 / 3, levels=LEVELS)
    assert [(t.name, t.arrival, t.duration, t.roles) for t in plain] == [
        (t.name, t.arrival, t.duration, t.roles) for t in required
    ]
    assert all(t.topology is None for t in plain)
    gangs = [t for t in required if t.pods > 1 and t.gpu_milli]
    chosen = [t for t in required if t.topology is not None]
    assert all(t in gangs for t in chosen)  # a one-pod task never requires a domain
    assert 0.2 < len(chosen) / len(gangs) < 0.47
    for task in chosen:
        assert task.topology is not None
        largest = {level.key: level.largest_gpus for level in LEVELS}
        assert task.gpu_milli <= 1000 * largest[task.topology.required_key or ""]
    keys = {t.topology.required_key for t in chosen if t.topology}
    assert keys == {RACK_LABEL, CLIQUE_LABEL}
    # No share asked: the same tasks as before this option existed.
    assert generate_workload(7, 400, 448, 0.9, required_share=0.0, levels=LEVELS) == plain


# --- the replay --------------------------------------------------------------------------------
def _recording_core() -> tuple[SchedulingCore, list[Placement]]:
    core = SchedulingCore(build_profile("binpack"), explain_failures=False)
    placed: list[Placement] = []
    bound = core.bound

    def record(placement: Placement) -> None:
        placed.append(placement)
        bound(placement)

    core.bound = record  # type: ignore[method-assign]
    return core, placed


@pytest.mark.parametrize("choice", ["smallest", "first-fit", "best-fit"])
def test_required_gangs_never_span_domains_on_a_generated_cluster(choice: str) -> None:
    nodes = parse_cluster(RACKS)
    labels = _labels(nodes)
    tasks = generate_workload(
        3, 150, 40, 1.2, required_share=1.0, levels=topology_levels(nodes), max_pods=8
    )
    required = {t.name: t.topology for t in tasks if t.topology is not None}
    assert len(required) >= 10
    core, placed = _recording_core()
    result = replay_timeline(nodes, tasks, core, domain_choice=choice)  # type: ignore[arg-type]
    assert result.partial_gangs == 0
    domains: dict[str, set[str]] = {}
    for placement in placed:
        task = placement.pod_uid.split("-")[1] + "-" + placement.pod_uid.split("-")[2]
        topology = required.get(task)
        if topology is not None and topology.required_key is not None:
            value = labels[placement.node][topology.required_key]
            domains.setdefault(task, set()).add(value)
    started = [o for o in result.outcomes if o.task.topology is not None and o.start is not None]
    assert len(started) >= 10
    assert all(len(values) == 1 for values in domains.values())
    for outcome in started:
        assert {outcome.domain} == domains[outcome.task.name]
    assert core.planner.domain_choice == choice


# A rack of one 4-GPU node (s-r0) and one of two (b-r0). A asks 4 GPUs in one rack; by
# name b-r0 comes first, so first fit puts A there and C (8 GPUs in one rack, at t=1)
# finds 4 free in each rack, 8 in all: stranded until A leaves at t=100. The smallest
# rack that holds A is s-r0, which leaves b-r0 whole for C. D only stretches the arrival
# window to t=200.
TINY_CLUSTER = """
pools:
  - {name: s, count: 1, cpu: 64, memory: 1Ti, gpus: 4, gpu_model: A100, links: none, rack_nodes: 1}
  - {name: b, count: 2, cpu: 64, memory: 1Ti, gpus: 4, gpu_model: A100, links: none, rack_nodes: 2}
"""
TINY_WORKLOAD = """
- {name: a, arrival: 0, duration: 100, topology: {requiredKey: topology.kubernetes.io/rack},
   roles: [{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpus: 4}]}
- {name: c, arrival: 1, duration: 10, topology: {requiredKey: topology.kubernetes.io/rack},
   roles: [{name: w, replicas: 2, cpu: 1, memory: 1Gi, gpus: 4}]}
- {name: d, arrival: 200, duration: 1,
   roles: [{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpus: 1}]}
"""


def _tiny(choice: str, api: str = "crd") -> TimelineResult:
    workload = TINY_WORKLOAD
    if api == "native":
        workload = workload.replace("topology:", "podgroup: native, topology:")
    return replay_timeline(
        parse_cluster(TINY_CLUSTER),
        parse_workload(workload),
        build_profile("binpack"),
        domain_choice=choice,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("api", ["crd", "native"])
def test_the_figures_of_a_hand_checked_case_first_fit(api: str) -> None:
    result = _tiny("first-fit", api)
    a, c, _ = result.outcomes
    assert (a.domain, a.start) == ("b-r0", 0.0)
    assert (c.domain, c.start) == ("b-r0", 100.0)
    # Stranded: 1 gang from t=1 to t=100 over the window [0, 200].
    assert result.stranded_mean == pytest.approx(99 / 200)
    # Rack-required waits 0 (a) and 99 (c): p95 interpolates 0 + 0.95 x 99.
    waits = result.required_waits()[RACK_LABEL]
    assert waits is not None and waits.p95 == pytest.approx(94.05)
    # GPU-seconds in the window: a 4 x 100, c 8 x 10; 12 GPUs x 200 s.
    assert result.utilization_mean == pytest.approx(480 / 2400)
    entry = timeline_json([TimelineRun("binpack", None, result)])["results"][0]
    assert entry["domain_choice"] == "first-fit"
    assert entry["topology"] == {
        "stranded_mean": 0.495,
        "required_tasks": {RACK_LABEL: 2},
        "required_wait_s": {RACK_LABEL: {"p50": 49.5, "p95": 94.05, "p99": 98.01}},
    }


def test_the_figures_of_a_hand_checked_case_smallest() -> None:
    result = _tiny("smallest")
    a, c, _ = result.outcomes
    assert (a.domain, c.domain, c.start) == ("s-r0", "b-r0", 1.0)
    assert result.stranded_mean == 0.0
    waits = result.required_waits()[RACK_LABEL]
    assert waits is not None and waits.p95 == 0.0
    # a 4 x 100 and c 8 x 10 again, only earlier.
    assert result.utilization_mean == pytest.approx(480 / 2400)


def test_a_native_podgroup_carries_the_required_level_as_kubernetes_writes_it() -> None:
    (task,) = parse_workload(
        TASK.replace("sliceSize: 2,\n             sliceKey: nvidia.com/gpu.clique", "").replace(
            "topology:", "podgroup: native\n  topology:"
        )
    )
    group = task_podgroup(task)
    assert group is not None and group["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert group["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": RACK_LABEL}]},
    }
    pods = task_pods(task)
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "big"} for p in pods)
    assert all("scheduling.x-k8s.io/pod-group" not in p["metadata"]["labels"] for p in pods)
    with pytest.raises(WorkloadError, match="one required level only"):
        parse_workload(TASK.replace("topology:", "podgroup: native\n  topology:"))


def test_a_run_without_topology_reports_as_before() -> None:
    result = replay_timeline(
        parse_cluster(TINY_CLUSTER),
        [t for t in parse_workload(TINY_WORKLOAD) if t.topology is None],
        build_profile("binpack"),
    )
    entry = timeline_json([TimelineRun("binpack", None, result)])["results"][0]
    assert "topology" not in entry and "domain_choice" not in entry
    assert len(timeline_tables([TimelineRun("binpack", None, result)], "t")) == 2


# --- the command ----------------------------------------------------------------------------------
def test_simulate_compares_domain_choices_on_a_generated_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "racks.yaml"
    cluster.write_text(RACKS)
    args = ["simulate", "--generate", "60", "--cluster", str(cluster), "--policy", "binpack"]
    args += ["--require-topology", "0.5", "--domain-choice", "smallest"]
    code = main([*args, "--domain-choice", "first-fit", "--seed", "5", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    results = json.loads(out)["results"]
    assert [r["domain_choice"] for r in results] == ["smallest", "first-fit"]
    assert all(r["partial_gangs"] == 0 and "topology" in r for r in results)
    assert results[0]["topology"]["required_tasks"] == results[1]["topology"]["required_tasks"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--require-topology", "0.3"], "needs a cluster with racks or NVLink cliques"),
        (["--require-topology", "1.5"], "a fraction in \\[0, 1\\]"),
        (["--domain-choice", "random"], "unknown domain choice 'random'"),
    ],
)
def test_bad_topology_options_are_refused(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "--generate", "10", *extra])
    _, err = capsys.readouterr()
    assert code == 2
    assert re.search(message, err)


def test_topology_options_belong_to_the_time_based_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--domain-choice", "smallest"]) == 2
    assert "for the time-based replay" in capsys.readouterr().err


def test_a_generated_requirement_is_a_topology_requirement() -> None:
    (task,) = [
        t
        for t in generate_workload(1, 60, 40, 1.0, required_share=1.0, levels=LEVELS)
        if t.topology is not None
    ][:1]
    assert isinstance(task.topology, TopologyRequirement)
    assert parse_workload(workload_yaml([task])) == [task]
