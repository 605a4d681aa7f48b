"""ElasticQuota records and the usage ledger (cache/quota.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType, Placement
from cache.quota import GPU, QuotaLedger, as_resource_list, excess, quota_from_api
from tests.factories import node_obj, pod_obj


def quota_obj(
    namespace: str,
    max_: dict[str, Any] | None = None,
    min_: dict[str, Any] | None = None,
    name: str = "quota",
    created: str = "2026-01-01T00:00:00Z",
    version: str = "1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if max_ is not None:
        spec["max"] = max_
    if min_ is not None:
        spec["min"] = min_
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"{namespace}-{name}",
            "resourceVersion": version,
            "creationTimestamp": created,
        },
        "spec": spec,
    }


def test_whole_and_shared_gpus_are_one_dimension_in_milli() -> None:
    whole = quota_from_api(quota_obj("a", {"nvidia.com/gpu": 4, "cpu": "8", "memory": "1Gi"}))
    assert whole.max == {GPU: 4000, "cpu": 8000, "memory": 2**30} and not whole.problems
    # unitsPerGPU 100: one vgpu unit is 10 milli.
    shared = quota_from_api(quota_obj("a", {"nvidia.com/vgpu": 250}), share_milli=10)
    assert shared.max == {GPU: 2500}


def test_a_quota_naming_both_gpu_resources_enforces_the_smaller_and_says_so() -> None:
    quota = quota_from_api(quota_obj("a", {"nvidia.com/gpu": 4, "nvidia.com/vgpu": 1500}))
    assert quota.max == {GPU: 1500}
    assert any("both" in problem for problem in quota.problems)


def test_unreadable_and_unaccounted_resources_are_problems_not_limits() -> None:
    quota = quota_from_api(quota_obj("a", {"cpu": "lots", "pods": 3}, {"example.com/foo": 1}))
    assert quota.max == {} and quota.min == {}
    assert len(quota.problems) == 2
    clamped = quota_from_api(quota_obj("a", {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 5}))
    assert clamped.min == {GPU: 2000} and "above spec.max" in clamped.problems[0]
    broken = quota_from_api({"metadata": {"namespace": "a", "name": "q"}, "spec": {"max": ["x"]}})
    assert broken.max == {} and broken.problems


def test_excess_names_the_first_dimension_over_max() -> None:
    quota = quota_from_api(quota_obj("a", {"nvidia.com/gpu": 16, "cpu": 4}))
    over = excess(quota, {GPU: 12000}, {GPU: 8000})
    assert over is not None
    assert over.describe() == "exceeds max nvidia.com/gpu: 12 used + 8 asked > 16"
    assert excess(quota, {GPU: 12000}, {GPU: 4000}) is None
    # Usage above max (max lowered): an ask without that dimension is not refused.
    assert excess(quota, {GPU: 20000}, {"cpu": 1000}) is None
    half = excess(quota, {GPU: 15500}, {GPU: 1000})
    assert half is not None and "15.5 used + 1 asked" in half.describe()


def test_status_used_is_a_resource_list() -> None:
    assert as_resource_list({GPU: 3000, "cpu": 1500}) == {
        "nvidia.com/gpu": "3",
        "cpu": "1500m",
        "memory": "0",
    }
    assert as_resource_list({GPU: 2500})["nvidia.com/vgpu"] == "2500"


def test_the_oldest_quota_governs_its_namespace() -> None:
    cache = ClusterCache()
    book = cache.quotas
    book.apply("ADDED", quota_obj("a", {"cpu": 2}, name="new", created="2026-02-01T00:00:00Z"))
    book.apply("ADDED", quota_obj("a", {"cpu": 1}, name="old"))
    governing = book.governing("a")
    assert governing is not None and governing.name == "old"
    assert any("governs" in p for p in book.problems(book.quotas()["a/new"]))
    book.apply("DELETED", quota_obj("a", name="old"))
    governing = book.governing("a")
    assert governing is not None and governing.name == "new"
    # A stale event does not roll a quota back.
    book.apply("MODIFIED", quota_obj("a", {"cpu": 5}, name="new", version="7"))
    book.apply("MODIFIED", quota_obj("a", {"cpu": 9}, name="new", version="6"))
    assert book.quotas()["a/new"].max == {"cpu": 5000}


def test_usage_counts_bound_and_assumed_pods_per_namespace() -> None:
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n", gpus=8))
    cache.apply_pod(
        EventType.ADDED, pod_obj("run", namespace="a", gpus=2, node_name="n", phase="Running")
    )
    cache.apply_pod(EventType.ADDED, pod_obj("wait", namespace="a", vgpu=300, cpu="500m"))
    cache.apply_pod(EventType.ADDED, pod_obj("other", namespace="b", gpus=1, node_name="n"))
    used = cache.quotas.ledger.used
    assert used("a") == {GPU: 2000, "cpu": 1000, "memory": 2**30}
    wait = next(p for p in cache.pods() if p.name == "wait")
    cache.assume([Placement(wait.uid, "n", ((0, 300),))], 0)
    assert used("a") == {GPU: 2300, "cpu": 1500, "memory": 2 * 2**30}
    cache.forget(wait.uid)
    assert used("a")[GPU] == 2000
    finished = pod_obj("run", namespace="a", gpus=2, node_name="n", phase="Succeeded")
    cache.apply_pod(
        EventType.MODIFIED,
        {**finished, "metadata": {**finished["metadata"], "resourceVersion": "2"}},
    )
    assert used("a") == {}
    cache.apply_pod(EventType.DELETED, pod_obj("other", namespace="b"))
    assert used("b") == {}


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from("ab"), st.integers(0, 3000), st.booleans()),
        max_size=40,
    )
)
def test_the_ledger_is_the_sum_of_what_is_charged(ops: list[tuple[int, str, int, bool]]) -> None:
    ledger = QuotaLedger()
    model: dict[str, tuple[str, int]] = {}
    for pod, namespace, milli, charge in ops:
        uid = f"p{pod}"
        if charge:
            ledger.charge(uid, namespace, {GPU: milli} if milli else {})
            model[uid] = (namespace, milli)
        else:
            ledger.discharge(uid)
            model.pop(uid, None)
    for namespace in "ab":
        expected = sum(m for ns, m in model.values() if ns == namespace)
        assert ledger.used(namespace).get(GPU, 0) == expected
