"""ElasticQuota max enforced gang-wide through the scheduling core (scheduler/sharing/quotas.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache import resources as res
from cache.cluster import EventType
from cache.quota import GPU, usage_of
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan, Unschedulable
from scheduler.process.metrics import SchedulerMetrics
from tests.cache.test_quota import quota_obj
from tests.factories import gang_pods, pod_obj
from tests.scheduler.cores import core_on_nodes

ADDED = EventType.ADDED


def members(
    name: str, count: int, gpus: int, namespace: str = "ns", min_member: int | None = None
) -> list[dict[str, Any]]:
    return gang_pods(
        name,
        count,
        min_member=min_member,
        namespace=namespace,
        gpus=gpus,
        cpu="100m",
        memory="1Mi",
    )


def core_with(nodes: int, gpus: int) -> SchedulingCore:
    return core_on_nodes(nodes, gpus)


def run(core: SchedulingCore, now: float = 0) -> list[Plan | Unschedulable]:
    results: list[Plan | Unschedulable] = []
    while (attempt := core.schedule_next(now)) is not None:
        results.append(attempt.result)
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)
    return results


def test_a_gang_that_would_take_its_namespace_over_max_is_refused_with_the_numbers() -> None:
    core = core_with(4, 8)
    core.apply_elasticquota(ADDED, quota_obj("ns", {"nvidia.com/gpu": 16}), 0)
    for i in range(3):  # 12 GPUs already used in ns, by pods bound by anyone
        core.apply_pod(ADDED, pod_obj(f"old-{i}", namespace="ns", gpus=4, node_name="n0"), 0)
    for pod in members("x", 2, 4):
        core.apply_pod(ADDED, pod, 0)
    (result,) = run(core)
    assert isinstance(result, Unschedulable)
    assert (
        result.message == "gang ns/x: quota ns exceeds max nvidia.com/gpu: 12 used + 8 asked > 16"
    )
    assert set(result.reasons.values()) == {result.message}
    # The limit raised: the quota event wakes the gang, which is placed.
    core.apply_elasticquota(
        EventType.MODIFIED, quota_obj("ns", {"nvidia.com/gpu": 20}, version="2"), 100
    )
    (placed,) = run(core, 100)
    assert isinstance(placed, Plan) and len(placed.placements) == 2


def test_members_beyond_min_member_are_left_out_to_stay_within_max() -> None:
    core = core_with(2, 8)
    core.apply_elasticquota(ADDED, quota_obj("ns", {"nvidia.com/gpu": 3}), 0)
    for pod in members("x", 5, 1, min_member=2):
        core.apply_pod(ADDED, pod, 0)
    result, *later = run(core)
    assert isinstance(result, Plan) and len(result.placements) == 3
    assert len(result.left_out) == 2
    assert all("0 used + 5 asked > 3" in m for m in result.left_out.values())
    # The members left out wait, told why; nothing more is placed.
    assert later and all(isinstance(r, Unschedulable) for r in later)
    assert later[0].message.endswith("3 used + 2 asked > 3")


def test_fractional_shares_count_as_gpu_and_other_namespaces_are_not_limited() -> None:
    core = core_with(1, 2)
    core.apply_elasticquota(ADDED, quota_obj("ns", {"nvidia.com/gpu": 1}), 0)
    for i in range(3):
        core.apply_pod(ADDED, pod_obj(f"nb-{i}", namespace="ns", vgpu=400), 0)
    core.apply_pod(ADDED, pod_obj("free", namespace="other", vgpu=900), 0)
    results = run(core)
    placed = [r for r in results if isinstance(r, Plan)]
    refused = [r for r in results if isinstance(r, Unschedulable)]
    assert len(placed) == 3 and len(refused) == 1
    assert refused[0].message.endswith(
        "quota ns exceeds max nvidia.com/gpu: 0.8 used + 0.4 asked > 1"
    )


def _used(core: SchedulingCore, namespace: str) -> dict[str, int]:
    """Usage recomputed from the pods, apart from the cache's ledger."""
    charged = [
        pod
        for pod in core.cache.pods()
        if pod.namespace == namespace and (pod.consumes_resources or core.cache.is_assumed(pod.uid))
    ]
    return res.total_of(usage_of(pod.requests, pod.gpu) for pod in charged)


gangs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),  # namespace
        st.integers(1, 4),  # members
        st.integers(0, 3),  # extra members beyond minMember
        st.integers(0, 4),  # whole GPUs per member (0: a fractional share)
        st.integers(100, 900),  # the share, for fractional members
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    gangs,
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 24)),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 40)),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 16)),
    st.data(),
)
def test_a_quota_never_exceeds_max(
    specs: list[tuple[str, int, int, int, int]],
    gpu_max: dict[str, int],
    cpu_max: dict[str, int],
    gpu_min: dict[str, int],
    data: st.DataObject,
) -> None:
    """With borrowing in play too (random mins): max holds whatever is borrowed."""
    core = core_with(4, 8)
    for namespace in {*gpu_max, *cpu_max, *gpu_min}:
        limit: dict[str, Any] = {}
        if namespace in gpu_max:
            limit["nvidia.com/gpu"] = gpu_max[namespace]
        if namespace in cpu_max:
            limit["cpu"] = f"{cpu_max[namespace] * 100}m"
        floor = {"nvidia.com/gpu": gpu_min[namespace]} if namespace in gpu_min else None
        core.apply_elasticquota(ADDED, quota_obj(namespace, limit, floor), 0)
    now = 0.0
    for index, (namespace, size, extra, gpus, share) in enumerate(specs):
        for i in range(size + extra):
            pod = pod_obj(
                f"g{index}-{i}",
                namespace=namespace,
                gang=f"g{index}",
                min_member=size,
                gpus=gpus,
                vgpu=0 if gpus else share,
                cpu="100m",
                memory="1Mi",
            )
            core.apply_pod(ADDED, pod, now)
        if data.draw(st.booleans()):
            # Some gangs are scheduled before the next arrives; some finish.
            run(core, now)
            now += 1000.0
    run(core, now)
    for namespace in "abc":
        used = _used(core, namespace)
        assert used == dict(core.cache.quotas.ledger.used(namespace))
        if namespace in gpu_max:
            assert used.get(GPU, 0) <= gpu_max[namespace] * 1000
        if namespace in cpu_max:
            assert used.get(res.CPU, 0) <= cpu_max[namespace] * 100


def test_a_gang_within_its_min_is_placed_before_a_borrowing_gang_of_higher_priority() -> None:
    core = core_with(1, 8)
    core.apply_elasticquota(ADDED, quota_obj("ns", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 2}), 0)
    core.apply_elasticquota(
        ADDED, quota_obj("idle", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 6}), 0
    )
    big = members("big", 2, 2)
    for pod in big:
        pod["spec"]["priority"] = 100
        core.apply_pod(ADDED, pod, 0)
    for pod in members("small", 2, 1):
        core.apply_pod(ADDED, pod, 0)
    first = core.schedule_next(0)
    assert first is not None and first.gang.key == "ns/small"
    assert isinstance(first.result, Plan)
    for placement in first.result.placements:
        core.bound(placement)
    second = core.schedule_next(0)
    # big borrows 4 beyond min from idle's 6: within the pool, alone, so it is placed.
    assert second is not None and second.gang.key == "ns/big"
    assert isinstance(second.result, Plan)


def test_a_borrowing_gang_the_idle_guarantees_cannot_cover_is_refused_whole() -> None:
    core = core_with(2, 8)
    core.apply_elasticquota(
        ADDED, quota_obj("ns", {"nvidia.com/gpu": 16}, {"nvidia.com/gpu": 2}), 0
    )
    core.apply_elasticquota(
        ADDED, quota_obj("idle", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 3}), 0
    )
    for pod in members("x", 3, 2):
        core.apply_pod(ADDED, pod, 0)
    (result,) = run(core)
    assert isinstance(result, Unschedulable)
    assert result.message == (
        "gang ns/x: quota ns would borrow 4 nvidia.com/gpu beyond min, only 3 idle in other quotas"
    )


def test_quota_metrics_are_cluster_totals_without_a_namespace() -> None:
    core = core_with(1, 8)
    core.apply_elasticquota(ADDED, quota_obj("ns", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 2}), 0)
    core.apply_elasticquota(ADDED, quota_obj("idle", {"cpu": 4}, {"nvidia.com/gpu": 6}), 0)
    for i in range(3):
        core.apply_pod(ADDED, pod_obj(f"run-{i}", namespace="ns", gpus=1, node_name="n0"), 0)
    for pod in members("wait", 2, 4):
        core.apply_pod(ADDED, pod, 0)
    core.refresh(0)
    metrics = SchedulerMetrics()
    metrics.observe_core(core)

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert value("gang_scheduler_quotas") == 2
    assert value("gang_scheduler_quota_amount", type="used", resource="gpu_milli") == 3000
    assert value("gang_scheduler_quota_amount", type="min", resource="gpu_milli") == 8000
    assert value("gang_scheduler_quota_amount", type="max", resource="gpu_milli") == 8000
    assert value("gang_scheduler_quota_amount", type="borrowed", resource="gpu_milli") == 1000
    assert value("gang_scheduler_quota_amount", type="max", resource="cpu_milli") == 4000
    assert value("gang_scheduler_quota_pending_gangs", state="borrowing") == 1
    assert value("gang_scheduler_quota_pending_gangs", state="guaranteed") == 0
    exposed = metrics.exposition().decode()
    assert "ns" not in {
        part.split("=")[1].strip('"')
        for line in exposed.splitlines()
        if line.startswith("gang_scheduler_quota") and "{" in line
        for part in line[line.index("{") + 1 : line.index("}")].split(",")
    }
