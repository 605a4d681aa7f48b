"""Hostile objects for the fuzz suite: well-formed templates with fields replaced by
values a tenant (or a broken node agent) could write, and a few the API server would
refuse but a buggy proxy or a future field change could still deliver."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from cache import kueue_topology as kueue
from cache.dra.topology import NVLINK_CLIQUE_LABEL
from cache.gpu import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL, TOPOLOGY_ANNOTATION
from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION
from cache.pod import GANG_LABEL, MIN_MEMBER_ANNOTATION, VOLCANO_GANG_ANNOTATION
from tests.factories import node_obj, pod_obj, podgroup_obj

# Names the hostile objects use: a small pool, so that MODIFIED and DELETED events hit
# objects that exist; disjoint from the well-formed ones (`WELL_FORMED_*`).
HOSTILE_PODS = [f"h{i}" for i in range(6)]
HOSTILE_NODES = [f"bad{i}" for i in range(3)]
HOSTILE_GANGS = ["hg0", "hg1"]


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def beyond_int_text(sign: int) -> int:
    """An integer of 5,000 digits: int() of its text and repr() of it both raise. Made
    in a function so that the strategy's own repr never holds it."""
    return sign * 10**5000


NUMBERS_AS_TEXT = st.sampled_from(
    [
        "9" * 5000,
        "0" * 5000 + "7",
        "1e999999",
        "1E31",
        "-1",
        "-0",
        "+5",
        "²",
        "٣",
        "1.5",
        "0x10",
        "1Ei",
        "8Ei",
        "9223372036854775808",
        "2147483648",
        "NV99999",
        "NV" + "9" * 5000,
        "",
        " 3 ",
        "\x00",
        "🙂",
        "3",
        "1000",
        "500m",
    ]
)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31, 2**63, -1, 0]),
    st.sampled_from([1, -1]).map(beyond_int_text),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, NUMBERS_AS_TEXT, st.text(max_size=8))
VALUES = st.one_of(
    st.recursive(
        SCALARS,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=6,
    ),
    # Deeper than Python's recursion limit: str() or repr() of it raises.
    st.integers(min_value=1100, max_value=1600).map(_nested),
    st.sampled_from(['{"version": 1, "devices": ' + "[" * 3000 + "]" * 3000 + "}"]),
    # Kubelet reports naming the hostile pods' uids: shared, out of range, too many.
    st.sampled_from(
        [
            '{"uid-default-h0":[0],"uid-default-h1":[0]}',
            '{"uid-default-h0":[0,1,2,3,4,5,6,7]}',
            '{"uid-default-h0":[4096]}',
            '{"uid-default-h0":[-1]}',
            '{"uid-default-h0":[true]}',
            '{"uid-default-h0":[0,0]}',
            '{"uid-default-well-formed-gang-0":[3]}',
        ]
    ),
)

# Kueue's TAS annotations as its webhook writes them and as it refuses them: members of
# one gang may draw different ones (a disagreement), a slice larger than the gang...
HOST = "kubernetes.io/hostname"
KUEUE_TOPOLOGIES = st.sampled_from(
    [
        {},
        {kueue.REQUIRED_ANNOTATION: "topology.kubernetes.io/zone"},
        {kueue.REQUIRED_ANNOTATION: "kubernetes.io/hostname"},
        {kueue.PREFERRED_ANNOTATION: "topology.kubernetes.io/zone"},
        {
            kueue.SLICE_REQUIRED_ANNOTATION: "kubernetes.io/hostname",
            kueue.SLICE_SIZE_ANNOTATION: "1",
        },
        {
            kueue.SLICE_REQUIRED_ANNOTATION: "kubernetes.io/hostname",
            kueue.SLICE_SIZE_ANNOTATION: "3",
        },
        {kueue.SLICE_CONSTRAINTS_ANNOTATION: '[{"topology": "kubernetes.io/hostname", "size": 2}]'},
        {kueue.REQUIRED_ANNOTATION: "x" * 70_000},
        {kueue.SLICE_CONSTRAINTS_ANNOTATION: "[" * 3000 + "]" * 3000},
        {kueue.UNCONSTRAINED_ANNOTATION: "true"},
    ]
)
POD_FIELDS: list[tuple[Any, ...]] = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "resourceVersion"),
    ("metadata", "creationTimestamp"),
    ("metadata", "deletionTimestamp"),
    ("metadata", "labels"),
    ("metadata", "labels", GANG_LABEL),
    ("metadata", "annotations"),
    ("metadata", "annotations", MIN_MEMBER_ANNOTATION),
    ("metadata", "annotations", VOLCANO_GANG_ANNOTATION),
    ("metadata", "annotations", "gang-scheduler.io/gpu-devices"),
    # Kueue's TAS annotations (cache/kueue_topology.py), any value.
    *(("metadata", "annotations", key) for key in kueue.TOPOLOGY_ANNOTATIONS),
    ("spec",),
    ("spec", "priority"),
    ("spec", "schedulerName"),
    ("spec", "nodeName"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "tolerations"),
    ("spec", "overhead"),
    ("spec", "initContainers"),
    ("spec", "containers"),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "requests", "cpu"),
    ("spec", "containers", 0, "resources", "requests", "memory"),
    ("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"),
    ("spec", "containers", 0, "resources", "requests", "nvidia.com/vgpu"),
    # DRA-backed extended resources (a class may name them; docs/dra.md).
    ("spec", "containers", 0, "resources", "requests", "example.com/accel"),
    ("spec", "containers", 0, "resources", "requests", "deviceclass.resource.kubernetes.io/x"),
    ("spec", "containers", 0, "resources", "limits"),
    ("status",),
    ("status", "phase"),
]
NODE_FIELDS: list[tuple[Any, ...]] = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "resourceVersion"),
    ("metadata", "labels"),
    ("metadata", "labels", COUNT_LABEL),
    ("metadata", "labels", MEMORY_LABEL),
    ("metadata", "labels", PRODUCT_LABEL),
    ("metadata", "labels", NVLINK_CLIQUE_LABEL),  # read for DRA devices' NVLink domain
    ("metadata", "annotations"),
    ("metadata", "annotations", TOPOLOGY_ANNOTATION),
    # The node agent's report of what the kubelet gave each pod (cache/kubelet_devices.py).
    ("metadata", "annotations", KUBELET_DEVICES_ANNOTATION),
    ("spec",),
    ("spec", "taints"),
    ("spec", "unschedulable"),
    ("status",),
    ("status", "allocatable"),
    ("status", "allocatable", "cpu"),
    ("status", "allocatable", "memory"),
    ("status", "allocatable", "pods"),
    ("status", "allocatable", "nvidia.com/gpu"),
    ("status", "allocatable", "nvidia.com/vgpu"),
]
PODGROUP_FIELDS: list[tuple[Any, ...]] = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "resourceVersion"),
    ("metadata", "creationTimestamp"),
    ("spec",),
    ("spec", "minMember"),
    ("spec", "scheduleTimeoutSeconds"),
]


def put(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set `path` in `obj` to `value`, creating mappings on the way; a step through a
    value that is not a container replaces it."""
    *parents, last = path
    for position, step in enumerate(parents):
        if isinstance(obj, list) and not isinstance(step, int):
            return  # a list where a mapping was: the corruption before this one won
        child = obj[step] if _has(obj, step) else None
        if not isinstance(child, (dict, list)):
            following = [*parents, last][position + 1]
            child = [{}] if isinstance(following, int) else {}
            if isinstance(obj, list) and step >= len(obj):
                return
            obj[step] = child
        obj = child
    if isinstance(obj, list):
        if isinstance(last, int) and last < len(obj):
            obj[last] = value
    else:
        obj[last] = value


def _has(obj: Any, step: Any) -> bool:
    if isinstance(obj, list):
        return isinstance(step, int) and step < len(obj)
    return isinstance(obj, dict) and step in obj


def corrupted(template: dict[str, Any], fields: list[tuple[tuple[Any, ...], Any]]) -> Any:
    obj = copy.deepcopy(template)
    for path, value in fields:
        put(obj, path, value)
    return obj


def _corruptions(paths: list[tuple[Any, ...]]) -> st.SearchStrategy[list[tuple[Any, Any]]]:
    return st.lists(st.tuples(st.sampled_from(paths), VALUES), min_size=0, max_size=3)


@st.composite
def hostile_pod(draw: st.DrawFn) -> Any:
    name = draw(st.sampled_from(HOSTILE_PODS))
    gang = draw(st.sampled_from([None, *HOSTILE_GANGS]))
    template = pod_obj(
        name,
        gang=gang,
        min_member=draw(st.sampled_from([None, 2, "9" * 5000])),
        gpus=draw(st.sampled_from([0, 1, 2])),
        node_name=draw(st.sampled_from(["", *HOSTILE_NODES])),
        resource_version=str(draw(st.integers(1, 5))),
        annotations=draw(KUEUE_TOPOLOGIES),
    )
    return corrupted(template, draw(_corruptions(POD_FIELDS)))


@st.composite
def hostile_node(draw: st.DrawFn) -> Any:
    name = draw(st.sampled_from(HOSTILE_NODES))
    template = node_obj(
        name,
        gpus=draw(st.sampled_from([0, 1, 4])),
        resource_version=str(draw(st.integers(1, 5))),
    )
    return corrupted(template, draw(_corruptions(NODE_FIELDS)))


@st.composite
def hostile_podgroup(draw: st.DrawFn) -> Any:
    template = podgroup_obj(draw(st.sampled_from(HOSTILE_GANGS)), 2)
    template["metadata"]["resourceVersion"] = str(draw(st.integers(1, 5)))
    return corrupted(template, draw(_corruptions(PODGROUP_FIELDS)))


# Not a mapping at all, as a broken stream could deliver.
NOT_OBJECTS = st.sampled_from([None, [], "pod", 7, [{"metadata": {"name": "x"}}]])


# ElasticQuotas (docs/quotas.md): a tenant allowed to write its namespace's quota, or a
# broken controller, can write any min and max. Namespaces: the well-formed gang's own
# ("default") and two the hostile pods may be moved into.
QUOTA_NAMESPACES = ["default", "team-a", "team-b"]
QUOTA_FIELDS: list[tuple[Any, ...]] = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "resourceVersion"),
    ("metadata", "creationTimestamp"),
    ("metadata", "annotations"),
    ("metadata", "annotations", "gang-scheduler.io/quota-weight"),
    ("spec",),
    ("spec", "min"),
    ("spec", "max"),
    ("spec", "min", "nvidia.com/gpu"),
    ("spec", "min", "nvidia.com/vgpu"),
    ("spec", "min", "cpu"),
    ("spec", "max", "nvidia.com/gpu"),
    ("spec", "max", "memory"),
]
QUOTA_AMOUNTS = st.one_of(
    st.sampled_from([0, 1, 2, 4, 8, 10**6, "1e18", "8Ei", "-1", "0.5", "1000m"]), NUMBERS
)


@st.composite
def hostile_quota(draw: st.DrawFn) -> Any:
    namespace = draw(st.sampled_from(QUOTA_NAMESPACES))
    spec: dict[str, Any] = {}
    for part in draw(st.sets(st.sampled_from(["min", "max"]))):
        spec[part] = {"nvidia.com/gpu": draw(QUOTA_AMOUNTS)}
    template = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "namespace": namespace,
            "name": draw(st.sampled_from(["quota", "second"])),
            "uid": f"{namespace}-quota",
            "resourceVersion": str(draw(st.integers(1, 5))),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
    }
    return corrupted(template, draw(_corruptions(QUOTA_FIELDS)))


@st.composite
def hostile_tenant_pod(draw: st.DrawFn) -> Any:
    """A hostile pod moved into one of the quota namespaces, at some priority (so that
    reclaim and priority preemption both have preemptors and victims)."""
    pod = draw(hostile_pod())
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if isinstance(meta, dict) and meta.get("namespace") == "default":
        namespace = draw(st.sampled_from(QUOTA_NAMESPACES))
        meta["namespace"] = namespace
        if isinstance(meta.get("uid"), str) and isinstance(meta.get("name"), str):
            meta["uid"] = f"uid-{namespace}-{meta['name']}"  # one uid, one namespace
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if isinstance(spec, dict) and spec.get("priority") == 0:
        spec["priority"] = draw(st.sampled_from([0, 10, 100]))
    return pod


@st.composite
def tenant_gang(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A well-formed gang of a tenant (so that gangs contend: quotas borrow and reclaim,
    priorities preempt, a large gang waits long enough for the guard)."""
    namespace = draw(st.sampled_from(QUOTA_NAMESPACES))
    name = draw(st.sampled_from(["tg0", "tg1", "tg2"]))
    size = draw(st.integers(1, 3))
    gpus = draw(st.integers(1, 4))
    priority = draw(st.sampled_from([0, 10, 100]))
    return [
        pod_obj(
            f"{name}-{i}",
            namespace=namespace,
            gang=name,
            min_member=size,
            gpus=gpus,
            priority=priority,
            resource_version=str(draw(st.integers(1, 5))),
        )
        for i in range(size)
    ]


@st.composite
def tenant_quota(draw: st.DrawFn) -> dict[str, Any]:
    """A readable ElasticQuota with small amounts (the hostile ones are mostly not
    enforced at all)."""
    namespace = draw(st.sampled_from(QUOTA_NAMESPACES))
    spec: dict[str, Any] = {}
    for part in draw(st.sets(st.sampled_from(["min", "max"]), min_size=1)):
        spec[part] = {"nvidia.com/gpu": draw(st.integers(0, 10))}
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "namespace": namespace,
            "name": "quota",
            "uid": f"{namespace}-quota",
            "resourceVersion": str(draw(st.integers(1, 5))),
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
    }
