"""Paged lists: `limit` and `continue`, as kube-apiserver serves them from etcd.

The first page of a list with `limit` fixes the answer: every later page comes from the
same resourceVersion, so the pages put together are one consistent list, whatever was
written in between. The emulator keeps that list (the serialized items matching the
request, at that resourceVersion) under the continue token. The token expires as etcd's
revision does when it is compacted: here, when the resource's watch history has moved
past the list's resourceVersion (or the server restarted with a new history), and when
more lists are open than the emulator keeps. An expired token answers 410 Expired with
the real server's message, and the client starts its list over.

EMULATOR GUESS: the real token is an opaque base64 of {"v","rv","start"} with the last
key returned; here it names the kept list and the offset reached, which a client
cannot tell apart (it must treat the token as opaque).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
from collections import OrderedDict
from dataclasses import dataclass

from tests.kubeapi import errors

EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


@dataclass(frozen=True)
class Page:
    items: list[bytes]
    resource_version: int
    continue_token: str  # "" on the last page
    remaining: int | None  # remainingItemCount, when the server can tell


@dataclass
class _OpenList:
    items: list[bytes]
    resource_version: int
    counted: bool  # remainingItemCount is only sent for lists without selectors


class Pager:
    """The open paged lists of one emulator."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._open: OrderedDict[int, _OpenList] = OrderedDict()
        self._ids = itertools.count(1)

    def first(self, items: list[bytes], rv: int, limit: int, counted: bool) -> Page:
        """The first page of a list of `items` at `rv`."""
        if limit <= 0 or len(items) <= limit:
            return Page(items, rv, "", None)
        list_id = next(self._ids)
        self._open[list_id] = _OpenList(items, rv, counted)
        while len(self._open) > self.keep:
            self._open.popitem(last=False)
        return self._page(list_id, self._open[list_id], 0, limit)

    def next(self, token: str, limit: int, floor: int) -> Page:
        """The page after `token`; 410 when the list's resourceVersion is older than
        `floor` (compacted) or the list is no longer kept."""
        list_id, offset = _decode(token)
        open_list = self._open.get(list_id)
        if open_list is None or open_list.resource_version < floor:
            self._open.pop(list_id, None)
            raise errors.ApiError(410, "Expired", EXPIRED_MESSAGE)
        self._open.move_to_end(list_id)
        return self._page(list_id, open_list, offset, limit)

    def forget(self) -> None:
        """A restart: every open list is gone."""
        self._open.clear()

    def _page(self, list_id: int, open_list: _OpenList, offset: int, limit: int) -> Page:
        end = len(open_list.items) if limit <= 0 else offset + limit
        items = open_list.items[offset:end]
        if end >= len(open_list.items):
            del self._open[list_id]
            return Page(items, open_list.resource_version, "", None)
        remaining = len(open_list.items) - end if open_list.counted else None
        return Page(items, open_list.resource_version, _encode(list_id, end), remaining)


def _encode(list_id: int, offset: int) -> str:
    raw = json.dumps({"list": list_id, "offset": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode(token: str) -> tuple[int, int]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(decoded["list"]), int(decoded["offset"])
    except (ValueError, KeyError, TypeError, binascii.Error) as err:
        raise errors.bad_request(f"invalid continue token: {err}") from err
