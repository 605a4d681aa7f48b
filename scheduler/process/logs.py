"""Logs of `gang-scheduler run`: structured records on stderr, text or JSON lines.

A record that an operator may want to filter or count (a bind decision, a gang that
failed, the start-up facts) carries its fields apart from its message: `log_event(log,
"gang bound", gang="ml/train", members=4, ...)`. The two formats show them:

- `text` (default): `2026-11-24T05:06:00.123Z info scheduler.kube.runner: gang bound
  gang=ml/train members=4 nodes=n1,n2 duration=0.031` (logfmt-style key=value; a value
  with a space, a quote or an `=` is quoted).
- `json`: one JSON object per line: `time`, `level`, `logger`, `msg`, then the fields
  (a field never overwrites those four), and `error` with the traceback when there is one.

Only the standard library's logging: records from aiohttp or kubernetes_asyncio come
through the same handler and format, with no fields.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal, TextIO, get_args

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
LOG_LEVELS = ("debug", "info", "warning", "error")

# Where a record's fields travel (an attribute set through `extra`).
_FIELDS = "gang_scheduler_fields"
_RESERVED = ("time", "level", "logger", "msg")
# Characters that make a text value ambiguous unless quoted.
_NEEDS_QUOTES = frozenset(' "=\\\t\n\r')

FieldValue = str | int | float | bool | None | list[str] | tuple[str, ...]


def log_event(
    logger: logging.Logger, message: str, /, level: int = logging.INFO, **fields: FieldValue
) -> None:
    """Log `message` with `fields` (shown as key=value, or as JSON members)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={_FIELDS: fields})


def record_fields(record: logging.LogRecord) -> Mapping[str, FieldValue]:
    """The fields a record was logged with ({} for a plain record)."""
    fields = getattr(record, _FIELDS, None)
    return fields if isinstance(fields, Mapping) else {}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(value: FieldValue) -> FieldValue:
    """A field as JSON carries it: sequences as lists, floats rounded to microseconds."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def _text_value(value: FieldValue) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return _quoted(",".join(value))
    return _quoted(str(value))


def _quoted(text: str) -> str:
    if text and not any(char in _NEEDS_QUOTES for char in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...`, traceback on the following lines."""

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_timestamp(record)} {record.levelname.lower()} {record.name}: {record.getMessage()}"
        )
        fields = " ".join(f"{k}={_text_value(v)}" for k, v in record_fields(record).items())
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback goes in `error`)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            if key not in _RESERVED:
                entry[key] = _plain(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r}; known: {', '.join(LOG_FORMATS)}")
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logging(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """Send every record at `level` or above to `stream` (stderr) in `log_format`,
    replacing the root logger's handlers (a second call does not double the lines)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
