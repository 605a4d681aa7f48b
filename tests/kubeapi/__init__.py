"""A Kubernetes API server emulator for the scheduler's integration tests and benchmarks.

    async with KubeApiEmulator() as api:
        api.put_node(node_obj("n1", gpus=8))
        async with await api_client(api.base_url) as http:
            ...

See emulator.py for what is served and what is a guess.
"""

from tests.kubeapi.emulator import BindRecord, KubeApiEmulator, RequestRecord
from tests.kubeapi.kubeconfig import api_client, kubeconfig_dict, write_kubeconfig
from tests.kubeapi.resources import (
    CSI_NODES,
    DEVICE_CLASSES,
    ELASTIC_QUOTAS,
    EVENTS,
    EVENTS_V1,
    KAI_PODGROUPS,
    LEASES,
    NAMESPACES,
    NATIVE_PODGROUPS,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODGROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SECRETS,
    STORAGE_CLASSES,
    VOLCANO_PODGROUPS,
    WORKLOAD_TYPES,
)

__all__ = [
    "CSI_NODES",
    "DEVICE_CLASSES",
    "ELASTIC_QUOTAS",
    "EVENTS",
    "EVENTS_V1",
    "KAI_PODGROUPS",
    "LEASES",
    "NAMESPACES",
    "NATIVE_PODGROUPS",
    "NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "PODGROUPS",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "SECRETS",
    "STORAGE_CLASSES",
    "VOLCANO_PODGROUPS",
    "WORKLOAD_TYPES",
    "BindRecord",
    "KubeApiEmulator",
    "RequestRecord",
    "api_client",
    "kubeconfig_dict",
    "write_kubeconfig",
]
