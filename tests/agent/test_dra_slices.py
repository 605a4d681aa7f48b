"""The node agent's ResourceSlices (DRA mode): what they say of each recorded machine,
that the API emulator (validating as 1.36 does) stores them, and how the pool follows
the discovery through the real client: generation, resourceSliceCount, updates,
deletions, withdrawal."""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.resources import MILLI_PER_GPU
from scheduler.agent.discovery import MIB, DeviceReport, Discovery, discover
from scheduler.agent.dra_publisher import KubeSliceApi, SlicePublisher, pcie_roots
from scheduler.agent.dra_slices import (
    DRIVER,
    PARTITION_TAINT,
    UNHEALTHY_TAINT,
    counter_set_name,
    nvlink_domains,
    slice_name,
    slice_specs,
)
from scheduler.agent.nvml import MigProfile, RemappedRows
from scheduler.agent.pcie import PCI_BUS_ID_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE, pcie_root
from scheduler.agent.publisher import AgentOptions, print_resource_slices, serve
from scheduler.kube.client import ApiError, KubeClient, create_client
from tests.agent import (
    DGX_A100,
    H100_BOX,
    MACHINES,
    PCIE_BOX,
    TWO_SOCKET_BOX,
    FakeMachine,
    FakeNvml,
    with_gpu,
)
from tests.factories import node_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.kubeapi.dra.slices import validate as validate_slice
from tests.kubeapi.resources import RESOURCE_SLICES

NODE = "gpu-node-1"


def fake_sysfs(root: Path, machine: FakeMachine, root_of: dict[int, str]) -> Path:
    """/sys/bus/pci/devices/<bdf> links into /sys/devices/<root>/<bridge>/<bdf>, as
    Linux lays them out."""
    devices = discover(FakeNvml(machine)).devices
    for index, target_root in root_of.items():
        bdf = devices[index].pci_bus_id
        target = root / "devices" / target_root / "0000:00:01.0" / bdf
        target.mkdir(parents=True)
        link = root / "bus" / "pci" / "devices" / bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(target, link.parent), link)
    return root


def devices_of(specs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in specs for d in s.get("devices", [])}


# --- what the slices say -----------------------------------------------------------------------
def test_a_gpu_without_mig_is_one_shareable_device_with_its_attributes(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path, PCIE_BOX, {0: "pci0000:17", 1: "pci0000:17", 2: "pci0000:85"})
    discovery = discover(FakeNvml(PCIE_BOX))
    roots = pcie_roots(discovery, sysfs)
    specs = slice_specs(discovery, NODE, pcie_roots=roots)
    assert len(specs) == 4  # one slice per GPU, no counters (no MIG on a V100)
    for spec in specs:
        assert spec["driver"] == DRIVER and spec["nodeName"] == NODE
        assert spec["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 4}
        assert "sharedCounters" not in spec
    gpu = devices_of(specs)["gpu-2"]
    attributes = gpu["attributes"]
    assert attributes["uuid"] == {"string": PCIE_BOX.gpus[2].uuid}
    assert attributes["productName"] == {"string": "Tesla V100-PCIE-32GB"}
    assert attributes["numaNode"] == {"int": 1}
    assert attributes[PCI_BUS_ID_ATTRIBUTE] == {"string": "0000:88:00.0"}
    assert attributes[PCIE_ROOT_ATTRIBUTE] == {"string": "pci0000:85"}
    assert "nvlinkDomain" not in attributes  # no NVLink on this box
    assert PCIE_ROOT_ATTRIBUTE not in devices_of(specs)["gpu-3"]["attributes"]  # sysfs silent
    assert gpu["allowMultipleAllocations"] is True
    assert gpu["capacity"]["milli"] == {
        "value": str(MILLI_PER_GPU),
        "requestPolicy": {
            "default": str(MILLI_PER_GPU),
            "validRange": {"min": "1", "max": str(MILLI_PER_GPU), "step": "1"},
        },
    }
    assert gpu["capacity"]["memory"]["value"] == str(32510 * MIB)
    assert gpu["capacity"]["memory"]["requestPolicy"]["default"] == "0"
    assert "taints" not in gpu and "consumesCounters" not in gpu


def test_nvlink_domains_join_gpus_linked_directly_or_through_switches() -> None:
    assert nvlink_domains(discover(FakeNvml(TWO_SOCKET_BOX))) == {2: 2, 3: 2, 6: 6, 7: 6}
    assert nvlink_domains(discover(FakeNvml(DGX_A100))) == dict.fromkeys(range(8), 0)
    assert nvlink_domains(discover(FakeNvml(PCIE_BOX))) == {}
    specs = slice_specs(discover(FakeNvml(TWO_SOCKET_BOX)), NODE)
    assert devices_of(specs)["gpu-7"]["attributes"]["nvlinkDomain"] == {"int": 6}


def test_mig_profiles_become_counters_and_partitions_as_nvidia_models_them() -> None:
    specs = slice_specs(discover(FakeNvml(H100_BOX)), NODE)
    assert len(specs) == 5  # the counters, then one slice per GPU
    assert all(s["pool"]["resourceSliceCount"] == 5 for s in specs)
    counters = specs[0]["sharedCounters"]
    assert "devices" not in specs[0]
    assert [c["name"] for c in counters] == [counter_set_name(i) for i in range(4)]
    full = counters[0]["counters"]
    assert full["multiprocessors"] == {"value": "132"}
    assert full["memory"] == {"value": str(81152 * MIB)}
    assert {k for k in full if k.startswith("memory-slice-")} == {
        f"memory-slice-{n}" for n in range(8)
    }
    devices = devices_of(specs[1:2])
    # The GPU, and each profile at each of its placements: 7+3+2+1+1+7+4.
    assert len(devices) == 1 + 25
    gpu = devices["gpu-0"]
    assert gpu["consumesCounters"] == [{"counterSet": "gpu-0-counters", "counters": full}]
    part = devices["gpu-0-mig-3g40gb-9-4"]
    assert part["attributes"]["type"] == {"string": "mig"}
    assert part["attributes"]["profile"] == {"string": "3g.40gb"}
    assert part["attributes"]["parentUUID"] == {"string": H100_BOX.gpus[0].uuid}
    assert part["capacity"]["multiprocessors"] == {"value": "60"}
    used = part["consumesCounters"][0]["counters"]
    assert {k for k in used if k.startswith("memory-slice-")} == {
        f"memory-slice-{n}" for n in (4, 5, 6, 7)
    }
    assert part["taints"] == [{"key": PARTITION_TAINT, "effect": "NoSchedule"}]
    assert "gpu-0-mig-1g10gb-me-20-6" in devices


@pytest.mark.parametrize("machine", [H100_BOX], ids=lambda m: m.name)
def test_counters_add_up(machine: FakeMachine) -> None:
    """No device consumes a counter its set lacks or more of it than the set holds;
    partitions whose memory slices overlap can never be allocated together, and those
    that do not fit side by side within every counter."""
    specs = slice_specs(discover(FakeNvml(machine)), NODE)
    sets = {s["name"]: s["counters"] for s in specs[0]["sharedCounters"]}
    for device in devices_of(specs).values():
        for use in device.get("consumesCounters", []):
            available = sets[use["counterSet"]]
            for counter, amount in use["counters"].items():
                assert int(amount["value"]) <= int(available[counter]["value"]), (
                    device["name"],
                    counter,
                )
    # Seven 1g.10gb partitions fit in one H100 together; an eighth slice is not there.
    ones = [
        d for name, d in devices_of(specs[1:2]).items() if name.startswith("gpu-0-mig-1g10gb-19-")
    ]
    total = sum(int(d["consumesCounters"][0]["counters"]["multiprocessors"]["value"]) for d in ones)
    assert len(ones) == 7 and total <= int(sets["gpu-0-counters"]["multiprocessors"]["value"])


def test_an_unhealthy_gpu_keeps_its_name_and_is_tainted() -> None:
    ailing = with_gpu(H100_BOX, 1, rows=RemappedRows(0, 1, True, False))
    devices = devices_of(slice_specs(discover(FakeNvml(ailing)), NODE))
    assert devices["gpu-1"]["taints"] == [{"key": UNHEALTHY_TAINT, "effect": "NoSchedule"}]
    assert {"key": UNHEALTHY_TAINT, "effect": "NoSchedule"} in devices["gpu-1-mig-1g10gb-19-0"][
        "taints"
    ]
    assert "taints" not in devices["gpu-0"]


def test_nothing_to_publish_without_gpus() -> None:
    assert slice_specs(discover(FakeNvml(PCIE_BOX, library=False)), NODE) == []


def test_pcie_root_refuses_what_sysfs_does_not_vouch_for(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path, PCIE_BOX, {i: "pci0000:17" for i in range(4)})
    assert pcie_root("0000:1a:00.0", sysfs) == "pci0000:17"
    assert pcie_root("0000:ff:00.0", sysfs) is None  # no such device
    assert pcie_root("../../etc", sysfs) is None  # not a bus id
    link = sysfs / "bus" / "pci" / "devices" / "0000:1b:00.0"
    link.unlink()
    os.symlink("/etc/passwd", link)  # a link out of /sys/devices
    assert pcie_root("0000:1b:00.0", sysfs) is None


def test_slice_names_fit_for_any_node_name() -> None:
    assert slice_name(NODE, 3) == f"{NODE}-{DRIVER}-3"
    long = "n" * 253
    assert len(slice_name(long, 12)) <= 253
    assert slice_name(long, 1) != slice_name("m" * 253, 1)


# --- through the API ---------------------------------------------------------------------------
@asynccontextmanager
async def api_client(tmp_path: Path) -> AsyncIterator[tuple[KubeApiEmulator, KubeClient]]:
    async with KubeApiEmulator() as emulator:
        config = write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig")
        client = await create_client(str(config))
        try:
            yield emulator, client
        finally:
            await client.close()


def stored(emulator: KubeApiEmulator) -> dict[str, dict[str, Any]]:
    return {s["metadata"]["name"]: s for s in emulator.objects(RESOURCE_SLICES)}


@pytest.mark.asyncio
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
async def test_the_api_server_stores_the_slices_of_every_machine(
    tmp_path: Path, machine: FakeMachine
) -> None:
    async with api_client(tmp_path) as (emulator, client):
        publisher = SlicePublisher(KubeSliceApi(client), NODE, sysfs=tmp_path / "no-sysfs")
        discovery = discover(FakeNvml(machine))
        assert await publisher.publish(discovery)
        slices = stored(emulator)
        wanted = slice_specs(discovery, NODE, generation=1)
        specs = [slices[slice_name(NODE, n)]["spec"] for n in range(len(wanted))]
        # The API server stamps each taint's timeAdded; the rest is stored as sent.
        for device in (d for spec in specs for d in spec.get("devices", [])):
            for taint in device.get("taints", []):
                assert taint.pop("timeAdded")
        assert specs == wanted
        # Nothing changed: nothing written.
        assert not await publisher.publish(discovery)


@pytest.mark.asyncio
async def test_the_pool_follows_the_discovery(tmp_path: Path) -> None:
    async with api_client(tmp_path) as (emulator, client):
        publisher = SlicePublisher(KubeSliceApi(client), NODE, sysfs=tmp_path / "none")
        assert await publisher.publish(discover(FakeNvml(PCIE_BOX)))
        first = stored(emulator)
        assert len(first) == 4

        # A GPU goes bad: a new generation, every slice rewritten with it.
        ailing = with_gpu(PCIE_BOX, 1, retired_pending=True)
        assert await publisher.publish(discover(FakeNvml(ailing)))
        second = stored(emulator)
        assert {s["spec"]["pool"]["generation"] for s in second.values()} == {2}
        gpu1 = second[slice_name(NODE, 1)]["spec"]["devices"][0]
        assert gpu1["taints"][0]["key"] == UNHEALTHY_TAINT
        assert not await publisher.publish(discover(FakeNvml(ailing)))  # timeAdded aside

        # Two GPUs gone (fewer devices): the count drops and the extra slices go.
        smaller = FakeMachine("two", PCIE_BOX.gpus[:2], PCIE_BOX.ancestors, topo=())
        smaller_discovery = discover(FakeNvml(smaller))
        assert await publisher.publish(smaller_discovery)
        third = stored(emulator)
        assert sorted(third) == [slice_name(NODE, 0), slice_name(NODE, 1)]
        assert {json.dumps(s["spec"]["pool"]) for s in third.values()} == {
            json.dumps({"name": NODE, "generation": 3, "resourceSliceCount": 2})
        }

        # NVML gone for a pass: nothing deleted.
        assert not await publisher.publish(discover(FakeNvml(PCIE_BOX, library=False)))
        assert sorted(stored(emulator)) == sorted(third)

        # Another node's and another driver's slices are not this pool's.
        other = slice_specs(smaller_discovery, "gpu-node-2", generation=1)[0]
        await client.request_json(
            "POST",
            "/apis/resource.k8s.io/v1/resourceslices",
            body={"metadata": {"name": "other-node"}, "spec": other},
        )
        assert not await publisher.publish(smaller_discovery)

        # Opting out: the pool is withdrawn, the other node's slice stays.
        assert await publisher.withdraw() == 2
        assert sorted(stored(emulator)) == ["other-node"]


@pytest.mark.asyncio
async def test_print_mode_needs_no_api_server() -> None:
    out = io.StringIO()
    options = AgentOptions(node_name=NODE, print_resource_slices=True, sysfs="/nonexistent")
    assert await print_resource_slices(options, FakeNvml(H100_BOX), out) == 0
    listed = json.loads(out.getvalue())
    assert listed["kind"] == "List"
    assert [item["kind"] for item in listed["items"]] == ["ResourceSlice"] * 5
    assert listed["items"][1]["spec"]["devices"][0]["name"] == "gpu-0"
    out = io.StringIO()
    assert await print_resource_slices(options, FakeNvml(PCIE_BOX, library=False), out) == 1
    assert json.loads(out.getvalue())["items"] == []


@pytest.mark.asyncio
async def test_the_agent_publishes_in_dra_mode_and_withdraws_on_opting_out(
    tmp_path: Path,
) -> None:
    async with KubeApiEmulator() as emulator:
        emulator.put_node(node_obj(NODE))
        config = str(write_kubeconfig(emulator.base_url, tmp_path / "kubeconfig"))
        plain = AgentOptions(node_name=NODE, kubeconfig=config, once=True, metrics_port=None)
        assert await serve(plain, FakeNvml(PCIE_BOX)) == 0
        assert stored(emulator) == {}  # DRA mode is opt-in

        dra = dataclass_replace(plain, dra=True, sysfs=str(tmp_path / "none"))
        assert await serve(dra, FakeNvml(PCIE_BOX)) == 0
        assert len(stored(emulator)) == 4

        withdraw = dataclass_replace(plain, dra_withdraw=True)
        assert await serve(withdraw, FakeNvml(PCIE_BOX)) == 0
        assert stored(emulator) == {}


# --- any discovery ------------------------------------------------------------------------------
_names = st.text(min_size=0, max_size=80)
_profiles = st.builds(
    MigProfile,
    profile_id=st.integers(0, 40),
    name=_names,
    slice_count=st.integers(1, 8),
    instance_count=st.integers(1, 8),
    multiprocessors=st.integers(0, 200),
    copy_engines=st.integers(0, 16),
    decoders=st.integers(0, 16),
    encoders=st.integers(0, 16),
    jpeg_engines=st.integers(0, 16),
    ofa_engines=st.integers(0, 4),
    memory_mib=st.integers(0, 200_000),
    placements=st.lists(
        st.tuples(st.integers(0, 15), st.integers(1, 16)), max_size=8, unique=True
    ).map(tuple),
)
_reports = st.builds(
    DeviceReport,
    index=st.just(0),
    uuid=_names,
    model=_names,
    memory_mib=st.integers(0, 200_000),
    numa=st.one_of(st.none(), st.integers(0, 7)),
    pci_bus_id=st.sampled_from(["0000:18:00.0", "", "junk", "0000:ff:1f.7"]),
    problems=st.lists(_names, max_size=2).map(tuple),
    mig_profiles=st.lists(_profiles, max_size=12, unique_by=lambda p: p.profile_id).map(tuple),
)


@st.composite
def discoveries(draw: st.DrawFn) -> Discovery:
    reports = draw(st.lists(_reports, min_size=1, max_size=16))
    devices = tuple(replace(r, index=i) for i, r in enumerate(reports))
    count = len(devices)
    cells = [["X" if i == j else "SYS" for j in range(count)] for i in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            cells[i][j] = cells[j][i] = draw(st.sampled_from(["SYS", "PIX", "NV4", "NV12"]))
    return Discovery(devices=devices, links=tuple(tuple(row) for row in cells))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(discovery=discoveries())
def test_whatever_nvml_reports_the_slices_are_valid_and_counters_add_up(
    discovery: Discovery,
) -> None:
    """Hostile or odd NVML answers (long, non-ASCII names, many profiles and
    placements, 16 GPUs) never produce a slice the API server refuses, which would keep
    the whole pool unpublished; every device is published once, and no device consumes
    more of a counter than its set holds."""
    specs = slice_specs(discovery, NODE, generation=1)
    for spec in specs:
        assert validate_slice(spec, None) == [], validate_slice(spec, None)[:3]
        assert spec["pool"]["resourceSliceCount"] == len(specs)
    names = [d["name"] for s in specs for d in s.get("devices", [])]
    assert len(names) == len(set(names))
    assert {f"gpu-{r.index}" for r in discovery.devices} <= set(names)
    sets = {c["name"]: c["counters"] for s in specs for c in s.get("sharedCounters", [])}
    for spec in specs:
        for device in spec.get("devices", []):
            for use in device.get("consumesCounters", []):
                held = sets[use["counterSet"]]
                for counter, amount in use["counters"].items():
                    assert int(amount["value"]) <= int(held[counter]["value"])


@pytest.mark.asyncio
async def test_a_publish_cut_short_is_completed_by_the_next_one(tmp_path: Path) -> None:
    """The agent stops (or the API fails) after writing some slices of a new
    generation: the pool is left with two generations (a scheduler ignores it), and the
    next pass, by a fresh publisher as after a restart, writes one whole generation."""
    async with api_client(tmp_path) as (emulator, client):
        first = SlicePublisher(KubeSliceApi(client), NODE, sysfs=tmp_path / "none")
        assert await first.publish(discover(FakeNvml(PCIE_BOX)))
        ailing = discover(FakeNvml(with_gpu(PCIE_BOX, 0, retired_pending=True)))
        emulator.fail_requests("update", "resourceslices", status=400, after=2)
        with pytest.raises(ApiError):
            await first.publish(ailing)
        cut = stored(emulator)
        assert sorted(s["spec"]["pool"]["generation"] for s in cut.values()) == [1, 1, 2, 2]

        restarted = SlicePublisher(KubeSliceApi(client), NODE, sysfs=tmp_path / "none")
        assert await restarted.publish(ailing)
        whole = stored(emulator)
        assert {s["spec"]["pool"]["generation"] for s in whole.values()} == {3}
        specs = [s["spec"] for _, s in sorted(whole.items())]
        for device in (d for spec in specs for d in spec.get("devices", [])):
            for taint in device.get("taints", []):
                taint.pop("timeAdded")  # stamped by the API server
        assert specs == slice_specs(ailing, NODE, generation=3)
        assert not await restarted.publish(ailing)
