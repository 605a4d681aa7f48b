"""DRA devices in the topology scores, through the scheduling core: a node whose free
devices give a tight set ranks higher (gpu-topology), and a gang's DRA members keep to
one NVLink clique (network-topology)."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.dra.topology import NVLINK_CLIQUE_LABEL, PCIE_ROOT
from scheduler.planner.result import Plan
from tests.dra_builders import DRIVER, claim_obj, class_obj, device, exactly, slice_obj
from tests.factories import node_obj
from tests.scheduler.dra_cores import add_pods, claiming, devices, dra_core, feed

NVIDIA = "gpu.nvidia.com"


def _rooted(node: str, roots: list[str], driver: str = DRIVER) -> dict[str, Any]:
    return slice_obj(
        f"{node}-slice",
        [device(f"gpu-{i}", **{PCIE_ROOT: root}) for i, root in enumerate(roots)],
        node=node,
        driver=driver,
    )


def _held(node: str, *names: str) -> list[dict[str, Any]]:
    """Claims someone else allocated, holding these devices of the node."""
    return [
        claim_obj(
            f"held-{node}-{name}",
            [exactly()],
            namespace="other",
            allocation={
                "devices": {
                    "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": name}]
                }
            },
        )
        for name in names
    ]


def test_a_node_whose_free_devices_share_a_root_wins_over_one_whose_do_not() -> None:
    """Both nodes have two free devices. On node-a they sit on two PCIe roots, on
    node-b on one: the two-device claim goes to node-b."""
    core = dra_core("node-a", "node-b")
    roots = ["pci0000:00", "pci0000:80", "pci0000:00", "pci0000:80"]
    feed(
        core,
        _rooted("node-a", roots),
        _rooted("node-b", roots),
        class_obj(),
        *_held("node-a", "gpu-0", "gpu-3"),  # left: gpu-1 (80), gpu-2 (00)
        *_held("node-b", "gpu-1", "gpu-3"),  # left: gpu-0, gpu-2 (both 00)
        claim_obj("pair", [exactly(count=2)]),
    )
    add_pods(core, claiming("p", "pair", size=1))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    assert [p.node for p in plan.placements] == ["node-b"]
    assert devices(plan, "ns/pair") == ["gpu-0", "gpu-2"]


def test_a_gangs_dra_members_keep_to_one_nvlink_clique() -> None:
    """Three nodes of one NVIDIA GPU each; node-a and node-c in clique "x.1", node-b
    in "x.2". Two members: the second follows the first into its clique."""
    core = dra_core()
    for name, clique in (("node-a", "x.1"), ("node-b", "x.2"), ("node-c", "x.1")):
        core.apply_node(EventType.ADDED, node_obj(name, labels={NVLINK_CLIQUE_LABEL: clique}), 0.0)
    feed(
        core,
        *(_rooted(name, ["pci0000:00"], driver=NVIDIA) for name in ("node-a", "node-b", "node-c")),
        class_obj(NVIDIA, selectors=(f'device.driver == "{NVIDIA}"',)),
        *(claim_obj(f"gpu-{i}", [exactly(device_class=NVIDIA)]) for i in range(2)),
    )
    add_pods(core, *(claiming(f"w-{i}", f"gpu-{i}", size=2) for i in range(2)))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    nodes = {p.node for p in plan.placements}
    assert len(nodes) == 2 and "node-b" not in nodes, nodes


def test_nodes_without_topology_facts_are_judged_neutral() -> None:
    """Devices that publish no PCIe root, NUMA node or clique: the score stays out of
    the choice (the first node, as before)."""
    core = dra_core("node-a", "node-b")
    plain = [device(f"gpu-{i}") for i in range(2)]
    feed(
        core,
        slice_obj("a", plain, node="node-a"),
        slice_obj("b", plain, node="node-b"),
        class_obj(),
        claim_obj("pair", [exactly(count=2)]),
    )
    add_pods(core, claiming("p", "pair", size=1))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    assert devices(plan, "ns/pair") == ["gpu-0", "gpu-1"]
