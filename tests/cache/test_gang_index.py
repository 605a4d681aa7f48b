"""The cache's index of pods by gang (cache/gang_index.py) is always what grouping every
pod afresh gives, whatever the events: arrivals, updates that move a pod to another
gang or bind it, deletions, a relist, a dropped record, a bind confirmed in place."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from tests.factories import node_obj, pod_obj

NAMES = [f"p{i}" for i in range(6)]

event = st.one_of(
    st.tuples(
        st.sampled_from(["added", "modified"]),
        st.sampled_from(NAMES),
        st.sampled_from([None, "a", "b"]),  # gang label (None: a gang of one)
        st.sampled_from(["", "n0"]),  # bound or not
        st.sampled_from(["default", "team"]),
    ),
    st.tuples(st.just("deleted"), st.sampled_from(NAMES)),
    st.tuples(st.just("drop"), st.sampled_from(NAMES)),
    st.tuples(st.just("confirm"), st.sampled_from(NAMES)),
    st.tuples(st.just("relist"), st.sets(st.sampled_from(NAMES))),
)


def grouped_afresh(cache: ClusterCache) -> dict[str, dict[str, int]]:
    fresh: dict[str, dict[str, int]] = {}
    for pod in cache.pods():
        fresh.setdefault(pod.gang_key, {})[pod.uid] = id(pod)
    return fresh


@settings(max_examples=200, deadline=None)
@given(st.lists(event, max_size=25))
def test_the_index_is_a_fresh_grouping_after_any_events(events: list[tuple[object, ...]]) -> None:
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n0", gpus=8))
    objs: dict[str, dict[str, object]] = {}  # the latest object of each pod, by name
    version = 1
    for step in events:
        version += 1
        kind, name = step[0], str(step[1]) if not isinstance(step[1], set) else ""
        uid = f"uid-{name}"
        if kind in ("added", "modified"):
            _, _, gang, node, namespace = step
            obj = pod_obj(
                name,
                namespace=str(namespace),
                gang=gang if isinstance(gang, str) else None,
                min_member=2 if gang else None,
                node_name=str(node),
                phase="Running" if node else "Pending",
                uid=uid,
                resource_version=str(version),
            )
            objs[name] = obj
            cache.apply_pod(EventType.ADDED if kind == "added" else EventType.MODIFIED, obj)
        elif kind == "deleted":
            meta = {"uid": uid, "name": name, "resourceVersion": str(version)}
            cache.apply_pod(EventType.DELETED, {"metadata": meta})
            objs.pop(name, None)
        elif kind == "drop":
            cache.drop_pod(uid)
            objs.pop(name, None)
        elif kind == "confirm":
            cache.confirm(uid, "n0")
        else:
            assert isinstance(step[1], set)
            cache.replace_pods([objs[n] for n in sorted(step[1]) if n in objs])
            objs = {n: o for n, o in objs.items() if n in step[1]}
        indexed = {
            key: {uid: id(pod) for uid, pod in members.items()}
            for key, members in cache.pods_by_gang().items()
        }
        assert indexed == grouped_afresh(cache)  # same gangs, same uids, same records
