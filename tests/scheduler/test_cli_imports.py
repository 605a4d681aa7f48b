"""`gang-scheduler run` imports only what running the scheduler needs (issue 13: the first
bind within 1 s of start-up, interpreter and imports included). Structural, not timed:
in a fresh interpreter, which modules the CLI and the `run` command's own imports load.
Speed itself is measured by bench/first_bind.py."""

from __future__ import annotations

import json
import subprocess
import sys

# Modules only `simulate`, `demo` or `node-agent` use; each costs start-up time.
NOT_FOR_RUN = (
    "scheduler.cli.simulate",
    "scheduler.cli.demo",
    "scheduler.sim.openb",
    "scheduler.sim.replay",
    "scheduler.sim.timeline",
    "scheduler.sim.report",
    "scheduler.sim.workload",
    "scheduler.sim.cluster_spec",
    "scheduler.sim.profiles",
    "scheduler.sim.parallel",
    "scheduler.agent",
    "rich",
    "matplotlib",
    "grpc",
    "pynvml",
)

# The `run` command's imports (scheduler/cli/main.py's `_run`), after the parser is built.
RUN_IMPORTS = """
import json, sys
from scheduler.cli.main import build_parser
args = build_parser().parse_args(["run", "--kubeconfig", "k"])
assert args.command == "run"
import scheduler.process.config, scheduler.kube.runner
import scheduler.process.logs, scheduler.process.startup
print(json.dumps(sorted(sys.modules)))
"""


def loaded_modules(program: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


def unwanted(modules: set[str]) -> list[str]:
    return sorted(
        name for name in modules if any(name == u or name.startswith(u + ".") for u in NOT_FOR_RUN)
    )


def test_run_loads_neither_the_simulator_nor_the_demo_nor_rich() -> None:
    assert unwanted(loaded_modules(RUN_IMPORTS)) == []


def test_the_simulate_command_still_finds_its_modules() -> None:
    # The other side: `simulate` and `demo` import them when they run.
    program = (
        "import json, sys\nimport scheduler.cli.simulate\nprint(json.dumps(sorted(sys.modules)))"
    )
    modules = loaded_modules(program)
    assert {"scheduler.cli.demo", "scheduler.sim.openb", "rich.console"} <= modules
