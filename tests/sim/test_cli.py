"""`gang-scheduler simulate`: options, the JSON object, the table, the plot, errors.

The openb policies come from scheduler.sim.profiles; these tests put stand-ins there (a
bin-packing profile under every name), so they check the command, not the policies."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from cache.pod import PodInfo
from policies.profile import Profile, build_profile
from scheduler.cli.main import main
from scheduler.sim import profiles
from scheduler.sim.openb import Readings
from scheduler.sim.replay import OpenbResult
from scheduler.sim.report import PolicyRun, describe_seeds, mean_curves, results_table

NODES = """sn,cpu_milli,memory_mib,gpu,model
box-1,16000,65536,1,T4
box-2,32000,65536,1,T4
"""
# 100-milli shares fill the 2 GPUs with 20 pods; clones stop at 26 GPU pods (130%).
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
share-a,100,64,1,100
share-b,100,64,1,100
cpu-only,100,64,0,0
"""


class StandinCatalogue:
    """Records what the command asks of scheduler.sim.profiles."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def openb_profile(
        self,
        name: str,
        *,
        seed: int,
        max_cpu_milli: int,
        max_gpu_milli: int,
        history: Sequence[PodInfo],
        cluster_cpu_milli: int = 0,
        cluster_gpu_milli: int = 0,
    ) -> Profile:
        self.calls.append(
            {
                "name": name,
                "seed": seed,
                "max_cpu_milli": max_cpu_milli,
                "max_gpu_milli": max_gpu_milli,
                "history": list(history),
                "cluster": (cluster_cpu_milli, cluster_gpu_milli),
            }
        )
        return build_profile("binpack", candidate_limit=0, network_weight=0)


@pytest.fixture
def catalogue(monkeypatch: pytest.MonkeyPatch) -> StandinCatalogue:
    standin = StandinCatalogue()
    monkeypatch.setattr(profiles, "OPENB_POLICIES", ("random", "bestfit", "fgd", "ours"))
    monkeypatch.setattr(profiles, "BEST_POLICY", "ours")
    monkeypatch.setattr(profiles, "openb_profile", standin.openb_profile)
    return standin


@pytest.fixture
def trace_files(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    return nodes, pods


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_one_entry_per_policy_and_seed(
    catalogue: StandinCatalogue,
    trace_files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace_files
    args = ["--nodes", str(nodes), "--pods", str(pods), "--json"]
    code, out, _ = run(
        [*args, "--policy", "fgd", "--policy", "random", "--seed", "1", "--seed", "2"], capsys
    )
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["policy"], r["seed"]) for r in results] == [
        ("fgd", 1),
        ("fgd", 2),
        ("random", 1),
        ("random", 2),
    ]
    for entry in results:
        # The fields of issue 3 stay; issue 14 added failed_by_size and
        # whole_node_failures (null here: no pod asks a whole GPU).
        assert set(entry) == {
            "policy",
            "seed",
            "allocation_pct",
            "failed_pods",
            "seconds",
            "failed_by_size",
            "whole_node_failures",
        }
        assert entry["whole_node_failures"] is None
        by_size = entry["failed_by_size"]
        assert list(by_size) == ["cpu-only", "<1 GPU"]
        assert (
            sum(size["failed_before_100"] + size["failed_after_100"] for size in by_size.values())
            == entry["failed_pods"]
        )
        # 20 of the 26 shares fit, whatever the order; the CPU-only pods all fit.
        assert entry["allocation_pct"] == {"100": 100.0, "130": 100.0}
        assert entry["failed_pods"] == 6
        assert isinstance(entry["seconds"], float) and entry["seconds"] >= 0
    call = catalogue.calls[0]
    assert (call["name"], call["seed"]) == ("fgd", 1)
    assert (call["max_cpu_milli"], call["max_gpu_milli"]) == (32000, 1000)
    # FGD's history: the trace's original pods, as the scheduler parses them.
    assert [p.name for p in call["history"]] == ["share-a", "share-b", "cpu-only"]
    assert call["history"][0].gpu.milli == 100


def test_defaults_run_bestfit_fgd_and_the_best_policy_with_seed_42(
    catalogue: StandinCatalogue,
    trace_files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace_files
    code, out, _ = run(["--nodes", str(nodes), "--pods", str(pods), "--json"], capsys)
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["policy"], r["seed"]) for r in results] == [
        ("bestfit", 42),
        ("fgd", 42),
        ("ours", 42),
    ]


def test_lower_load_has_no_reading_at_130(
    catalogue: StandinCatalogue,
    trace_files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace_files
    args = ["--nodes", str(nodes), "--pods", str(pods), "--json", "--policy", "ours"]
    code, out, _ = run([*args, "--load", "1.0"], capsys)
    assert code == 0
    (entry,) = json.loads(out)["results"]
    assert entry["allocation_pct"] == {"100": 100.0, "130": None}
    assert entry["failed_pods"] == 0


def test_table_and_plot(
    catalogue: StandinCatalogue,
    trace_files: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace_files
    plot = tmp_path / "alloc.png"
    args = ["--nodes", str(nodes), "--pods", str(pods), "--policy", "ours", "--plot", str(plot)]
    code, out, _ = run(args, capsys)
    assert code == 0
    assert "ours" in out and "100.00" in out and "GPU alloc % @130%" in out
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_a_plot_without_matplotlib_says_how_to_get_it(
    catalogue: StandinCatalogue,
    trace_files: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    nodes, pods = trace_files
    plot = tmp_path / "alloc.png"
    args = ["--nodes", str(nodes), "--pods", str(pods), "--policy", "ours", "--plot", str(plot)]
    code, _, err = run(args, capsys)
    assert code == 2 and not plot.exists()
    assert "plots need matplotlib: pip install 'gang-scheduler[plot]'" in err
    assert len(err.strip().splitlines()) == 1


def test_bundled_default_trace_with_one_policy(
    catalogue: StandinCatalogue, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real data, shipped in the package: about 10,800 pods on 1,213 nodes."""
    code, out, _ = run(["--json", "--policy", "bestfit"], capsys)
    assert code == 0
    (entry,) = json.loads(out)["results"]
    assert 85.0 < entry["allocation_pct"]["100"] <= entry["allocation_pct"]["130"] < 100.0
    assert entry["failed_pods"] > 0
    call = catalogue.calls[0]
    assert (call["max_cpu_milli"], call["max_gpu_milli"]) == (128_000, 8_000)
    # The cluster's totals, for fgd-complete-reserve's step-aside (issue 32).
    assert call["cluster"] == (107_018_000, 6_212_000)
    assert len(call["history"]) == 8152


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "/no/such/nodes.csv"], "cannot read /no/such/nodes.csv"),
        (["--pods", "/no/such/pods.csv"], "cannot read /no/such/pods.csv"),
        (["--trace", "nosuch"], "unknown trace 'nosuch'"),
        (["--policy", "nosuch"], "unknown policy 'nosuch'"),
        (["--load", "0"], "--load must be a number > 0"),
        (["--load", "nan"], "--load must be a number > 0"),
        (["--plot", "/no/such/dir/a.png"], "cannot write the plot /no/such/dir/a.png"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    catalogue: StandinCatalogue,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    code, out, err = run(args, capsys)
    assert code == 2 and not out
    assert err.count("\n") == 1
    assert err.startswith("gang-scheduler simulate: error: ") and message in err


def test_malformed_csv_row_is_one_line_and_exit_2(
    catalogue: StandinCatalogue, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(PODS + "broken,100,64,one,0\n")
    code, _, err = run(["--pods", str(pods)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"{pods}:5: num_gpu must be a whole number" in err


# --- report helpers -------------------------------------------------------------------------
def fake_run(policy: str, seed: int, at_100: float, at_130: float) -> PolicyRun:
    readings = Readings(1000)
    readings.record(1000, round(at_100 * 10))
    readings.record(1300, round(at_130 * 10))
    result = OpenbResult(
        pods=2,
        failed_pods=seed % 3,
        seconds=1.5,
        readings=readings,
        allocation_pct={100: at_100, 130: at_130},
    )
    return PolicyRun(policy, seed, result)


def test_table_shows_the_mean_over_seeds_beside_the_papers_figure() -> None:
    runs = [fake_run("fgd", 42, 95.0, 95.2), fake_run("fgd", 43, 95.2, 95.6)]
    runs.append(fake_run("ours", 42, 96.0, 96.5))
    console = Console(width=200, record=True)
    console.print(results_table(runs, "default"))
    text = console.export_text()
    fgd_row = next(line for line in text.splitlines() if "fgd" in line)
    for cell in ("42, 43", "95.10", "95.23", "95.40", "95.39"):
        assert cell in fgd_row
    ours_row = next(line for line in text.splitlines() if "ours" in line)
    assert "96.50" in ours_row and "-" in ours_row  # no paper figure for our policy
    assert "mean over seeds" in text


def test_seed_lists_and_mean_curves() -> None:
    assert describe_seeds(list(range(51, 41, -1))) == "42..51"
    assert describe_seeds([42]) == "42" and describe_seeds([1, 5, 9]) == "1, 5, 9"
    runs = [fake_run("fgd", 1, 90.0, 95.0), fake_run("fgd", 2, 92.0, 97.0)]
    assert mean_curves(runs) == {"fgd": [(100, 91.0), (130, 96.0)]}


def test_dra_replays_the_same_trace_through_dra_devices(
    trace_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dra`: the same figures as the annotation model (real profiles: the shares go
    through ResourceClaims on ResourceSlices), the table saying so."""
    nodes, pods = trace_files
    args = ["--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd", "--seed", "3"]
    code, annotation, _ = run([*args, "--json"], capsys)
    assert code == 0
    code, dra, _ = run([*args, "--json", "--dra"], capsys)
    assert code == 0
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in json.loads(dra)["results"]]
    assert strip == [
        {k: v for k, v in r.items() if k != "seconds"} for r in json.loads(annotation)["results"]
    ]
    code, table, _ = run([*args, "--dra"], capsys)
    assert code == 0 and "(GPUs through DRA devices)" in table


def test_dra_is_refused_for_the_time_based_replay(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["--generate", "5", "--dra"], capsys)
    assert code == 2 and not out
    assert "--dra is for the openb replay" in err and err.count("\n") == 1
