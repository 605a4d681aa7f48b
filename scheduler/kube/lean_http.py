"""A small HTTP/1.1 keep-alive client for the scheduler's writes to the API server.

Why: every bound pod costs two small POSTs (its Binding and its Scheduled event), and
through aiohttp each one cost about 130 µs of CPU on the benchmark machine (building the
request object, URL parsing, cookie and trace plumbing, the response object and its
reader), which was a third of the scheduler's CPU for a stream of one-pod gangs
(docs/benchmarks.md, "Cycle cost, third pass"). Writing the request bytes on an asyncio
transport and parsing the answer in a protocol costs about 40 µs. Reads, lists and
watches stay on aiohttp: they are few, and a watch streams.

What it does, and no more: one request at a time per connection (no pipelining), a pool
of idle connections capped at `limit` open ones, TLS through the caller's SSLContext,
answers framed by Content-Length, chunked transfer encoding, or the connection's close.
It sends no Accept-Encoding, so the server does not compress. A connection that is
closed, answered `Connection: close`, or whose request failed or timed out is dropped,
never reused. A request is never sent twice: a POST is not idempotent, and the callers
(the binder's re-read and retry, the feedback writer's error paths) decide what a failed
write means, exactly as they do for aiohttp's errors, which these are (a cut connection
is `aiohttp.ServerDisconnectedError`, a refused one an `OSError`, a timeout
`TimeoutError`).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import aiohttp

# An answer's head larger than this is not an API server's: refuse it instead of
# buffering without end.
MAX_HEAD_BYTES = 64 * 1024
_NO_BODY_STATUSES = frozenset({204, 304})


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
    """One keep-alive connection; `send` writes a request and waits for its answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._waiter: asyncio.Future[LeanAnswer] | None = None
        self._head_end = -1  # index just past the blank line that ends the head
        self._status = 0
        self._reason = ""
        self._framing = _Framing.LENGTH
        self._length = 0
        self._keep_alive = True

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
        except ValueError as err:
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
        except ValueError:
            answer = None
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
        self._buffer.clear()
        self._head_end = -1
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
        """The answer when all of it is in the buffer, else None; ValueError when the
        bytes are not an HTTP/1.1 answer."""
        buffer = self._buffer
        while self._head_end < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ValueError("answer head too large")
                return None
            self._read_head(bytes(buffer[:end]))
            if 100 <= self._status < 200:
                # An interim answer (103 Early Hints, a 100 Continue we did not ask
                # for): no body; the real answer follows it.
                del buffer[: end + 4]
                continue
            self._head_end = end + 4
        start = self._head_end
        if self._framing == _Framing.LENGTH:
            if len(buffer) - start < self._length:
                return None
            return self._answer(bytes(buffer[start : start + self._length]))
        if self._framing == _Framing.UNTIL_CLOSE:
            return self._answer(bytes(buffer[start:])) if eof else None
        return self._chunked(start)

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        self._status = int(code)
        self._reason = reason
        length: int | None = None
        chunked = False
        keep_alive = version != "HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
                if length < 0:
                    raise ValueError("negative Content-Length")
            elif name == "transfer-encoding":
                chunked = value.strip().lower().endswith("chunked")
            elif name == "connection":
                tokens = {token.strip().lower() for token in value.split(",")}
                if "close" in tokens:
                    keep_alive = False
                elif "keep-alive" in tokens:
                    keep_alive = True
        # RFC 9112 6.3: 204 and 304 have no body whatever the head says; chunked wins
        # over a Content-Length; neither means "until the connection closes".
        if self._status in _NO_BODY_STATUSES:
            self._framing, self._length = _Framing.LENGTH, 0
        elif chunked:
            self._framing = _Framing.CHUNKED
        elif length is not None:
            self._framing, self._length = _Framing.LENGTH, length
        else:
            self._framing, keep_alive = _Framing.UNTIL_CLOSE, False
        self._keep_alive = keep_alive

    def _chunked(self, start: int) -> LeanAnswer | None:
        buffer = self._buffer
        body = bytearray()
        position = start
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            size_text = bytes(buffer[position:line_end]).split(b";", 1)[0].strip()
            size = int(size_text, 16)  # ValueError on garbage
            position = line_end + 2
            if size == 0:
                # Trailer fields (none expected) end with an empty line.
                trailer_end = buffer.find(b"\r\n", position)
                while trailer_end > position:
                    position = trailer_end + 2
                    trailer_end = buffer.find(b"\r\n", position)
                if trailer_end < 0:
                    return None
                return self._answer(bytes(body))
            if len(buffer) < position + size + 2:
                return None
            body += buffer[position : position + size]
            position += size + 2

    def _answer(self, body: bytes) -> LeanAnswer:
        return LeanAnswer(self._status, self._reason, body)


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
