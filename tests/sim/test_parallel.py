"""Replays of several seeds in parallel processes (scheduler.sim.parallel and
`gang-scheduler simulate --jobs`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scheduler.cli.main import main
from scheduler.sim.parallel import run_jobs

NODES = """sn,cpu_milli,memory_mib,gpu,model
box-1,16000,65536,2,T4
box-2,32000,65536,4,G2
"""
PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
share-a,1000,64,1,300
share-b,2000,64,1,700
pair,4000,64,2,1000
cpu-only,100,64,0,0
"""


def test_jobs_run_in_other_processes_and_come_back_in_order() -> None:
    finished: list[int] = []
    results = run_jobs(5, lambda index: (index * index, os.getpid()), 2, finished.append)
    assert [value for value, _ in results] == [0, 1, 4, 9, 16]
    assert os.getpid() not in {pid for _, pid in results}
    assert sorted(finished) == [0, 1, 2, 3, 4]


def test_one_worker_runs_the_jobs_here_in_order() -> None:
    finished: list[int] = []
    results = run_jobs(3, lambda index: (index, os.getpid()), 1, finished.append)
    assert results == [(0, os.getpid()), (1, os.getpid()), (2, os.getpid())]
    assert finished == [0, 1, 2]


def test_simulate_gives_the_same_results_in_parallel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--json"]
    args += ["--policy", "fgd", "--policy", "bestfit", "--seed", "1", "--seed", "2"]
    outputs = []
    for jobs in ("1", "3"):
        assert main([*args, "--jobs", jobs]) == 0
        results = json.loads(capsys.readouterr().out)["results"]
        outputs.append([{k: v for k, v in r.items() if k != "seconds"} for r in results])
    assert outputs[0] == outputs[1]
    assert [(r["policy"], r["seed"]) for r in outputs[1]] == [
        ("fgd", 1),
        ("fgd", 2),
        ("bestfit", 1),
        ("bestfit", 2),
    ]


def test_jobs_below_one_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--jobs", "0"]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
