"""Generated openb traces (scheduler/sim/families.py): each member is its base trace
drawn again so that one class of pods carries the asked part of the demand."""

from __future__ import annotations

from importlib import resources

import pytest

from scheduler.sim.defaults import TRACES
from scheduler.sim.families import (
    FAMILIES,
    UnknownFamily,
    generate,
    generate_csv,
    parse_member,
)
from scheduler.sim.openb import OpenbPod, load_pods, requested_gpu_milli


def bundled(trace: str) -> list[OpenbPod]:
    text = resources.files("scheduler.sim").joinpath("data", "openb", TRACES[trace]).read_text()
    return load_pods(text)


def part(pods: list[OpenbPod], family: str) -> float:
    rule = FAMILIES[family]
    involved = [pod for pod in pods if rule.involved(pod)]
    total = sum(rule.measure(pod) for pod in involved)
    return sum(rule.measure(pod) for pod in involved if rule.in_class(pod)) / total


@pytest.mark.parametrize(
    ("name", "wanted"),
    [("gpushare80", 0.80), ("multigpu30", 0.30), ("gpuspec20", 0.20)],
)
def test_a_member_gives_its_class_the_part_its_name_asks(name: str, wanted: float) -> None:
    family, _ = parse_member(name)
    base = bundled(FAMILIES[family].base)
    pods = generate(name, base)
    # Drawn until each class reaches its part: over by at most one pod's worth.
    assert part(pods, family) == pytest.approx(wanted, abs=0.01)
    assert part(base, family) != pytest.approx(wanted, abs=0.05)
    # About as much demand as the base (the measure's total, within one pod's worth).
    rule = FAMILIES[family]
    total = sum(rule.measure(pod) for pod in base if rule.involved(pod))
    assert sum(rule.measure(pod) for pod in pods if rule.involved(pod)) == pytest.approx(
        total, rel=0.01
    )


@pytest.mark.parametrize("name", ["cpu5", "cpu25", "cpu50"])
def test_a_cpu_member_keeps_every_gpu_pod_and_draws_cpu_only_pods_to_its_part(name: str) -> None:
    # As the paper's openb_pod_list_cpu050..cpu250 (issue 32): their GPU pods are the
    # default trace's, shape for shape, and CPU-only pods are NN% of the pods (cpu250:
    # 2,356 of 9,420); the total CPU grows with NN, the GPU demand does not.
    _, percent = parse_member(name)
    base = bundled("default")
    pods = generate(name, base)
    shape = lambda pod: (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)  # noqa: E731
    assert sorted(shape(p) for p in pods if p.num_gpu) == sorted(
        shape(p) for p in base if p.num_gpu
    )
    cpu_only = [pod for pod in pods if not pod.num_gpu]
    assert {shape(p) for p in cpu_only} <= {shape(p) for p in base if not p.num_gpu}
    # Rounded up: the first count that reaches the part.
    assert len(cpu_only) / len(pods) >= percent / 100 > (len(cpu_only) - 1) / (len(pods) - 1)
    assert sum(map(requested_gpu_milli, pods)) == sum(map(requested_gpu_milli, base))


def test_cpu_members_ask_more_cpu_as_their_part_grows() -> None:
    base = bundled("default")
    totals = [sum(p.cpu_milli for p in generate(f"cpu{n}", base)) for n in (5, 10, 20, 25)]
    assert totals == sorted(totals) and totals[0] < sum(p.cpu_milli for p in base) < totals[-1]


def test_gpu_families_keep_the_cpu_only_pods_and_draw_only_real_shapes() -> None:
    base = bundled("default")
    pods = generate("multigpu30", base)
    shape = lambda pod: (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)  # noqa: E731
    assert sorted(shape(p) for p in pods if not p.num_gpu) == sorted(
        shape(p) for p in base if not p.num_gpu
    )
    assert {shape(p) for p in pods} <= {shape(p) for p in base}
    assert len({pod.name for pod in pods}) == len(pods)


def test_pinned_members_keep_the_pinned_shapes_of_gpuspec33() -> None:
    pods = generate("gpuspec20", bundled("gpuspec33"))
    specs = {pod.gpu_spec for pod in pods if pod.gpu_spec}
    assert frozenset({"V100M16", "V100M32"}) in specs and frozenset({"T4"}) in specs


def test_a_member_is_one_fixed_trace_and_survives_the_csv_format() -> None:
    base_text = resources.files("scheduler.sim").joinpath("data", "openb", TRACES["default"])
    text = base_text.read_text()
    first = generate_csv("gpushare80", text)
    assert first == generate_csv("gpushare80", text)
    assert first != generate_csv("gpushare80", text, seed=15)
    again = load_pods(first)
    assert again == generate("gpushare80", load_pods(text))
    assert sum(map(requested_gpu_milli, again)) > 0


@pytest.mark.parametrize("name", ["cpu", "cpu0", "cpu100", "gpushareX", "default", "multigpu5O"])
def test_unknown_members_are_refused(name: str) -> None:
    with pytest.raises(UnknownFamily, match="expected cpuNN"):
        parse_member(name)
