"""The two log formats of `gang-scheduler run`: key=value text and JSON lines."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from scheduler.process.logs import configure_logging, log_event


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Logger]]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    try:
        yield stream, logging.getLogger("scheduler.test")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_text_shows_fields_as_key_value_and_quotes_what_needs_it(
    captured: tuple[io.StringIO, logging.Logger],
) -> None:
    stream, log = captured
    configure_logging("info", "text", stream)
    log_event(
        log,
        "gang unschedulable",
        gang="ml/train",
        members=4,
        nodes=["n1", "n2"],
        attempt=3,
        reason='0/2 nodes are available: 2 Insufficient "nvidia.com/gpu"',
        duration=0.0123456789,
        leader=True,
        nothing=None,
    )
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(
        " info scheduler.test: gang unschedulable gang=ml/train members=4 nodes=n1,n2 "
        'attempt=3 reason="0/2 nodes are available: 2 Insufficient \\"nvidia.com/gpu\\"" '
        "duration=0.0123457 leader=true nothing="
    ), line
    assert line[:24].endswith("Z") and line[10] == "T"  # RFC 3339, UTC, milliseconds


def test_json_is_one_object_per_line_with_the_fields_as_members(
    captured: tuple[io.StringIO, logging.Logger],
) -> None:
    stream, log = captured
    configure_logging("info", "json", stream)
    log_event(log, "gang bound", gang="ml/train", nodes=("n1",), duration=0.5, msg="ignored")
    log_event(log, "not shown", logging.DEBUG, gang="x")
    logging.getLogger("aiohttp.client").warning("plain %s", "record")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        log.exception("failed")
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(records) == 3
    bound, plain, failed = records
    assert {k: bound[k] for k in ("level", "logger", "msg", "gang", "nodes", "duration")} == {
        "level": "info",
        "logger": "scheduler.test",
        "msg": "gang bound",  # a field never overwrites the record's own keys
        "gang": "ml/train",
        "nodes": ["n1"],
        "duration": 0.5,
    }
    assert (plain["level"], plain["msg"]) == ("warning", "plain record")
    assert failed["level"] == "error" and "RuntimeError: boom" in failed["error"]


def test_configuring_twice_does_not_double_the_lines(
    captured: tuple[io.StringIO, logging.Logger],
) -> None:
    stream, log = captured
    configure_logging("warning", "text", stream)
    configure_logging("warning", "text", stream)
    log.info("hidden")
    log.warning("shown")
    assert stream.getvalue().count("shown") == 1 and "hidden" not in stream.getvalue()
