"""Reading API objects defensively: the scheduler never crashes on a user's object.

The API server validates what it stores, so real objects are well formed; these helpers
keep the cache safe against anything else (hand-written fixtures, a buggy proxy, a
future field change): a part that is not the mapping it should be reads as empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EMPTY: Mapping[str, Any] = {}


def mapping(value: object) -> Mapping[str, Any]:
    """`value` when it is a JSON object, otherwise an empty one."""
    if type(value) is dict:  # what JSON decodes to: spares the slower ABC check
        return value
    return value if isinstance(value, Mapping) else EMPTY


def metadata(obj: object) -> Mapping[str, Any]:
    if type(obj) is dict:  # as in mapping(): read on every event, several times
        meta = obj.get("metadata")
        if type(meta) is dict:
            return meta
    return mapping(mapping(obj).get("metadata"))


def text_field(part: Mapping[str, Any], key: str, limit: int, default: str = "") -> str:
    """part[key] when it is a non-empty string, cut to `limit` characters; else
    `default`. For names, uids, versions: str() of a hostile value can raise (an int of
    5,000 digits, a list nested thousands deep); the API server only sends strings."""
    value = part.get(key)
    return value[:limit] if type(value) is str and value else default


def object_uid(obj: object) -> str:
    """The object's uid, or namespace/name when it has none (tests, the simulator)."""
    meta = metadata(obj)
    uid = text_field(meta, "uid", 128)
    if uid:
        return uid
    return f"{text_field(meta, 'namespace', 253)}/{text_field(meta, 'name', 253)}"


MALFORMED = (AttributeError, TypeError, ValueError, KeyError, OverflowError, RecursionError)
"""What reading a malformed object can raise; parse functions turn it into a problem.
(OverflowError: a float too large for an int or a date; RecursionError: str() of a
value nested thousands deep.)"""
