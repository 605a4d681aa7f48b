"""The lean HTTP/1.1 client for writes (scheduler/kube/lean_http.py): the same answers as
the aiohttp path against the API emulator, and its own framing, reuse, failures and TLS
against bare servers that send exactly the bytes a test wants."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client as k8s

from scheduler.kube.client import ApiError, KubeClient, lean_ssl_context
from scheduler.kube.lean_http import (
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    LeanAnswer,
    LeanPool,
    _Connection,
)
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator, api_client
from tests.waiting import eventually, fails_if_stuck

Outcome = tuple[str, Any]


def _normalized(obj: Any) -> Any:
    """An answer without what differs between two emulators for the same write."""
    if isinstance(obj, dict):
        return {
            key: _normalized(value)
            for key, value in obj.items()
            if key not in ("uid", "creationTimestamp", "time", "resourceVersion")
        }
    if isinstance(obj, list):
        return [_normalized(item) for item in obj]
    return obj


def _unstamped(value: Any) -> Any:
    """`value` without the wall-clock stamps the API server writes."""
    if isinstance(value, dict):
        return {k: _unstamped(v) for k, v in value.items() if k != "lastTransitionTime"}
    if isinstance(value, list | tuple):
        return [_unstamped(item) for item in value]
    return value


async def _writes(kube: KubeClient) -> list[Outcome]:
    """A run of writes of every kind the scheduler sends, good and refused ones."""
    pods = "/api/v1/namespaces/default/pods"
    pod = pod_obj("lean-a", gpus=1)
    pod.get("metadata", {}).pop("resourceVersion", None)
    steps: list[tuple[str, str, Any, str]] = [
        ("POST", pods, pod, "application/json"),
        ("POST", pods, pod, "application/json"),  # 409 AlreadyExists
        (
            "PATCH",
            f"{pods}/lean-a",
            {"metadata": {"labels": {"team": "a"}}},
            "application/merge-patch+json",
        ),
        ("PATCH", f"{pods}/missing", {"metadata": {}}, "application/merge-patch+json"),  # 404
        (
            "POST",
            f"{pods}/lean-a/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "lean-a", "namespace": "default"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n0"},
            },
            "application/json",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "lean-a.1", "namespace": "default"},
                "involvedObject": {"kind": "Pod", "name": "lean-a", "namespace": "default"},
                "reason": "Scheduled",
                "message": "Successfully assigned default/lean-a to n0 \u2713",
                "type": "Normal",
            },
            "application/json",
        ),
        ("DELETE", f"{pods}/lean-a", None, "application/json"),
        ("DELETE", f"{pods}/lean-a", None, "application/json"),  # 404
    ]
    outcomes: list[Outcome] = []
    for method, path, body, content_type in steps:
        try:
            answer = await kube.request_json(method, path, body=body, content_type=content_type)
        except ApiError as err:
            outcomes.append(("error", (err.status, err.reason, err.message)))
        else:
            outcomes.append(("ok", _normalized(answer)))
    return outcomes


@pytest.mark.asyncio
async def test_writes_answer_the_same_through_the_lean_client_and_aiohttp() -> None:
    results: dict[bool, list[Outcome]] = {}
    for lean in (True, False):
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=8))
            async with KubeClient(await api_client(api.base_url), lean_writes=lean) as kube:
                results[lean] = await _writes(kube)
                pool = kube._transport.lean
                assert pool is not None
                # The lean path was taken (or not), on one kept-alive connection.
                assert pool.connections_made == (1 if lean else 0)
            assert api.get_pod("default", "lean-a") is None
    assert [kind for kind, _ in results[True]] == [
        "ok", "error", "ok", "error", "ok", "ok", "ok", "error"
    ]  # fmt: skip
    # The emulator stamps conditions with the wall clock: the two runs may straddle a
    # second, so the stamps are not part of the comparison.
    assert _unstamped(results[True]) == _unstamped(results[False])


@pytest.mark.asyncio
async def test_reads_and_a_proxied_client_stay_on_aiohttp() -> None:
    async with KubeApiEmulator() as api:
        api.put_node(node_obj("n0", gpus=8))
        async with KubeClient(await api_client(api.base_url)) as kube:
            await kube.request_json("GET", "/api/v1/nodes/n0")
            pool = kube._transport.lean
            assert pool is not None and pool.connections_made == 0
        configuration = k8s.Configuration(host=api.base_url)
        configuration.proxy = "http://127.0.0.1:9"  # nothing listens; never reached
        async with KubeClient(k8s.ApiClient(configuration)) as proxied:
            proxied._transport.open()
            assert proxied._transport.lean is None


class BareServer:
    def __init__(self, answers: list[bytes | None], hold: bool) -> None:
        # One entry a request, in order; None: close the connection without answering.
        # `hold`: once all are sent, keep the connection open until the client closes it.
        self.answers = answers
        self.hold = hold
        self.requests: list[bytes] = []
        self.connections = 0
        self.per_connection = 0  # > 0: close each connection after this many answers

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while self.answers and not 0 < self.per_connection <= answered:
                answered += 1
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
            else:
                if self.hold:
                    await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest_asyncio.fixture
async def bare() -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.Server] = []

    async def start(
        answers: list[bytes | None], context: ssl.SSLContext | None = None, hold: bool = False
    ) -> tuple[BareServer, int]:
        bare_server = BareServer(answers, hold)
        server = await asyncio.start_server(bare_server.handle, "127.0.0.1", 0, ssl=context)
        servers.append(server)
        return bare_server, server.sockets[0].getsockname()[1]

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def _request(path: str = "/x") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{{}}".encode()


def _length_answer(body: bytes, status: str = "201 Created", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


@pytest.mark.asyncio
async def test_framings_and_connection_reuse(bare: Callable[..., Any]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n6\r\n:[1,2]\r\n1\r\n}\r\n0\r\n\r\n'
    )
    server, port = await bare(
        [
            _length_answer(b'{"kind":"Status"}'),
            chunked,
            b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
            _length_answer(b"{}", "409 Conflict", "Connection: close\r\n"),
            b'HTTP/1.1 200 OK\r\n\r\n{"until":"close"}',
        ]
    )
    pool = LeanPool("127.0.0.1", port, None, None, limit=4)
    try:
        answers = [await pool.request(_request(), None) for _ in range(3)]
        assert [(a.status, a.body) for a in answers] == [
            (201, b'{"kind":"Status"}'),
            (200, b'{"a":[1,2]}'),
            (204, b""),
        ]
        assert pool.connections_made == 1  # kept alive across the three
        conflict = await pool.request(_request(), None)
        assert (conflict.status, conflict.reason, conflict.body) == (409, "Conflict", b"{}")
        # `Connection: close` was honoured: the next request opens a new connection,
        # and the server's close ends its body (no length, not chunked).
        until_close = await pool.request(_request(), None)
        assert until_close.body == b'{"until":"close"}'
        assert pool.connections_made == 2
        assert len(server.requests) == 5 and all(r.endswith(b"{}") for r in server.requests)
    finally:
        await pool.close()


@pytest.mark.asyncio
async def test_a_cut_connection_fails_and_is_not_reused(bare: Callable[..., Any]) -> None:
    server, port = await bare([_length_answer(b"{}"), None, _length_answer(b"[]")])
    pool = LeanPool("127.0.0.1", port, None, None, limit=4)
    try:
        assert (await pool.request(_request(), None)).body == b"{}"
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pool.request(_request(), None)
        # Never sent twice: the server saw the cut request once; the next one opens anew.
        assert len(server.requests) == 2
        assert (await pool.request(_request(), None)).body == b"[]"
        assert pool.connections_made == 2 and server.connections == 2
    finally:
        await pool.close()


@pytest.mark.asyncio
async def test_garbage_and_timeouts_drop_the_connection(bare: Callable[..., Any]) -> None:
    _, port = await bare([b"SSH-2.0-OpenSSH\r\n\r\n"])
    pool = LeanPool("127.0.0.1", port, None, None, limit=4)
    with pytest.raises(aiohttp.ClientPayloadError):
        await pool.request(_request(), None)
    await pool.close()

    # An answer cut inside its body (Content-Length 10, 2 bytes sent, then nothing).
    _, port = await bare([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"], hold=True)
    pool = LeanPool("127.0.0.1", port, None, None, limit=4)
    try:
        with pytest.raises(TimeoutError):
            await pool.request(_request(), 0.2)
        assert pool._idle == [] and pool._open == set()
    finally:
        await pool.close()


@pytest.mark.asyncio
async def test_at_most_limit_connections_are_open(bare: Callable[..., Any]) -> None:
    _, port = await bare([_length_answer(b"{}")] * 12)
    pool = LeanPool("127.0.0.1", port, None, None, limit=3)
    try:
        answers = await asyncio.gather(*(pool.request(_request(), 5.0) for _ in range(12)))
        assert all(a.status == 201 for a in answers)
        assert pool.connections_made <= 3
    finally:
        await pool.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
@pytest.mark.asyncio
async def test_tls_with_the_configured_ca(bare: Callable[..., Any], tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    _, port = await bare([_length_answer(b'{"tls":true}')] * 2, server_context)

    configuration = k8s.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.ssl_ca_cert = str(cert)
    pool = LeanPool("127.0.0.1", port, lean_ssl_context(configuration), "localhost", limit=2)
    try:
        assert (await pool.request(_request(), 5.0)).body == b'{"tls":true}'
    finally:
        await pool.close()

    # A server the configured CA did not sign is refused, as aiohttp refuses it.
    untrusted = lean_ssl_context(k8s.Configuration(host=f"https://127.0.0.1:{port}"))
    pool = LeanPool("127.0.0.1", port, untrusted, "localhost", limit=2)
    try:
        with pytest.raises(ssl.SSLError):
            await pool.request(_request(), 5.0)
    finally:
        await pool.close()


@pytest.mark.asyncio
async def test_an_idle_connection_the_server_closed_is_not_used(bare: Callable[..., Any]) -> None:
    # As an API server does with a keep-alive connection left idle too long.
    server, port = await bare([_length_answer(b"{}"), _length_answer(b"[]")])
    server.per_connection = 1
    pool = LeanPool("127.0.0.1", port, None, None, limit=4)
    try:
        assert (await pool.request(_request(), 5.0)).body == b"{}"
        await eventually(
            lambda: not pool._idle or pool._idle[0].closed, "the close reached the client"
        )
        assert (await pool.request(_request(), 5.0)).body == b"[]"
        assert pool.connections_made == 2 and len(server.requests) == 2
    finally:
        await pool.close()


# --- a hostile or broken proxy: strict framing (RFC 9112), never a hang -----------------
class _Sink(asyncio.Transport):
    """A transport that swallows what the connection writes."""

    def write(self, data: Any) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def _answer_to(pieces: list[bytes]) -> LeanAnswer | BaseException:
    """What a connection makes of an answer arriving in `pieces`, then a close: the
    LeanAnswer, or the exception its request fails with. Driven synchronously, so that a
    parser that loops forever fails the test (fails_if_stuck) instead of hanging it."""
    loop = asyncio.new_event_loop()
    try:
        connection = _Connection()
        connection.connection_made(_Sink())
        waiter: asyncio.Future[LeanAnswer] = loop.create_future()
        connection._waiter = waiter
        with fails_if_stuck():
            for piece in pieces:
                if waiter.done():
                    break
                connection.data_received(piece)
            connection.connection_lost(None)
        assert waiter.done(), "a closed connection must settle its request"
        error = waiter.exception()
        return error if error is not None else waiter.result()
    finally:
        loop.close()


_CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

MALFORMED = {
    # -6: back to the start of its own line, where the old parser read it again forever.
    "negative chunk size": _CHUNKED_HEAD + b"-6\r\nxx\r\n0\r\n\r\n",
    "0x chunk size": _CHUNKED_HEAD + b"0x2\r\n{}\r\n0\r\n\r\n",
    "underscored chunk size": _CHUNKED_HEAD + b"1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n",
    "signed chunk size": _CHUNKED_HEAD + b"+2\r\n{}\r\n0\r\n\r\n",
    "spaced chunk size": _CHUNKED_HEAD + b" 2\r\n{}\r\n0\r\n\r\n",
    "chunk data without CRLF": _CHUNKED_HEAD + b"2\r\n{}xx0\r\n\r\n",
    "chunk-size line without end": _CHUNKED_HEAD + b"2;" + b"e" * (MAX_LINE_BYTES + 10),
    "chunk larger than any answer": _CHUNKED_HEAD + b"ffffffffff\r\n{}",
    "signed length": b"HTTP/1.1 200 OK\r\nContent-Length: +1_0\r\n\r\n0123456789",
    "underscored length": b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789",
    "negative length": b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}",
    "differing duplicate lengths": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 4\r\n\r\n{}{}"
    ),
    "differing lengths in one list": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 4\r\n\r\n{}{}",
    "length and chunked": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n"
    ),
    "a coding that is not chunked": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: notchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    ),
    "chunked not last": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    ),
    "space before the colon": b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}",
    "folded header": b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 2\r\n\r\n{}",
    "header without colon": b"HTTP/1.1 200 OK\r\nContent-Length 2\r\n\r\n{}",
    "status code not three digits": b"HTTP/1.1 20 OK\r\nContent-Length: 2\r\n\r\n{}",
    "status code of other digits": b"HTTP/1.1 2\xb2\xb2 OK\r\n\r\n",  # latin-1 superscript 2
    "head without end": b"HTTP/1.1 200 OK\r\nX: " + b"a" * (MAX_HEAD_BYTES + 10),
}


@pytest.mark.parametrize("answer", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_answer_is_a_clear_error(answer: bytes) -> None:
    """Each of these was taken as an answer (or looped forever: a negative chunk size)
    before framing was parsed as RFC 9112 writes it."""
    outcome = _answer_to([answer])
    assert isinstance(outcome, aiohttp.ClientPayloadError), outcome


def test_strict_parsing_still_reads_what_servers_send() -> None:
    well_formed = {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}": b"{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n{}": b"{}",
        b"HTTP/1.1 200 OK\r\ncontent-length:2 \r\n\r\n{}": b"{}",
        b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\n{}": b"{}",
        _CHUNKED_HEAD + b'A;name=value ; q="a \\" b"\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n': (
            b"0123456789"
        ),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n": b"{}",
    }
    for answer, body in well_formed.items():
        for pieces in ([answer], [answer[i : i + 1] for i in range(len(answer))]):
            outcome = _answer_to(pieces)
            assert isinstance(outcome, LeanAnswer), (answer, outcome)
            assert outcome.body == body


@pytest.mark.asyncio
async def test_a_malformed_answer_from_a_server_fails_the_request_and_drops_it(
    bare: Callable[..., Any],
) -> None:
    """Over a real connection, the server keeping it open: the request ends with the
    error at once, and the connection is not kept for the next request."""
    _, port = await bare([_CHUNKED_HEAD + b"0x2\r\n{}\r\n0\r\n\r\n"], hold=True)
    pool = LeanPool("127.0.0.1", port, None, None, limit=4)
    try:
        with pytest.raises(aiohttp.ClientPayloadError):
            await pool.request(_request(), 30.0)
        assert pool._open == set() and pool._idle == []
    finally:
        await pool.close()


_VALID_ANSWERS = [
    _length_answer(b'{"kind":"Status"}'),
    _CHUNKED_HEAD + b'4;ext=1\r\n{"a"\r\n6\r\n:[1,2]\r\n1\r\n}\r\n0\r\n\r\n',
    b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b'HTTP/1.1 200 OK\r\n\r\n{"until":"close"}',
]
_HOSTILE_TOKENS = [
    b"-6", b"-8;x", b"-2", b"-1", b"0x5", b"+1_0", b"1_0", b" 5", b"5 ", b"\xd9\xa3",
    b"ffffffffffffffffff",
    b"5;", b"5;a=\"", b"\r\n", b"\r", b"\n", b"\x00", b":", b",", b"chunked", b"0\r\n\r\n",
    b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n", b"HTTP/1.1 ", b"\r\n\r\n",
]  # fmt: skip


_CHUNK_LINES = [
    b"-6\r\n", b"-8;x\r\n", b"-1\r\n", b"0x2\r\n", b"2\r\n{}\r\n", b"2;a=b\r\n{}\r\n",
    b"2\r\n{}", b"1_0\r\n", b"+2\r\n", b"ffffffffffffffff\r\n", b"0\r\n", b"0\r\n\r\n",
    b"X: 1\r\n", b"\r\n",
]  # fmt: skip


@st.composite
def _garbled(draw: st.DrawFn) -> list[bytes]:
    """A valid answer, a chunked body of hostile chunk lines, or plain random bytes;
    then bytes replaced, inserted (hostile tokens among them) and cut; split into random
    pieces."""
    start = draw(st.sampled_from(["valid", "chunks", "random"]))
    if start == "valid":
        answer = bytearray(draw(st.sampled_from(_VALID_ANSWERS)))
    elif start == "chunks":
        lines = draw(st.lists(st.sampled_from(_CHUNK_LINES), min_size=1, max_size=6))
        answer = bytearray(_CHUNKED_HEAD + b"".join(lines))
    else:
        answer = bytearray(draw(st.binary(max_size=200)))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(answer)))
        edit = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
        if edit == "insert":
            piece = draw(st.sampled_from(_HOSTILE_TOKENS) | st.binary(min_size=1, max_size=4))
            answer[at:at] = piece
        elif edit == "replace" and at < len(answer):
            answer[at] = draw(st.integers(0, 255))
        elif edit == "delete":
            del answer[at : at + draw(st.integers(1, 4))]
        elif edit == "cut":
            del answer[at:]
    cuts = sorted(draw(st.lists(st.integers(0, len(answer)), max_size=6)))
    bounds = [0, *cuts, len(answer)]
    return [bytes(answer[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=400, deadline=None)
@given(_garbled())
def test_a_garbled_answer_ends_in_an_answer_or_a_clear_http_error(pieces: list[bytes]) -> None:
    """Whatever arrives, the request ends (no hang, no busy loop) with an answer or an
    aiohttp.ClientError, the errors the callers already handle; never anything else."""
    outcome = _answer_to(pieces)
    assert isinstance(outcome, (LeanAnswer, aiohttp.ClientError)), repr(outcome)
