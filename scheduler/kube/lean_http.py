"""A small HTTP/1.1 keep-alive client for the scheduler's writes to the API server.

Why: every bound pod costs two small POSTs (its Binding and its Scheduled event), and
through aiohttp each one cost about 130 µs of CPU on the benchmark machine (building the
request object, URL parsing, cookie and trace plumbing, the response object and its
reader), which was a third of the scheduler's CPU for a stream of one-pod gangs
(docs/benchmarks.md, "Kubernetes adapter"). Writing the request bytes on an asyncio
transport and parsing the answer in a protocol costs about 40 µs. Reads, lists and
watches stay on aiohttp: they are few, and a watch streams.

What it does, and no more: one request at a time per connection (no pipelining), a pool
of idle connections capped at `limit` open ones, TLS through the caller's SSLContext,
answers framed by Content-Length, chunked transfer encoding, or the connection's close.
It sends no Accept-Encoding, so the server does not compress.

Framing is read as strictly as RFC 9112 writes it, since a proxy between us and the API
server may be broken or hostile: chunk-size is 1*HEXDIG with an optional chunk-ext,
Content-Length 1*DIGIT (duplicates must agree), Transfer-Encoding with Content-Length
or any coding but chunked is refused, the head, each chunk or trailer line and the body
are bounded, and parsing always moves forward (a negative chunk size once sent it back
to the start of its line, forever, on the event loop, where no timeout could end it).
Whatever arrives ends as an answer or an aiohttp.ClientError. A connection that is
closed, answered `Connection: close`, or whose request failed or timed out is dropped,
never reused. A request is never sent twice: a POST is not idempotent, and the callers
(the binder's re-read and retry, the feedback writer's error paths) decide what a failed
write means, exactly as they do for aiohttp's errors, which these are (a cut connection
is `aiohttp.ServerDisconnectedError`, a refused one an `OSError`, a timeout
`TimeoutError`).
"""

from __future__ import annotations

import asyncio
import re
import ssl
from dataclasses import dataclass

import aiohttp

# Bounds on what an answer may make us buffer (RFC 9112 leaves them to the recipient):
# a head, a chunk-size line or trailer line, and a body larger than these is not an API
# server's answer, and is refused instead of buffered without end. The API server keeps
# objects under 1.5 MiB (etcd's limit) and a write's answer is one object.
MAX_HEAD_BYTES = 64 * 1024
MAX_LINE_BYTES = 4 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
_NO_BODY_STATUSES = frozenset({204, 304})

# RFC 9112 4: status-line = HTTP-version SP status-code SP [ reason-phrase ]; a missing
# SP after the code is tolerated (some servers send none with an empty reason).
_STATUS_LINE = re.compile(r"HTTP/1\.([01]) ([0-9]{3})(?: (.*))?", re.DOTALL)
# RFC 9110 5.1 and 5.5: field-name = token, then ":", then a field value of visible
# characters, spaces and tabs (obs-text allowed). No obs-fold: a line that starts with a
# space, or a space before the colon, is refused (RFC 9112 5.1, 5.2).
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_FIELD_LINE = re.compile(rf"({_TOKEN}):(.*)", re.DOTALL)
_FIELD_TEXT = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
# RFC 9112 6.3 and RFC 9110 8.6: Content-Length = 1*DIGIT (18 digits keep it an int64).
_DIGITS = re.compile(r"[0-9]{1,18}")
# RFC 9112 7.1: chunk-size = 1*HEXDIG (16 digits keep it an int64), then chunk-ext =
# *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ), whose value is a token
# or a quoted-string.
_QUOTED = r'"(?:[^"\\\x00-\x08\x0a-\x1f\x7f]|\\[\t\x20-\x7e\x80-\xff])*"'
_CHUNK_EXT = rf"[ \t]*;[ \t]*{_TOKEN}(?:[ \t]*=[ \t]*(?:{_TOKEN}|{_QUOTED}))?"
_CHUNK_LINE = re.compile(rf"([0-9A-Fa-f]{{1,16}})(?:{_CHUNK_EXT})*")


class BadAnswer(ValueError):
    """The bytes are not an HTTP/1.1 answer we accept (malformed, ambiguous, too large)."""


@dataclass(frozen=True)
class LeanAnswer:
    status: int
    reason: str
    body: bytes


class _Framing:
    """Where the body of the answer being read ends, once its head is in."""

    LENGTH = 0
    CHUNKED = 1
    UNTIL_CLOSE = 2


class _Connection(asyncio.Protocol):
    """One keep-alive connection; `send` writes a request and waits for its answer.

    The answer is parsed as it arrives, each byte looked at a bounded number of times
    (a chunked body resumes where the last read stopped), and every step either consumes
    bytes or waits for more: no input, however garbled, keeps the event loop busy longer
    than its size warrants, and anything not framed as RFC 9112 frames it is a BadAnswer.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[LeanAnswer] | None = None
        self._keep_alive = True
        self._reset()

    def _reset(self) -> None:
        self._buffer.clear()
        self._head_end = -1  # index just past the blank line that ends the head
        self._status = 0
        self._reason = ""
        self._framing = _Framing.LENGTH
        self._length = 0
        # A chunked body: where the next chunk-size (or trailer) line starts, the data
        # so far, and whether the last chunk was seen (the trailer section follows).
        self._position = 0
        self._body = bytearray()
        self._trailers = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            # Bytes nobody asked for (or after a timed-out request): the stream is out
            # of step with our requests; the connection cannot be reused.
            self.abort()
            return
        self._buffer += data
        try:
            answer = self._parse(eof=False)
        except BadAnswer as err:
            self._fail(aiohttp.ClientPayloadError(f"not an HTTP/1.1 answer: {err}"))
            return
        if answer is not None:
            self._finish(answer)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost settles the waiter

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            answer = self._parse(eof=True)
        except BadAnswer as err:
            waiter.set_exception(aiohttp.ClientPayloadError(f"not an HTTP/1.1 answer: {err}"))
            return
        if answer is not None:
            waiter.set_result(answer)
        else:
            waiter.set_exception(
                aiohttp.ServerDisconnectedError(f"connection closed before the answer: {exc}")
            )

    # the requests
    async def send(self, request: bytes) -> LeanAnswer:
        assert self.transport is not None
        waiter: asyncio.Future[LeanAnswer] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self._reset()
        self.transport.write(request)
        return await waiter

    @property
    def reusable(self) -> bool:
        return not self.closed and self._keep_alive and self.transport is not None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _finish(self, answer: LeanAnswer) -> None:
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _fail(self, err: Exception) -> None:
        waiter = self._waiter
        self._waiter = None
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(err)

    def _parse(self, eof: bool) -> LeanAnswer | None:
        """The answer when all of it is in the buffer, else None; BadAnswer when the
        bytes are not an HTTP/1.1 answer (or one larger than the bounds above)."""
        buffer = self._buffer
        while self._head_end < 0:
            # Resumed where the last read left off (less the 3 bytes a split blank line
            # may have ended with), so a head that trickles in is scanned once.
            end = buffer.find(b"\r\n\r\n", self._position)
            if end < 0 or end > MAX_HEAD_BYTES:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise BadAnswer("answer head too large")
                self._position = max(0, len(buffer) - 3)
                return None
            self._read_head(bytes(buffer[:end]))
            if 100 <= self._status < 200:
                # An interim answer (103 Early Hints, a 100 Continue we did not ask
                # for): no body; the real answer follows it.
                del buffer[: end + 4]
                self._position = 0
                continue
            self._head_end = self._position = end + 4
        start = self._head_end
        if self._framing == _Framing.LENGTH:
            if len(buffer) - start < self._length:
                return None
            return self._answer(bytes(buffer[start : start + self._length]))
        if self._framing == _Framing.UNTIL_CLOSE:
            if len(buffer) - start > MAX_BODY_BYTES:
                raise BadAnswer("answer body too large")
            return self._answer(bytes(buffer[start:])) if eof else None
        return self._chunked()

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        status = _STATUS_LINE.fullmatch(lines[0])
        if status is None or _FIELD_TEXT.fullmatch(status.group(3) or "") is None:
            raise BadAnswer(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self._status = int(status.group(2))
        self._reason = status.group(3) or ""
        fields: dict[str, list[str]] = {}
        for line in lines[1:]:
            found = _FIELD_LINE.fullmatch(line)
            value = found.group(2).strip(" \t") if found is not None else ""
            if found is None or _FIELD_TEXT.fullmatch(value) is None:
                raise BadAnswer(f"not a header field line: {line[:80]!r}")
            fields.setdefault(found.group(1).lower(), []).append(value)
        keep_alive = status.group(1) != "0"  # HTTP/1.0 closes unless it says otherwise
        for token in _list_tokens(fields.get("connection", [])):
            if token == "close":
                keep_alive = False
                break
            if token == "keep-alive":
                keep_alive = True
        codings = _list_tokens(fields.get("transfer-encoding", []))
        length = _content_length(fields.get("content-length"))
        # RFC 9112 6.3: 204 and 304 have no body whatever the head says; a
        # Transfer-Encoding with a Content-Length is an error (a smuggling attempt, or
        # a broken proxy); chunked must be the final coding (we ask for no other, and
        # decode no other); neither means "until the connection closes".
        if self._status in _NO_BODY_STATUSES:
            self._framing, self._length = _Framing.LENGTH, 0
        elif codings:
            if length is not None:
                raise BadAnswer("both Transfer-Encoding and Content-Length")
            if codings != ["chunked"]:
                raise BadAnswer(f"unsupported Transfer-Encoding: {', '.join(codings)[:80]!r}")
            self._framing = _Framing.CHUNKED
        elif length is not None:
            self._framing, self._length = _Framing.LENGTH, length
        else:
            self._framing, keep_alive = _Framing.UNTIL_CLOSE, False
        self._keep_alive = keep_alive

    def _chunked(self) -> LeanAnswer | None:
        """Resume reading a chunked body where the last call stopped (RFC 9112 7.1)."""
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n", self._position, self._position + MAX_LINE_BYTES + 2)
            if line_end < 0:
                if len(buffer) - self._position > MAX_LINE_BYTES:
                    raise BadAnswer("chunk-size or trailer line too long")
                return None
            line = bytes(buffer[self._position : line_end]).decode("latin-1")
            if self._trailers:
                # Trailer fields (none expected, none used) end with an empty line.
                self._position = line_end + 2
                if not line:
                    return self._answer(bytes(self._body))
                if _FIELD_LINE.fullmatch(line) is None:
                    raise BadAnswer(f"not a trailer field line: {line[:80]!r}")
                if self._position - self._head_end > MAX_BODY_BYTES:
                    raise BadAnswer("answer body too large")
                continue
            found = _CHUNK_LINE.fullmatch(line)
            if found is None:
                raise BadAnswer(f"not a chunk-size line: {line[:80]!r}")
            size = int(found.group(1), 16)
            if size == 0:
                self._trailers = True
                self._position = line_end + 2
                continue
            if len(self._body) + size > MAX_BODY_BYTES:
                raise BadAnswer("answer body too large")
            data_start = line_end + 2
            data_end = data_start + size
            if len(buffer) < data_end + 2:
                return None
            if buffer[data_end : data_end + 2] != b"\r\n":
                raise BadAnswer("chunk data not followed by CRLF")
            self._body += buffer[data_start:data_end]
            self._position = data_end + 2

    def _answer(self, body: bytes) -> LeanAnswer:
        return LeanAnswer(self._status, self._reason, body)


def _list_tokens(values: list[str]) -> list[str]:
    """The lowercased tokens of a comma-separated list header, over all its lines."""
    return [token.strip(" \t").lower() for value in values for token in value.split(",")]


def _content_length(values: list[str] | None) -> int | None:
    """Content-Length (RFC 9110 8.6): 1*DIGIT; several lines, or a list, all the same
    value is that value; differing values or anything but digits are an error."""
    if values is None:
        return None
    found = {token.strip(" \t") for value in values for token in value.split(",")}
    if len(found) != 1:
        raise BadAnswer(f"conflicting Content-Length values: {sorted(found)[:4]!r}")
    (text,) = found
    if _DIGITS.fullmatch(text) is None:
        raise BadAnswer(f"Content-Length is not 1*DIGIT: {text[:40]!r}")
    length = int(text)
    if length > MAX_BODY_BYTES:
        raise BadAnswer("answer body too large")
    return length


class LeanPool:
    """Connections to one API server (`host`, `port`, TLS when `ssl_context`), at most
    `limit` open at once, idle ones kept for the next request."""

    def __init__(
        self,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        limit: int,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(limit)
        self._open: set[_Connection] = set()
        self.connections_made = 0  # for tests and benchmarks: reuse shows here

    async def request(self, request: bytes, timeout: float | None) -> LeanAnswer:
        """Send `request` (a whole HTTP/1.1 request, head and body) and read its answer."""
        async with self._slots:
            if timeout is None:
                return await self._exchange(request)
            async with asyncio.timeout(timeout):
                return await self._exchange(request)

    async def _exchange(self, request: bytes) -> LeanAnswer:
        connection = await self._connection()
        try:
            answer = await connection.send(request)
        except BaseException:
            # Failed, timed out or cancelled half-way: the stream's state is unknown.
            connection.abort()
            self._open.discard(connection)
            raise
        if connection.reusable:
            self._idle.append(connection)
        else:
            connection.abort()
            self._open.discard(connection)
        return answer

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if connection.reusable and transport is not None and not transport.is_closing():
                return connection
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            _Connection,
            self.host,
            self.port,
            ssl=self.ssl_context,
            server_hostname=self.server_hostname if self.ssl_context is not None else None,
        )
        self.connections_made += 1
        self._open.add(protocol)
        return protocol

    async def close(self) -> None:
        for connection in list(self._open):
            if connection.transport is not None:
                connection.transport.close()
        self._open.clear()
        self._idle.clear()
