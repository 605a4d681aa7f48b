"""Cluster files: node pools in YAML (racks, GPU models, link matrices) and the openb CSV."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from cache.node import node_from_api
from scheduler.sim.cluster_spec import (
    ZONE_LABEL,
    ClusterSpecError,
    default_cluster,
    gpu_pools,
    load_cluster,
    nvlink_links,
    parse_cluster,
    pcie_links,
)
from scheduler.sim.workload import GpuPool
from tests.factories import dgx_links, pcie_two_switch_links

CLUSTER = """
pools:
  - {name: dgx, count: 4, cpu: 128, memory: 1Ti, gpus: 8, gpu_model: A100, links: nvlink, racks: 2}
  - {name: box, count: 3, cpu: 64, memory: 256Gi, gpus: 4, gpu_model: V100, links: pcie}
  - {name: t4, count: 1, cpu: 32, memory: 64Gi, gpus: 2, gpu_model: T4, links: none,
     labels: {pool: inference}}
  - {name: cpu, count: 2, cpu: 96, memory: 384Gi, racks: 2}
"""


def test_pools_become_nodes_with_labels_and_capacity() -> None:
    nodes = [node_from_api(obj) for obj in parse_cluster(CLUSTER)]
    assert [node.name for node in nodes] == [
        "dgx-00",
        "dgx-01",
        "dgx-02",
        "dgx-03",
        "box-00",
        "box-01",
        "box-02",
        "t4-00",
        "cpu-00",
        "cpu-01",
    ]
    assert all(not node.problems for node in nodes)
    dgx = nodes[0]
    assert dgx.labels["nvidia.com/gpu.product"] == "A100"
    assert dgx.labels["kubernetes.io/hostname"] == "dgx-00"
    assert dgx.allocatable["cpu"] == 128_000
    assert dgx.allocatable["memory"] == 2**40
    assert dgx.allocatable["nvidia.com/gpu"] == 8
    assert [device.model for device in dgx.devices] == ["A100"] * 8
    cpu = nodes[-1]
    assert (len(cpu.devices), "nvidia.com/gpu" in cpu.allocatable) == (0, False)
    assert nodes[7].labels["pool"] == "inference"


def test_racks_are_contiguous_blocks_of_zone_labels() -> None:
    nodes = parse_cluster(CLUSTER)
    zones = [obj["metadata"]["labels"].get(ZONE_LABEL) for obj in nodes]
    assert zones[:4] == ["rack-0", "rack-0", "rack-1", "rack-1"]
    assert zones[4:8] == [None] * 4  # pools without `racks` carry no zone
    assert zones[8:] == ["rack-0", "rack-1"]


def test_link_matrices_give_the_pair_scores_of_real_machines() -> None:
    nodes = {obj["metadata"]["name"]: node_from_api(obj) for obj in parse_cluster(CLUSTER)}
    dgx = nodes["dgx-00"].pair_scores
    assert dgx is not None
    assert {dgx[i][j] for i in range(8) for j in range(8) if i != j} == {1200}  # NV12
    box = nodes["box-00"].pair_scores
    assert box is not None
    assert (box[0][1], box[2][3], box[0][2], box[1][3]) == (50, 50, 10, 10)  # PIX, SYS
    t4 = nodes["t4-00"]
    assert (t4.pair_scores, len(t4.devices)) == (None, 2)  # devices inferred, links unknown
    # The same matrices as the test factories' machine shapes.
    assert pcie_links(4) == pcie_two_switch_links()
    assert nvlink_links(8) == dgx_links(8)


def test_the_default_cluster_is_mixed_and_in_racks() -> None:
    objs = default_cluster()
    nodes = [node_from_api(obj) for obj in objs]
    assert len(nodes) == 64
    assert sum(len(node.devices) for node in nodes) == 288
    assert Counter(node.gpu_model for node in nodes) == Counter(
        {"A100": 16, "V100": 32, "T4": 8, "": 8}
    )
    assert {node.labels[ZONE_LABEL] for node in nodes} == {f"rack-{i}" for i in range(4)}
    assert any(node.pair_scores and node.pair_scores[0][1] == 1200 for node in nodes)
    assert any(node.pair_scores and node.pair_scores[0][1] == 50 for node in nodes)
    assert gpu_pools(objs) == [
        GpuPool("A100", 128, 8),
        GpuPool("T4", 32, 4),
        GpuPool("V100", 128, 4),
    ]


def test_an_openb_node_csv_is_a_cluster_too(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,2,T4\nn2,8000,1024,0,\n")
    nodes = load_cluster(path)
    assert [obj["metadata"]["name"] for obj in nodes] == ["n1", "n2"]
    assert gpu_pools(nodes) == [GpuPool("T4", 2, 2)]
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,many,65536,2,T4\n")
    with pytest.raises(ClusterSpecError, match="cpu_milli must be a whole number"):
        load_cluster(path)


def test_a_yaml_file_is_read_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    assert len(load_cluster(path)) == 10


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pools: [", "c.yaml: not valid YAML at line"),
        ("nodes: []", "expected a mapping with a list 'pools'"),
        ("pools: []", "the cluster has no pool"),
        ("{pools: [], racks: 2}", "unknown top-level field 'racks'"),
        ("pools: [{name: Big, count: 1, cpu: 1, memory: 1Gi}]", "pool #1: field 'name' must be"),
        ("pools: [{name: a, cpu: 1, memory: 1Gi}]", "pool 'a': field 'count' is missing"),
        ("pools: [{name: a, count: 0, cpu: 1, memory: 1Gi}]", "field 'count' must be a whole"),
        ("pools: [{name: a, count: 1, cpu: x, memory: 1Gi}]", "pool 'a': field 'cpu' must be"),
        ("pools: [{name: a, count: 1, cpu: 1}]", "pool 'a': field 'memory' is missing"),
        (
            "pools: [{name: a, count: 1, cpu: 1, memory: 1Gi, gpus: 2}]",
            "pool 'a': field 'gpu_model' is needed",
        ),
        (
            "pools: [{name: a, count: 1, cpu: 1, memory: 1Gi, gpus: 2, gpu_model: T4, links: x}]",
            "pool 'a': field 'links' must be one of nvlink, pcie, none",
        ),
        (
            "pools: [{name: a, count: 1, cpu: 1, memory: 1Gi, links: nvlink}]",
            "pool 'a': field 'links' needs 'gpus'",
        ),
        ("pools: [{name: a, count: 1, cpu: 1, memory: 1Gi, gpu: 2}]", "unknown field 'gpu'"),
        (
            "pools: [{name: a, count: 1, cpu: 1, memory: 1Gi}, {name: a, count: 1, cpu: 1, "
            "memory: 1Gi}]",
            "pool 'a' (#2): name is repeated",
        ),
    ],
)
def test_mistakes_are_named_with_pool_and_field(text: str, message: str) -> None:
    with pytest.raises(ClusterSpecError) as caught:
        parse_cluster(text, "c.yaml")
    assert message in str(caught.value)
