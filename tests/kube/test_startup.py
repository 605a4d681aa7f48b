"""`gang-scheduler run` in a subprocess: what stops it from starting is one line on
stderr and exit code 2 (never a traceback), and what it does is logged, structured.

Each case runs the real CLI (`python -m scheduler.cli.main run`) with a kubeconfig, a
configuration and an environment of its own; the API server, when one is needed, is the
emulator over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import unschedulable_message
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.kubeapi.discovery import VERSION_INFO
from tests.kubeapi.kubeconfig import kubeconfig_dict
from tests.waiting import HANG, eventually, free_port

TEST_TIMEOUT = 4 * HANG  # turns a hang into a failure, whatever the speed
pytestmark = pytest.mark.asyncio


def environment(**extra: str) -> dict[str, str]:
    """The test's environment without in-cluster variables, with no default kubeconfig."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = "/nonexistent/kubeconfig"
    env.update(extra)
    return env


def write_config(tmp_path: Path, port: int | None = None, debug_port: int = 0) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"http: {{address: 127.0.0.1, port: {port or free_port()}, debugPort: {debug_port}}}\n"
        "leaderElection: {enabled: false}\n"
        "timeouts: {initialBackoffSeconds: 0.1, maxBackoffSeconds: 0.2}\n"
    )
    return config


async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scheduler.cli.main",
        "run",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env or environment(),
    )


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """Exit code and stderr lines of a run that must end by itself."""
    process = await start(*args, env=env)
    try:
        _, err = await asyncio.wait_for(process.communicate(), TEST_TIMEOUT)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, without_start_line(err.decode().splitlines())


def without_start_line(lines: list[str]) -> list[str]:
    """stderr without the log line every start begins with (the build's version), which
    comes before anything can fail; the one line of a start-up error follows it."""
    if lines and "starting gang-scheduler version=" in lines[0]:
        return lines[1:]
    return lines


def assert_one_line(code: int, lines: list[str], *fragments: str) -> None:
    assert code == 2, lines
    assert len(lines) == 1, "\n".join(lines)
    (line,) = lines
    assert line.startswith("gang-scheduler run: error: "), line
    for fragment in fragments:
        assert fragment in line, line


def kubeconfig_for(tmp_path: Path, server: str, **cluster: str) -> Path:
    document = kubeconfig_dict(server)
    document["clusters"][0]["cluster"].update(cluster)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


# --- the kubeconfig and the API server ----------------------------------------------------------
async def test_a_missing_kubeconfig(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "kubeconfig"
    code, lines = await run_cli("--kubeconfig", str(missing))
    assert_one_line(code, lines, f"kubeconfig {missing}: No such file or directory")


async def test_a_directory_as_kubeconfig(tmp_path: Path) -> None:
    code, lines = await run_cli("--kubeconfig", str(tmp_path))
    assert_one_line(code, lines, f"kubeconfig {tmp_path}: Is a directory")


async def test_an_unreadable_kubeconfig(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    path = write_kubeconfig("http://127.0.0.1:1", tmp_path / "kubeconfig")
    path.chmod(0)
    code, lines = await run_cli("--kubeconfig", str(path))
    assert_one_line(code, lines, "Permission denied")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("clusters: [\n", "not valid YAML: expected the node content"),
        ("just a string\n", "not a kubeconfig (a YAML mapping"),
        ("- a\n- list\n", "got list"),
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "Expected key current-context"),
        ("", "got NoneType"),
    ],
)
async def test_a_kubeconfig_that_is_not_one(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    code, lines = await run_cli("--kubeconfig", str(path))
    assert_one_line(code, lines, f"kubeconfig {path}: ", fragment)


async def test_the_default_kubeconfig_missing_outside_a_cluster(tmp_path: Path) -> None:
    code, lines = await run_cli(env=environment(KUBECONFIG=str(tmp_path / "config")))
    assert_one_line(code, lines, "no --kubeconfig given, and kubeconfig", "No such file")


async def test_a_certificate_authority_file_that_is_not_there(tmp_path: Path) -> None:
    path = kubeconfig_for(
        tmp_path, "https://127.0.0.1:1", **{"certificate-authority": "/nonexistent/ca.crt"}
    )
    code, lines = await run_cli("--kubeconfig", str(path))
    assert_one_line(code, lines, f"kubeconfig {path}: ", "/nonexistent/ca.crt")


async def test_in_a_pod_without_its_service_account_token() -> None:
    env = environment(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443")
    code, lines = await run_cli(env=env)
    assert_one_line(code, lines, "in-cluster service account: ")


async def test_an_api_server_that_refuses_the_connection(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    path = write_kubeconfig(f"http://127.0.0.1:{port}", tmp_path / "kubeconfig")
    code, lines = await run_cli("--kubeconfig", str(path), "--config", str(write_config(tmp_path)))
    assert_one_line(
        code, lines, f"cannot reach the API server at http://127.0.0.1:{port} (kubeconfig {path})"
    )


async def test_an_api_server_that_answers_version_with_an_error(tmp_path: Path) -> None:
    async def refuse(_: web.Request) -> web.Response:
        body = {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"}
        return web.json_response(body, status=401)

    app = web.Application()
    app.router.add_get("/version", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        path = write_kubeconfig(f"http://127.0.0.1:{port}", tmp_path / "kubeconfig")
        code, lines = await run_cli("--kubeconfig", str(path))
    finally:
        await runner.cleanup()
    assert_one_line(code, lines, f"the API server at http://127.0.0.1:{port}", "401 Unauthorized")


# --- ports --------------------------------------------------------------------------------------
@asynccontextmanager
async def taken_port() -> AsyncIterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


async def test_a_metrics_port_in_use(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api, taken_port() as port:
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        config = write_config(tmp_path, port=port)
        code, lines = await run_cli("--kubeconfig", str(kubeconfig), "--config", str(config))
    lines = [line for line in lines if not _is_log(line)]
    assert_one_line(code, lines, f"cannot listen on 127.0.0.1:{port}: Address already in use")


async def test_a_debug_port_in_use(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api, taken_port() as port:
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        config = write_config(tmp_path, debug_port=port)
        code, lines = await run_cli("--kubeconfig", str(kubeconfig), "--config", str(config))
    lines = [line for line in lines if not _is_log(line)]
    assert_one_line(code, lines, f"cannot listen on 127.0.0.1:{port}: Address already in use")


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("203.0.113.7", "cannot listen on 203.0.113.7:"),  # TEST-NET-3: not this host's
        ("no-such-host.invalid", "cannot listen on no-such-host.invalid:"),
    ],
)
async def test_an_address_that_cannot_be_listened_on(
    tmp_path: Path, address: str, fragment: str
) -> None:
    async with KubeApiEmulator() as api:
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        config = tmp_path / "config.yaml"
        config.write_text(f"http: {{address: {address}}}\nleaderElection: {{enabled: false}}\n")
        code, lines = await run_cli("--kubeconfig", str(kubeconfig), "--config", str(config))
    lines = [line for line in lines if not _is_log(line)]
    assert_one_line(code, lines, fragment)
    assert "Unknown error" not in lines[0]


def _is_log(line: str) -> bool:
    """A start-up log line (the connection, the configuration and the signing key were
    logged before the listeners were opened)."""
    return " info scheduler." in line or " warning scheduler." in line


# --- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
        (["--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
        (["--kubeconfig"], "argument --kubeconfig: expected one argument"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
async def test_a_mistake_on_the_command_line(args: list[str], fragment: str) -> None:
    code, lines = await run_cli(*args)
    # argparse's own words; an unknown option is the top-level parser's to report.
    program = "gang-scheduler" if "unrecognized" in fragment else "gang-scheduler run"
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{program}: error: {fragment}"), lines
    assert lines[0].endswith(f"(see {program} --help)"), lines


# --- what is logged -----------------------------------------------------------------------------
def parse_json_lines(lines: list[str]) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for record in records:
        assert {"time", "level", "logger", "msg"} <= record.keys(), record
        assert record["time"].endswith("Z")
    return records


def find(records: list[dict[str, Any]], msg: str, **fields: Any) -> dict[str, Any]:
    for record in records:
        if record["msg"] == msg and all(record.get(k) == v for k, v in fields.items()):
            return record
    raise AssertionError(f"no {msg!r} with {fields} in {[r['msg'] for r in records]}")


async def run_until(
    tmp_path: Path, api: KubeApiEmulator, done: Callable[[], bool], *extra: str
) -> list[str]:
    kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    config = write_config(tmp_path)
    process = await start("--kubeconfig", str(kubeconfig), "--config", str(config), *extra)
    try:
        await eventually(done, "the scenario")
        # A bind that landed is logged by its task, which a SIGTERM lets finish.
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), HANG)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    return err.decode().splitlines()


async def test_json_logs_say_what_is_used_and_every_decision(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(2):
                api.put_node(node_obj(f"n{i}", gpus=1))
            for i in range(2):
                api.put_pod(pod_obj(f"train-{i}", gang="train", min_member=2, gpus=1))
            for i in range(2):
                api.put_pod(pod_obj(f"huge-{i}", gang="huge", min_member=2, gpus=8))

            def bound_and_huge_told() -> bool:
                # The condition on huge's pods is written after its attempt was logged.
                told = all(
                    "Insufficient"
                    in unschedulable_message(api.get_pod("default", f"huge-{i}") or {})
                    for i in range(2)
                )
                return told and sum(1 for p in api.pods() if p["spec"].get("nodeName")) == 2

            lines = await run_until(tmp_path, api, bound_and_huge_told, "--log-format", "json")
        records = parse_json_lines(lines)
        connected = find(records, "connected to the API server")
        assert connected["server"] == api.base_url
        assert connected["version"] == VERSION_INFO["gitVersion"]
        assert connected["credentials"] == f"kubeconfig {tmp_path / 'kubeconfig'}"
        configured = find(records, "configuration")
        assert configured["config"] == str(tmp_path / "config.yaml")
        assert (configured["schedulerName"], configured["leaderElection"]) == (
            "gang-scheduler",
            False,
        )
        planned = find(records, "gang planned", gang="default/train")
        assert planned["level"] == "info"
        assert (planned["members"], planned["attempt"]) == (2, 1)
        assert sorted(planned["nodes"]) == ["n0", "n1"]
        bound_record = find(records, "gang bound", gang="default/train")
        assert bound_record["members"] == 2 and sorted(bound_record["nodes"]) == ["n0", "n1"]
        assert isinstance(bound_record["duration"], float) and bound_record["duration"] >= 0
        first = find(records, "gang unschedulable", gang="default/huge", attempt=1)
        assert first["level"] == "info"
        assert first["members"] == 2 and first["placeable"] == 0
        assert "Insufficient nvidia.com/gpu" in first["reason"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_text_logs_carry_the_same_fields(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            api.put_pod(pod_obj("solo-0", gang="solo", min_member=1, gpus=1))

            def bound() -> bool:
                return any(p["spec"].get("nodeName") for p in api.pods())

            lines = await run_until(tmp_path, api, bound)
        text = "\n".join(lines)
        assert f"connected to the API server server={api.base_url} version=v1.36.2" in text
        (line,) = [line for line in lines if "gang bound" in line]
        assert " info scheduler.kube.runner: gang bound gang=default/solo members=1 " in line
        assert " nodes=n0 duration=" in line

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
