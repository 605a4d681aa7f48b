"""String functions: the standard ones (contains, startsWith, endsWith, matches),
cel-go's ext.Strings version 2 (charAt, indexOf, lastIndexOf, lowerAscii, upperAscii,
replace, split, substring, trim, join, strings.quote) and Kubernetes' regex library
(find, findAll). Indices count code points, as cel-go does. Every function pays for
the characters it reads or writes before it does the work."""

from __future__ import annotations

from typing import Any

from policies.dra.cel import cost
from policies.dra.cel import types as t
from policies.dra.cel.cost import Meter
from policies.dra.cel.errors import CelEvaluationError
from policies.dra.cel.library import Impl, declare, global_and_member
from policies.dra.cel.regex import compiled

S, N, B = t.STRING, t.INT, t.BOOL
LIST_S = t.list_of(t.STRING)


def _read(meter: Meter, *texts: str) -> None:
    meter.charge(1 + cost.traversal(sum(len(text) for text in texts)))


def _contains(meter: Meter, text: str, part: str) -> bool:
    _read(meter, text, part)
    return part in text


def _starts(meter: Meter, text: str, part: str) -> bool:
    _read(meter, part)
    return text.startswith(part)


def _ends(meter: Meter, text: str, part: str) -> bool:
    _read(meter, part)
    return text.endswith(part)


def _matches(meter: Meter, text: str, pattern: str) -> bool:
    meter.charge(cost.regex(len(text), len(pattern)))
    return compiled(pattern).search(text) is not None


def _find(meter: Meter, text: str, pattern: str) -> str:
    meter.charge(cost.regex(len(text), len(pattern)))
    match = compiled(pattern).search(text)
    return "" if match is None else str(match.group(0))


def _find_all(meter: Meter, text: str, pattern: str, limit: int = -1) -> tuple[Any, ...]:
    meter.charge(cost.regex(len(text), len(pattern)))
    if limit == 0:
        return ()
    found: list[Any] = []
    for match in compiled(pattern).finditer(text):
        if 0 < limit <= len(found):
            break
        found.append(str(match.group(0)))
    return tuple(found)


def _char_at(meter: Meter, text: str, index: int) -> str:
    _read(meter, text)
    if not 0 <= index <= len(text):
        raise CelEvaluationError(f"index out of range: {index}")
    return text[index : index + 1]


def _index_of(meter: Meter, text: str, part: str, offset: int = 0) -> int:
    _read(meter, text, part)
    if not 0 <= offset <= len(text):
        raise CelEvaluationError(f"index out of range: {offset}")
    return text.find(part, offset)


def _last_index_of(meter: Meter, text: str, part: str, offset: int | None = None) -> int:
    _read(meter, text, part)
    if offset is None:
        return text.rfind(part)
    if not 0 <= offset < max(len(text), 1):
        raise CelEvaluationError(f"index out of range: {offset}")
    return text.rfind(part, 0, offset + len(part))


def _ascii_case(upper: bool) -> Impl:
    table = {
        ord(c): ord(c.upper() if upper else c.lower())
        for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    }

    def run(meter: Meter, text: str) -> str:
        _read(meter, text, text)
        return text.translate(table)

    return run


def _replace(meter: Meter, text: str, old: str, new: str, count: int = -1) -> str:
    _read(meter, text)
    occurrences = len(text) + 1 if not old else text.count(old)
    if count >= 0:
        occurrences = min(occurrences, count)
    # The result's size is paid for before it is built: "a".replace("", big) in a
    # loop could otherwise fill memory within the cost of a few calls.
    meter.charge(cost.traversal(len(text) + occurrences * len(new)))
    if count < 0:
        return text.replace(old, new)
    return text.replace(old, new, count)


def _split(meter: Meter, text: str, separator: str, limit: int = -1) -> tuple[Any, ...]:
    _read(meter, text, separator)
    parts = len(text) if not separator else text.count(separator) + 1
    meter.charge(parts)
    if limit == 0:
        return ()
    if not separator:
        # Go's strings.SplitN with "" splits into characters, the last holding the rest.
        pieces = list(text)
        if limit > 0 and len(pieces) > limit:
            pieces = [*pieces[: limit - 1], "".join(pieces[limit - 1 :])]
        return tuple(pieces)
    return tuple(text.split(separator, limit - 1 if limit > 0 else -1))


def _substring(meter: Meter, text: str, start: int, end: int | None = None) -> str:
    _read(meter, text)
    stop = len(text) if end is None else end
    if not 0 <= start <= len(text) or not 0 <= stop <= len(text):
        raise CelEvaluationError(f"index out of range: {start if start > len(text) else stop}")
    if start > stop:
        raise CelEvaluationError(f"invalid substring range. start: {start}, end: {stop}")
    return text[start:stop]


# Go's unicode.IsSpace, which strings.TrimSpace uses.
_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _trim(meter: Meter, text: str) -> str:
    _read(meter, text)
    return text.strip(_SPACE)


def _join(meter: Meter, items: tuple[Any, ...], separator: str = "") -> str:
    if not all(type(item) is str for item in items):
        raise CelEvaluationError("join: the list holds a value that is not a string")
    total = sum(len(item) for item in items) + len(separator) * max(len(items) - 1, 0)
    meter.charge(1 + cost.traversal(total))
    return separator.join(items)


def _quote(meter: Meter, text: str) -> str:
    _read(meter, text, text)
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\a", "\\a")
        .replace("\b", "\\b")
        .replace("\f", "\\f")
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
        .replace("\v", "\\v")
    )
    return f'"{escaped}"'


def _declare() -> None:
    declare("contains", (S, S), B, _contains, member=True)
    declare("startsWith", (S, S), B, _starts, member=True)
    declare("endsWith", (S, S), B, _ends, member=True)
    global_and_member("matches", (S, S), B, _matches)
    declare("find", (S, S), S, _find, member=True)
    declare("findAll", (S, S), LIST_S, _find_all, member=True)
    declare("findAll", (S, S, N), LIST_S, _find_all, member=True)
    declare("charAt", (S, N), S, _char_at, member=True)
    declare("indexOf", (S, S), N, _index_of, member=True)
    declare("indexOf", (S, S, N), N, _index_of, member=True)
    declare("lastIndexOf", (S, S), N, _last_index_of, member=True)
    declare("lastIndexOf", (S, S, N), N, _last_index_of, member=True)
    declare("lowerAscii", (S,), S, _ascii_case(False), member=True)
    declare("upperAscii", (S,), S, _ascii_case(True), member=True)
    declare("replace", (S, S, S), S, _replace, member=True)
    declare("replace", (S, S, S, N), S, _replace, member=True)
    declare("split", (S, S), LIST_S, _split, member=True)
    declare("split", (S, S, N), LIST_S, _split, member=True)
    declare("substring", (S, N), S, _substring, member=True)
    declare("substring", (S, N, N), S, _substring, member=True)
    declare("trim", (S,), S, _trim, member=True)
    declare("join", (LIST_S,), S, _join, member=True)
    declare("join", (LIST_S, S), S, _join, member=True)
    declare("strings.quote", (S,), S, _quote, member=False)


_declare()
