"""Workload files, the pods of a task, and the synthetic workload generator."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from cache.pod import pod_from_api
from scheduler.sim.cluster_spec import bundled_text
from scheduler.sim.workload import (
    FRACTIONAL_SHARE,
    GPU_TYPE_SHARE,
    HELIOS_MEAN_GPUS,
    HELIOS_MEDIAN_SECONDS,
    PS_SHARE,
    GpuPool,
    Role,
    Task,
    WorkloadError,
    arrival_span,
    generate_workload,
    load_workload,
    offered_load,
    parse_workload,
    task_pods,
    workload_yaml,
)

WORKLOAD = """
tasks:
  - name: bert
    arrival: 120
    duration: 3600
    priority: 5
    min_member: 3
    roles:
      - {name: ps, replicas: 1, cpu: 8, memory: 32Gi}
      - {name: worker, replicas: 4, cpu: 500m, memory: 1Gi, gpus: 2, gpu_type: A100|V100}
  - name: notebook
    arrival: 0
    duration: 60.5
    roles:
      - {name: main, replicas: 1, cpu: 4, memory: 16Gi, gpu_milli: 300}
"""


def test_a_workload_file_becomes_tasks() -> None:
    bert, notebook = parse_workload(WORKLOAD)
    assert bert == Task(
        "bert",
        120.0,
        3600.0,
        (
            Role("ps", 1, 8000, 32 * 2**30),
            Role("worker", 4, 500, 2**30, gpus=2, gpu_types=("A100", "V100")),
        ),
        priority=5,
        min_member=3,
    )
    assert (bert.pods, bert.gang_min, bert.gpu_milli) == (5, 3, 8000)
    assert notebook.roles == (Role("main", 1, 4000, 16 * 2**30, gpu_milli=300),)
    assert (notebook.gang_min, notebook.priority, notebook.duration) == (1, 0, 60.5)


def test_a_bare_list_of_tasks_is_a_workload_too() -> None:
    text = (
        "- {name: a, arrival: 0, duration: 1, roles: [{name: w, replicas: 2, cpu: 1, memory: 1Gi}]}"
    )
    (task,) = parse_workload(text)
    assert (task.name, task.pods, task.gpu_milli) == ("a", 2, 0)


def test_the_bundled_example_parses(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(bundled_text("workload-example.yaml"))
    tasks = load_workload(path)
    assert len(tasks) == 7
    assert {task.name for task in tasks} >= {"ctr-ps", "vit-large", "elastic-bert"}
    assert any(role.gpu_milli for task in tasks for role in task.roles)
    assert any(role.name == "ps" and not role.gpus for task in tasks for role in task.roles)


def _one_task(**fields: object) -> str:
    task: dict[str, object] = {
        "name": "job",
        "arrival": 0,
        "duration": 10,
        "roles": "[{name: w, replicas: 2, cpu: 1, memory: 1Gi, gpus: 1}]",
    }
    task.update(fields)
    body = ", ".join(f"{key}: {value}" for key, value in task.items() if value is not None)
    return f"- {{{body}}}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: [", "w.yaml: not valid YAML at line"),
        ("tasks: 3", "expected a list of tasks"),
        ("[]", "the workload has no task"),
        ("{tasks: [], jobs: []}", "unknown top-level field 'jobs'"),
        (_one_task(duration=None), "task 'job': field 'duration' is missing"),
        (_one_task(duration=0), "task 'job': field 'duration' must be > 0"),
        (_one_task(duration="soon"), "task 'job': field 'duration' must be a number"),
        (_one_task(arrival=-1), "task 'job': field 'arrival' must be >= 0"),
        (_one_task(name="'bad name'"), "task #1: field 'name' must be"),
        (_one_task(durations=5), "task 'job': unknown field 'durations'"),
        (_one_task(priority=1.5), "task 'job': field 'priority' must be a whole number"),
        (_one_task(min_member=3), "task 'job': field 'min_member' is 3 but the task has 2 pods"),
        (_one_task(min_member=0), "field 'min_member' must be a whole number >= 1"),
        (_one_task(roles="[]"), "task 'job': field 'roles' must be a non-empty list"),
        (
            _one_task(roles="[{name: w, replicas: 1, cpu: lots, memory: 1Gi}]"),
            "task 'job', role 'w': field 'cpu' must be a positive Kubernetes quantity",
        ),
        (
            _one_task(roles="[{name: w, replicas: 1, cpu: 1}]"),
            "task 'job', role 'w': field 'memory' is missing",
        ),
        (
            _one_task(roles="[{name: w, replicas: 0, cpu: 1, memory: 1Gi}]"),
            "role 'w': field 'replicas' must be a whole number >= 1",
        ),
        (
            _one_task(roles="[{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpus: 1, gpu_milli: 5}]"),
            "role 'w': give either 'gpus' (whole GPUs) or 'gpu_milli'",
        ),
        (
            _one_task(roles="[{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpu_milli: 1000}]"),
            "role 'w': field 'gpu_milli' must be 1..999",
        ),
        (
            _one_task(roles="[{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpu_type: A100}]"),
            "role 'w': field 'gpu_type' needs 'gpus' or 'gpu_milli'",
        ),
        (
            _one_task(
                roles="[{name: w, replicas: 1, cpu: 1, memory: 1Gi, gpus: 1, gpu_type: '|'}]"
            ),
            "role 'w': field 'gpu_type' must be GPU models separated by '|'",
        ),
        (
            _one_task(
                roles="[{name: w, replicas: 1, cpu: 1, memory: 1Gi},"
                " {name: w, replicas: 1, cpu: 1, memory: 1Gi}]"
            ),
            "task 'job': role 'w' is repeated",
        ),
        (
            _one_task(roles="[{name: W, replicas: 1, cpu: 1, memory: 1Gi}]"),
            "a role's field 'name' must be",
        ),
        (
            _one_task(roles="[{name: w, replicas: 65, cpu: 1, memory: 1Gi}]"),
            "task 'job': 65 pods in all; a task has at most 64",
        ),
        (_one_task() + "\n" + _one_task(), "task 'job' (#2): name is repeated"),
    ],
)
def test_mistakes_are_named_with_task_and_field(text: str, message: str) -> None:
    with pytest.raises(WorkloadError) as caught:
        parse_workload(text, "w.yaml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("w.yaml: ")


def test_task_pods_carry_the_gang_and_its_requests() -> None:
    bert, notebook = parse_workload(WORKLOAD)
    objs = task_pods(bert)
    pods = [pod_from_api(obj) for obj in objs]
    assert [pod.name for pod in pods] == [
        "bert-ps-0",
        "bert-worker-0",
        "bert-worker-1",
        "bert-worker-2",
        "bert-worker-3",
    ]
    assert len({pod.uid for pod in pods}) == 5
    assert {pod.gang_key for pod in pods} == {"sim/bert"}
    assert {pod.min_member_text for pod in pods} == {"3"}
    assert {pod.priority for pod in pods} == {5}
    assert all(pod.scheduler_name == "gang-scheduler" and not pod.problems for pod in pods)
    ps, worker = pods[0], pods[1]
    assert (ps.gpu.count, ps.requests["cpu"], ps.required_affinity) == (0, 8000, None)
    assert (worker.gpu.count, worker.gpu.milli, worker.requests["cpu"]) == (2, 1000, 500)
    assert worker.required_affinity is not None
    (term,) = worker.required_affinity
    (requirement,) = term
    assert (requirement.key, requirement.operator) == ("nvidia.com/gpu.product", "In")
    assert set(requirement.values) == {"A100", "V100"}
    share = pod_from_api(task_pods(notebook)[0])
    assert (share.gpu.count, share.gpu.milli) == (1, 300)
    # Creation times keep arrival order (the queue serves older gangs first).
    assert share.created < ps.created
    assert ps.created - share.created == pytest.approx(120.0)


def test_generated_workloads_are_reproducible() -> None:
    pools = [GpuPool("A100", 128, 8), GpuPool("V100", 128, 4)]
    first = generate_workload(7, 300, 256, 0.9, pools=pools)
    assert first == generate_workload(7, 300, 256, 0.9, pools=pools)
    assert first != generate_workload(8, 300, 256, 0.9, pools=pools)
    assert [task.arrival for task in first] == sorted(task.arrival for task in first)
    assert len({task.name for task in first}) == 300


def test_a_generated_workload_can_be_saved_and_read_back() -> None:
    tasks = generate_workload(3, 200, 288, pools=[GpuPool("A100", 128, 8), GpuPool("T4", 32, 4)])
    assert parse_workload(workload_yaml(tasks)) == tasks


@pytest.fixture(scope="module")
def sample() -> list[Task]:
    pools = [GpuPool("A100", 128, 8), GpuPool("T4", 32, 4), GpuPool("V100", 128, 4)]
    return generate_workload(42, 2000, 288, 0.9, pools=pools)


def test_generated_tasks_are_schedulable_shapes(sample: list[Task]) -> None:
    for task in sample:
        assert 1 <= task.pods <= 64
        assert task.gpu_milli > 0
        assert task.duration >= 1
        for role in task.roles:
            assert role.gpus <= 8
            assert 0 <= role.gpu_milli < 1000
            if role.gpus == 8:
                assert "T4" not in role.gpu_types and "V100" not in role.gpu_types
    assert max(task.pods for task in sample) > 16  # the tail reaches the biggest bucket


def test_generated_sizes_follow_helios(sample: list[Task]) -> None:
    # Helios: median GPUs per job 1, mean 3.7 (our table: 60% of tasks on one GPU or less).
    gpus = [task.gpu_milli / 1000 for task in sample]
    assert statistics.median(gpus) <= 1
    assert sum(1 for g in gpus if g <= 1) / len(gpus) == pytest.approx(0.60, abs=0.04)
    assert statistics.mean(gpus) == pytest.approx(HELIOS_MEAN_GPUS, abs=0.7)


def test_generated_durations_follow_helios(sample: list[Task]) -> None:
    durations = [task.duration for task in sample]
    assert statistics.median(durations) == pytest.approx(HELIOS_MEDIAN_SECONDS, rel=0.2)
    # Heavy-tailed: the mean is many times the median (Helios: 32x; capped at 7 days).
    assert statistics.mean(durations) > 10 * statistics.median(durations)


def test_generated_shares_follow_the_pai_trace(sample: list[Task]) -> None:
    single = [task for task in sample if task.pods == 1 and task.gpu_milli <= 1000]
    shared = [task for task in single if task.gpu_milli < 1000]
    assert len(shared) / len(single) == pytest.approx(FRACTIONAL_SHARE, abs=0.05)
    # The most common share in the openb trace is 810 milli, then 470.
    common = statistics.mode(task.gpu_milli for task in shared)
    assert common == 810


def test_generated_parameter_servers_and_gpu_types(sample: list[Task]) -> None:
    multi = [task for task in sample if task.roles[-1].replicas > 1]
    with_ps = [task for task in multi if task.roles[0].name == "ps"]
    assert len(with_ps) / len(multi) == pytest.approx(PS_SHARE, abs=0.06)
    for task in with_ps:
        ps = task.roles[0]
        assert (ps.gpus, ps.gpu_milli) == (0, 0)
    pinned = [task for task in sample if task.roles[-1].gpu_types]
    assert len(pinned) / len(sample) == pytest.approx(GPU_TYPE_SHARE, abs=0.03)


def test_the_offered_load_is_the_requested_one(sample: list[Task]) -> None:
    last = sample[-1].arrival  # close to the end of the arrival window
    inside = sum(task.gpu_milli / 1000 * min(task.duration, last - task.arrival) for task in sample)
    assert inside / last == pytest.approx(0.9 * 288, rel=0.02)
    assert offered_load(sample, 288) == pytest.approx(0.9, rel=0.02)
    half = generate_workload(42, 2000, 288, 0.45)
    assert offered_load(half, 288) == pytest.approx(0.45, rel=0.02)
    # Too few tasks for a big cluster: the load asked for cannot be offered.
    few = generate_workload(42, 20, 6000, 0.9)
    offered = offered_load(few, 6000)
    assert offered is not None and offered < 0.1
    assert offered_load(few[:1], 6000) is None  # one arrival: no window


def test_arrival_span_falls_back_when_the_load_cannot_be_reached() -> None:
    # One 1-GPU task of 100 s cannot keep 10 GPUs busy: the window is 100 x 1 / 10.
    assert arrival_span([0.5], [1.0], [100.0], 10.0) == pytest.approx(10.0)
    # Tasks of 100 s at 0 and half-way: inside a window s >= 100 they run 100 + s/2
    # GPU-seconds, which is 1 GPU busy on average at s = 200.
    assert arrival_span([0.0, 0.5], [1.0, 1.0], [100.0, 100.0], 1.0) == pytest.approx(200.0)


def test_the_generator_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="tasks must be >= 1"):
        generate_workload(1, 0, 8)
    with pytest.raises(ValueError, match="no GPU"):
        generate_workload(1, 5, 0)
    with pytest.raises(ValueError, match="load must be a number > 0"):
        generate_workload(1, 5, 8, load=0)
    small = generate_workload(1, 300, 4)  # no task asks more GPUs than the cluster has
    assert max(task.gpu_milli for task in small) <= 4000
