"""Equal values of pod records are held once (cache/shared_values.py, issue 31's memory
goal): the pods of one workload share their labels, requests, tolerations and quota
usage; sharing never changes what a record reads; the table never outgrows the values
records hold."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.gang_index import GangIndex
from cache.pod import pod_from_api
from cache.shared_values import SharedValues, shared_mapping
from tests.factories import node_obj


def _replica(index: int, app: str = "web") -> dict[str, Any]:
    """A running replica of a Deployment bound by another scheduler."""
    return {
        "metadata": {
            "name": f"{app}-{index}",
            "namespace": "team-a",
            "uid": f"{app}-uid-{index}",
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c5"},
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeName": f"node-{index % 2}",
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
        },
        "status": {"phase": "Running"},
    }


def test_replicas_of_one_workload_hold_one_copy_of_what_they_share() -> None:
    # Each pod is decoded on its own (its own dicts and strings), as from the API.
    first, second = (pod_from_api(_replica(index)) for index in (1, 2))
    assert first.labels is second.labels
    assert first.requests is second.requests
    assert first.tolerations is second.tolerations
    assert first.node_selector is second.node_selector
    assert first.namespace is second.namespace
    assert first.scheduler_name is second.scheduler_name
    assert first.phase is second.phase
    assert first.name != second.name and first.uid != second.uid


def test_quota_usage_of_replicas_is_held_once() -> None:
    cache = ClusterCache()
    for name in ("node-0", "node-1"):
        cache.apply_node(EventType.ADDED, node_obj(name))
    for index in (1, 2, 3):
        cache.apply_pod(EventType.ADDED, _replica(index))
    kept = cache.quotas.ledger._pods  # what the ledger holds per pod
    assert len({id(usage) for _, usage in kept.values()}) == 1


def test_a_different_value_is_not_shared() -> None:
    web = pod_from_api(_replica(1, "web"))
    api = pod_from_api(_replica(2, "api"))
    assert web.labels == {"app": "web", "pod-template-hash": "7d9f8b6c5"}
    assert api.labels == {"app": "api", "pod-template-hash": "7d9f8b6c5"}
    assert web.requests is api.requests  # those are equal


@given(
    st.lists(
        st.dictionaries(st.sampled_from("abc"), st.sampled_from(["x", "y"]), max_size=3),
        max_size=30,
    )
)
def test_sharing_returns_an_equal_mapping(values: list[dict[str, str]]) -> None:
    table = SharedValues(min_sweep=4)
    for value in values:
        held = table.share(value, hash(tuple(value.items())))
        assert held == value and type(held) is type(value)


def test_a_hash_collision_shares_nothing() -> None:
    table = SharedValues()
    first, second = {"a": "1"}, {"b": "2"}
    assert table.share(first, 7) is first
    assert table.share(second, 7) is second  # another value under the same hash
    assert table.share(dict(first), 7) is first


def test_values_no_record_holds_are_swept_as_the_table_grows() -> None:
    table = SharedValues(min_sweep=8)
    for index in range(1000):  # a stream of distinct values, each dropped at once
        value = {"controller-uid": str(index)}
        table.share(value, hash(tuple(value.items())))
        del value
    gc.collect()
    assert len(table) <= 16
    held = [{"job": str(index)} for index in range(40)]  # held by their owner: kept
    for value in held:
        table.share(value, hash(tuple(value.items())))
    for index in range(100):
        value = {"other": str(index)}
        table.share(value, hash(tuple(value.items())))
    assert all(table.share(dict(value), hash(tuple(value.items()))) is value for value in held)


def test_unhashable_values_are_kept_as_they_are() -> None:
    odd: dict[str, Any] = {"a": ["not", "hashable"]}
    assert shared_mapping(odd) is odd


def test_the_process_wide_table_is_bounded_by_what_is_held() -> None:
    for index in range(20_000):
        pod_from_api(_replica(index, app=f"job-{index}"))  # every label set distinct
    gc.collect()
    from cache import shared_values

    assert shared_values.table_size() < 20_000


def test_gang_index_of_single_pods_reads_as_a_mapping() -> None:
    index = GangIndex()
    alone = pod_from_api(_replica(1))
    index.put(alone, None)
    members = index.gangs()[alone.gang_key]
    assert dict(members) == {alone.uid: alone} and len(members) == 1
    assert alone.uid in members and "other" not in members
    updated = pod_from_api({**_replica(1), "status": {"phase": "Succeeded"}})
    index.put(updated, alone)
    assert dict(index.gangs()[alone.gang_key]) == {alone.uid: updated}
    index.remove(updated)
    assert alone.gang_key not in index.gangs()


def test_gang_index_grows_from_one_member_to_many_and_back() -> None:
    index = GangIndex()
    label = {"scheduling.x-k8s.io/pod-group": "g"}
    members = []
    for n in (1, 2, 3):
        obj = _replica(n)
        obj["metadata"]["labels"] = label
        members.append(pod_from_api(obj))
    for pod in members:
        index.put(pod, None)
    key = members[0].gang_key
    assert dict(index.gangs()[key]) == {pod.uid: pod for pod in members}
    for pod in members[:2]:
        index.remove(pod)
    assert dict(index.gangs()[key]) == {members[2].uid: members[2]}
    index.remove(members[2])
    assert key not in index.gangs()
