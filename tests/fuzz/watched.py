"""Hostile objects of every kind the scheduler watches, in one table.

`HOSTILE_OBJECTS` maps each informer's kind name (scheduler/kube/informer.py,
`ResourceKind.name`) to a strategy of hostile objects of that kind: a well-formed
template with fields replaced by values a tenant, a controller or a broken proxy could
write (tests/fuzz/hostile.py). The fuzz suite feeds every entry to the core through the
informer's own apply and relist, and `test_every_watched_kind_is_fuzzed` fails when an
informer watches a kind this table lacks: a kind added later (the DRA objects:
ResourceSlice, ResourceClaim, DeviceClass) is fuzzed by adding its line here.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.dra_objects import allocation, claim_obj, device_class_obj, pod_reference, slice_obj
from tests.fuzz.hostile import (
    HOSTILE_GANGS,
    QUOTA_NAMESPACES,
    _corruptions,
    corrupted,
    hostile_node,
    hostile_pod,
    hostile_podgroup,
    hostile_quota,
)
from tests.integrations import workload_objects as workloads
from tests.volume_objects import csinode_obj, pv_obj, pvc_obj, storage_class_obj

HOSTILE_CLAIMS = ["hc0", "hc1"]
HOSTILE_VOLUMES = ["hv0", "hv1"]
HOSTILE_CLASSES = ["local", "hostile-class"]
HOSTILE_CSINODES = ["good-node-0", "bad0"]  # one a node the well-formed gang may use

META = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "resourceVersion"),
    ("metadata", "creationTimestamp"),
    ("metadata", "deletionTimestamp"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
]


def _hostile(
    templates: st.SearchStrategy[dict[str, Any]], fields: list[tuple[Any, ...]]
) -> st.SearchStrategy[Any]:
    """A template of the kind with up to three of `fields` (and of the metadata)
    replaced by hostile values."""

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        template = draw(templates)
        template.setdefault("metadata", {})["resourceVersion"] = str(draw(st.integers(1, 5)))
        return corrupted(template, draw(_corruptions([*META, *fields])))

    return build()


def _device_class(name: str, extended: str) -> dict[str, Any]:
    """A class, standing for an extended resource or not (`cpu`: one the API server
    refuses, read anyway)."""
    obj = device_class_obj(name)
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if extended:
        obj["spec"]["extendedResourceName"] = extended
    return obj


def _allocated_claim(name: str, reserved: bool) -> dict[str, Any]:
    """A claim of the well-formed gang's namespace, allocated on a node the gang may
    use, reserved for a pod or not."""
    claim = claim_obj(name, namespace="default")
    claim["status"] = {"allocation": allocation("good-node-0")}
    if reserved:
        claim["status"]["reservedFor"] = [pod_reference()]
    return claim


def _namespace(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"team": name}},
        "status": {"phase": "Active"},
    }


def _volcano(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-volcano-{name}"},
        "spec": {
            "minMember": 2,
            "minTaskMember": {"worker": 2},
            "minResources": {"nvidia.com/gpu": "2"},
            "queue": "default",
            "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
            "subGroupPolicy": [{"name": "workers", "subGroupSize": 2}],
        },
    }


def _native(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-native-{name}"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
        },
    }


def _kai(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-kai-{name}"},
        "spec": {
            "minMember": 2,
            "queue": "default-queue",
            "topologyConstraint": {
                "topology": "cluster-topology",
                "requiredTopologyLevel": "topology.kubernetes.io/zone",
                "preferredTopologyLevel": "kubernetes.io/hostname",
            },
            "subGroups": [{"name": "workers", "minMember": 2}],
        },
    }


GANG_NAMES = st.sampled_from(HOSTILE_GANGS)

# The one table: informer kind name -> hostile objects of that kind.
HOSTILE_OBJECTS: dict[str, st.SearchStrategy[Any]] = {
    "pods": hostile_pod(),
    "nodes": hostile_node(),
    "podgroups": hostile_podgroup(),
    "namespaces": _hostile(
        st.sampled_from(QUOTA_NAMESPACES).map(_namespace),
        [("metadata", "labels", "team"), ("status",), ("spec",)],
    ),
    "elasticquotas": hostile_quota(),
    "volcano-podgroups": _hostile(
        GANG_NAMES.map(_volcano),
        [
            ("spec",),
            ("spec", "minMember"),
            ("spec", "minTaskMember"),
            ("spec", "minTaskMember", "worker"),
            ("spec", "minResources"),
            ("spec", "queue"),
            ("status",),
            # Topology (cache/volcano.py): any mode, tier, tier name, subgroup topology.
            ("spec", "networkTopology"),
            ("spec", "networkTopology", "mode"),
            ("spec", "networkTopology", "highestTierAllowed"),
            ("spec", "networkTopology", "highestTierName"),
            ("spec", "subGroupPolicy"),
            ("spec", "subGroupPolicy", 0, "networkTopology"),
        ],
    ),
    "native-podgroups": _hostile(
        GANG_NAMES.map(_native),
        [
            ("spec",),
            ("spec", "schedulingPolicy"),
            ("spec", "schedulingPolicy", "gang"),
            ("spec", "schedulingPolicy", "gang", "minCount"),
            ("spec", "schedulingConstraints"),
            ("spec", "schedulingConstraints", "topology"),
            ("spec", "schedulingConstraints", "topology", 0, "key"),
        ],
    ),
    "kai-podgroups": _hostile(
        GANG_NAMES.map(_kai),
        [
            ("spec",),
            ("spec", "minMember"),
            ("spec", "queue"),
            ("status",),
            # Topology (cache/kai.py): any level, Topology name, subgroup constraint.
            ("spec", "topologyConstraint"),
            ("spec", "topologyConstraint", "requiredTopologyLevel"),
            ("spec", "topologyConstraint", "preferredTopologyLevel"),
            ("spec", "topologyConstraint", "topology"),
            ("spec", "subGroups"),
            ("spec", "subGroups", 0, "topologyConstraint"),
        ],
    ),
    # The owners of inferred gangs, named as the gangs their hostile pods may infer.
    "jobs": _hostile(
        GANG_NAMES.map(lambda name: workloads.indexed_job(name, 2, 2, "default")),
        [("spec",), ("spec", "parallelism"), ("spec", "completions"), ("spec", "completionMode")],
    ),
    "jobsets": _hostile(
        GANG_NAMES.map(lambda name: workloads.jobset(name, [("w", 2, 1)], "default")),
        [
            ("spec",),
            ("spec", "replicatedJobs"),
            ("spec", "replicatedJobs", 0),
            ("spec", "replicatedJobs", 0, "replicas"),
            ("spec", "replicatedJobs", 0, "template", "spec"),
            ("spec", "replicatedJobs", 0, "template", "spec", "parallelism"),
        ],
    ),
    "pytorchjobs": _hostile(
        GANG_NAMES.map(lambda name: workloads.pytorchjob(name, 1, 1, "default")),
        [
            ("spec",),
            ("spec", "pytorchReplicaSpecs"),
            ("spec", "pytorchReplicaSpecs", "Worker"),
            ("spec", "pytorchReplicaSpecs", "Worker", "replicas"),
            ("spec", "runPolicy"),
        ],
    ),
    "mpijobs": _hostile(
        GANG_NAMES.map(lambda name: workloads.mpijob(name, 1, "default")),
        [("spec",), ("spec", "mpiReplicaSpecs"), ("spec", "mpiReplicaSpecs", "Worker", "replicas")],
    ),
    "rayclusters": _hostile(
        GANG_NAMES.map(
            lambda name: workloads.raycluster(
                name, [{"replicas": 1, "numOfHosts": 1}], True, "default"
            )
        ),
        [
            ("spec",),
            ("spec", "enableInTreeAutoscaling"),
            ("spec", "workerGroupSpecs"),
            ("spec", "workerGroupSpecs", 0),
            ("spec", "workerGroupSpecs", 0, "minReplicas"),
            ("spec", "workerGroupSpecs", 0, "numOfHosts"),
        ],
    ),
    "persistentvolumeclaims": _hostile(
        st.builds(
            pvc_obj,
            st.sampled_from(HOSTILE_CLAIMS),
            storage_class=st.sampled_from([None, *HOSTILE_CLASSES]),
            volume_name=st.sampled_from(["", *HOSTILE_VOLUMES]),
        ),
        [
            ("spec",),
            ("spec", "accessModes"),
            ("spec", "resources", "requests", "storage"),
            ("spec", "storageClassName"),
            ("spec", "volumeName"),
            ("spec", "volumeMode"),
            ("spec", "selector"),
            ("metadata", "annotations", "volume.kubernetes.io/selected-node"),
            ("status",),
        ],
    ),
    "persistentvolumes": _hostile(
        st.builds(
            pv_obj,
            st.sampled_from(HOSTILE_VOLUMES),
            node=st.sampled_from(["", "good-node-0", "bad0"]),
            claim=st.sampled_from([None, ("default", "hc0")]),
        ),
        [
            ("spec",),
            ("spec", "capacity", "storage"),
            ("spec", "accessModes"),
            ("spec", "storageClassName"),
            ("spec", "nodeAffinity"),
            ("spec", "nodeAffinity", "required", "nodeSelectorTerms"),
            ("spec", "claimRef"),
            ("spec", "claimRef", "name"),
            ("spec", "csi"),
            ("status",),
        ],
    ),
    "storageclasses": _hostile(
        st.builds(
            storage_class_obj,
            st.sampled_from(HOSTILE_CLASSES),
            zones=st.sampled_from([(), ("z1",)]),
        ),
        [
            ("provisioner",),
            ("volumeBindingMode",),
            ("allowedTopologies",),
            ("allowedTopologies", 0, "matchLabelExpressions"),
            ("parameters",),
        ],
    ),
    "resourceslices": _hostile(
        st.builds(slice_obj, st.sampled_from(["good-node-0", "bad0"]), st.integers(1, 3)),
        [
            ("spec",),
            ("spec", "driver"),
            ("spec", "pool"),
            ("spec", "pool", "generation"),
            ("spec", "pool", "resourceSliceCount"),
            ("spec", "nodeName"),
            ("spec", "devices"),
            ("spec", "devices", 0, "name"),
            ("spec", "devices", 0, "attributes"),
            ("spec", "devices", 0, "attributes", "model"),
            # Where the device sits, as the topology scores read it (cache/dra/topology.py).
            ("spec", "devices", 0, "attributes", "resource.kubernetes.io/pcieRoot"),
            ("spec", "devices", 0, "attributes", "resource.kubernetes.io/pcieRoot", "string"),
            ("spec", "devices", 0, "attributes", "numaNode", "int"),
            ("spec", "devices", 0, "capacity", "memory", "value"),
        ],
    ),
    "deviceclasses": _hostile(
        st.builds(
            _device_class,
            st.sampled_from(["gpu.example.com", "other.example.com"]),
            st.sampled_from(["", "nvidia.com/gpu", "example.com/accel", "cpu"]),
        ),
        [
            ("spec",),
            ("spec", "selectors"),
            ("spec", "selectors", 0, "cel"),
            ("spec", "selectors", 0, "cel", "expression"),
            ("spec", "config"),
            # DRA-backed extended resources: which resource, and which class wins it.
            ("spec", "extendedResourceName"),
            ("metadata", "creationTimestamp"),
        ],
    ),
    "resourceclaims": _hostile(
        st.one_of(
            st.builds(claim_obj, st.sampled_from(HOSTILE_CLAIMS), st.just("default")),
            st.builds(_allocated_claim, st.sampled_from(HOSTILE_CLAIMS), st.booleans()),
        ),
        [
            ("spec",),
            ("spec", "devices", "requests"),
            ("spec", "devices", "requests", 0, "name"),
            ("spec", "devices", "requests", 0, "exactly", "count"),
            ("spec", "devices", "requests", 0, "exactly", "deviceClassName"),
            ("status",),
            ("status", "allocation"),
            ("status", "allocation", "devices", "results"),
            ("status", "allocation", "nodeSelector"),
            ("status", "reservedFor"),
        ],
    ),
    "csinodes": _hostile(
        st.builds(
            csinode_obj,
            st.sampled_from(HOSTILE_CSINODES),
            st.just({"pd.csi.storage.gke.io": 2}),
        ),
        [
            ("spec",),
            ("spec", "drivers"),
            ("spec", "drivers", 0, "name"),
            ("spec", "drivers", 0, "allocatable"),
            ("spec", "drivers", 0, "allocatable", "count"),
        ],
    ),
}
