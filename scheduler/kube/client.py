"""The API client: kubernetes_asyncio for configuration, aiohttp for transport, raw JSON.

Why raw JSON: the generated client turns every response into model objects, and parsing
10,000 pods into models costs seconds; the cache reads plain dicts anyway.

Why not `ApiClient.call_api`: every request through it walks the body with
`sanitize_for_serialization`, and its aiohttp session is opened with `trust_env=True`,
which makes aiohttp read `~/.netrc` and the proxy variables in a worker thread for every
single request. Measured in bench/kube.py (1,000 nodes, 8,000 binds): over half of the
scheduler's CPU samples were in those threads. So `KubeClient` keeps what the ApiClient
was configured with (host, the TLS connector with client certificates and CA, the bearer
token with its refresh hook) and sends requests through a session of its own that shares
the ApiClient's connection pool, with the proxy decided once at start-up from the
configuration or, like client-go, from `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`.

Client-side rate limit: a token bucket (client-go's QPS and burst) in front of every
request. Each request takes one token when it starts, watches too; a long watch holds no
token.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp

from scheduler.kube.call_policy import CallPolicy, RetryOn
from scheduler.kube.decoding import PLAIN, Decoder, paused_gc_loads

# Narrowed: the loaders without the generated API (k8s_config.py says why).
from scheduler.kube.k8s_config import (
    ApiClient,
    Configuration,
    load_incluster_config,
    load_kube_config,
)
from scheduler.kube.lean_http import LeanPool

# Writes (every method but GET) go through the lean HTTP/1.1 client when no proxy is
# in the way (lean_http.py says why); GETs, lists and watches through aiohttp.
LEAN_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# One encoder for every body: `json.dumps` with separators builds a new one per call.
_encode_json = json.JSONEncoder(separators=(",", ":")).encode

JsonObject = dict[str, Any]
Query = Sequence[tuple[str, str]]

JSON = "application/json"
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
DEFAULT_MAX_CONNECTIONS = 100
DEFAULT_PAGE_SIZE = 500
# Shown in the API server's audit log and in managedFields' manager names.
USER_AGENT = "gang-scheduler"


class ApiError(Exception):
    """A non-2xx answer (or a watch ERROR event), with the API's Status when it sent one."""

    def __init__(self, status: int, reason: str, message: str, body: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body

    @classmethod
    def from_status(cls, status: Mapping[str, Any], http_status: int = 0) -> ApiError:
        """From a `kind: Status` object; `code` wins over the HTTP status when present."""
        code = status.get("code")
        return cls(
            code if isinstance(code, int) and not isinstance(code, bool) else http_status,
            str(status.get("reason") or ""),
            str(status.get("message") or ""),
            status,
        )

    @property
    def gone(self) -> bool:
        """410: the resourceVersion (or continue token) is too old; relist."""
        return self.status == 410 or self.reason in ("Expired", "Gone")


class WatchBroken(Exception):
    """The watch stream ended without the server finishing it (connection cut, read
    timeout, an undecodable line)."""


# Which failures of a call are worth another try (call_policy.py says when a call may be
# retried at all).
def never(err: BaseException) -> bool:
    """Not retried: a write whose repeat could land twice."""
    return False


def transient(err: BaseException) -> bool:
    """No answer in time, a dropped connection, a 5xx or a 429: the server may answer
    the next try."""
    if isinstance(err, ApiError):
        return err.status >= 500 or err.status == 429
    return isinstance(err, (TimeoutError, aiohttp.ClientError, OSError))


def transient_not_refused(err: BaseException) -> bool:
    """As `transient`, but a 429 is an answer (an eviction a PodDisruptionBudget
    refuses), not a failure to retry."""
    return transient(err) and not (isinstance(err, ApiError) and err.status == 429)


class TokenBucket:
    """client-go's token bucket: `qps` tokens a second, up to `burst` saved up.

    A caller that finds no token reserves the next one (the balance goes negative) and
    sleeps until it is due, so waiters are served in arrival order without a lock: the
    event loop runs one coroutine at a time and nothing awaits between check and take.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token; returns how long to wait before using it."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)


@dataclass(frozen=True)
class ListResult:
    items: list[JsonObject]
    resource_version: str


@dataclass(frozen=True)
class ListPage:
    items: list[JsonObject]
    resource_version: str
    first: bool  # the first page of a list (again, after an expired continue token)
    last: bool


class _Transport:
    """The connection to the API server, shared by the KubeClients made from one
    ApiClient: its configuration, and a session opened on the first request (aiohttp
    wants a running event loop) that uses the ApiClient's connection pool."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.session: aiohttp.ClientSession | None = None
        self.proxy: str | None = None
        self.host = ""
        self.lean: LeanPool | None = None
        self.lean_prefix = ""  # a path the host URL carries (a proxying front end's)
        self.lean_head = ""  # the header lines every lean request starts with

    def open(self) -> aiohttp.ClientSession:
        if self.session is None:
            configuration = self.api.configuration
            pool: aiohttp.ClientSession = self.api.rest_client.pool_manager
            self.host = str(configuration.host or "")
            self.proxy = configuration.proxy or environment_proxy(self.host)
            self.session = aiohttp.ClientSession(
                connector=pool.connector,
                connector_owner=False,
                trust_env=False,
                # A watch event carries a whole object; etcd allows up to 1.5 MiB.
                read_bufsize=2**21,
            )
            if self.proxy is None:
                self._open_lean(configuration)
        return self.session

    def _open_lean(self, configuration: Configuration) -> None:
        parts = urlsplit(self.host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return
        secure = parts.scheme == "https"
        self.lean = LeanPool(
            parts.hostname,
            parts.port or (443 if secure else 80),
            lean_ssl_context(configuration) if secure else None,
            configuration.tls_server_name or parts.hostname,
            max(1, int(configuration.connection_pool_maxsize or DEFAULT_MAX_CONNECTIONS)),
        )
        self.lean_prefix = parts.path.rstrip("/")
        host = parts.netloc.rpartition("@")[2]
        self.lean_head = f"Host: {host}\r\nAccept: {JSON}\r\nUser-Agent: {USER_AGENT}\r\n"

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        if self.lean is not None:
            await self.lean.close()
        await self.api.close()


class KubeClient:
    """Raw-JSON access to the API with the configuration of a kubernetes_asyncio ApiClient.

    `limiter` is the client-side rate limit (None: none). `sharing(limiter)` gives a
    client on the same connections with a rate budget of its own. Closing the client
    that was made from the ApiClient closes the ApiClient and its connection pool.
    """

    def __init__(
        self,
        api: ApiClient,
        limiter: TokenBucket | None = None,
        *,
        lean_writes: bool = True,
        policy: CallPolicy | None = None,
    ) -> None:
        self._transport = _Transport(api)
        self.limiter = limiter
        self._owner = True
        # False: writes go through aiohttp too (the tests compare both paths).
        self.lean_writes = lean_writes
        # Time limit of a request whose caller sets none, and the retries of `call`.
        self.policy = policy or CallPolicy()

    @property
    def api(self) -> ApiClient:
        return self._transport.api

    def sharing(self, limiter: TokenBucket | None) -> KubeClient:
        """A client on the same connections whose requests take tokens from `limiter`
        instead; closing it closes nothing."""
        shared = KubeClient.__new__(KubeClient)
        shared._transport = self._transport
        shared.limiter = limiter
        shared._owner = False
        shared.lean_writes = self.lean_writes
        shared.policy = self.policy
        return shared

    async def close(self) -> None:
        if self._owner:
            await self._transport.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _headers(self, content_type: str) -> dict[str, str]:
        configuration = self.api.configuration
        headers = {"Accept": JSON, "Content-Type": content_type, "User-Agent": USER_AGENT}
        if "BearerToken" in configuration.api_key:
            # Runs the refresh hook (exec plugins, OIDC, a rotated service-account token).
            token = await configuration.get_api_key_with_prefix("BearerToken")
            if token:
                headers["Authorization"] = token
        return headers

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send a request and return the unread response, whatever its status (the
        caller reads it and releases it)."""
        transport = self._transport
        session = transport.session or transport.open()
        if self.limiter is not None:
            await self.limiter.acquire()
        url = transport.host + path
        if query:
            url += "?" + urlencode(query)
        data = None if body is None else _encode_json(body).encode()
        return await session.request(
            method,
            url,
            data=data,
            headers=await self._headers(content_type),
            proxy=transport.proxy,
            proxy_headers=self.api.configuration.proxy_headers if transport.proxy else None,
            timeout=timeout or self.policy.timeout(),
        )

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: aiohttp.ClientTimeout | None = None,
        decode: Callable[[bytes], Any] = paused_gc_loads,
    ) -> JsonObject:
        """Send a request and decode its JSON answer (with `decode`); ApiError on a
        non-2xx status. Sent once, within `timeout` (the policy's when None); `call`
        retries."""
        transport = self._transport
        if transport.session is None:
            transport.open()
        timeout = timeout or self.policy.timeout()
        if transport.lean is not None and self.lean_writes and method in LEAN_METHODS:
            status, reason, raw = await self._lean_request(
                transport.lean, method, path, query, body, content_type, timeout
            )
        else:
            response = await self.open(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
            try:
                raw = await response.read()
            finally:
                response.release()
            status, reason = response.status, response.reason or ""
        if not 200 <= status < 300:
            raise error_from_body(status, reason, raw)
        try:
            decoded = decode(raw) if raw else {}
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
            raise ApiError(status, "BadResponse", f"undecodable JSON: {err}", {}) from err
        if not isinstance(decoded, dict):
            raise ApiError(status, "BadResponse", "the answer is not a JSON object", {})
        return decoded

    async def call(
        self,
        method: str,
        path: str,
        *,
        retry_on: RetryOn,
        query: Query = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> JsonObject:
        """`request_json` under the call policy (call_policy.py): each try within the
        time limit, failures that `retry_on` accepts tried again with backoff, up to
        the policy's attempts; the last failure is raised. `retry_on` is the caller's
        statement of whether repeating this write is safe (`never`, `transient`,
        `transient_not_refused`)."""
        answer: JsonObject = {}
        async for attempt in self.policy.retrying(retry_on):
            with attempt:
                answer = await self.request_json(
                    method, path, query=query, body=body, content_type=content_type, timeout=timeout
                )
        return answer

    async def _lean_request(
        self,
        lean: LeanPool,
        method: str,
        path: str,
        query: Query,
        body: Any,
        content_type: str,
        timeout: aiohttp.ClientTimeout | None,
    ) -> tuple[int, str, bytes]:
        """The same request as `open` sends, written by hand on a lean connection."""
        if self.limiter is not None:
            await self.limiter.acquire()
        transport = self._transport
        target = transport.lean_prefix + path
        if query:
            target += "?" + urlencode(query)
        data = b"" if body is None else _encode_json(body).encode()
        head = f"{method} {target} HTTP/1.1\r\n{transport.lean_head}"
        if "BearerToken" in self.api.configuration.api_key:
            # Runs the refresh hook (exec plugins, OIDC, a rotated service-account token).
            token = await self.api.configuration.get_api_key_with_prefix("BearerToken")
            if token:
                head += f"Authorization: {token}\r\n"
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n"
        answer = await lean.request(head.encode("latin-1") + data, _total_seconds(timeout))
        return answer.status, answer.reason, answer.body

    async def list_pages(
        self,
        path: str,
        *,
        query: Query = (),
        page_size: int = DEFAULT_PAGE_SIZE,
        timeout: aiohttp.ClientTimeout | None = None,
        decoder: Decoder = PLAIN,
    ) -> AsyncGenerator[ListPage, None]:
        """LIST a collection page by page, following `continue` tokens; page_size 0
        asks for one page. Every page of one list carries the list's resourceVersion.

        When a continue token expires mid-list (410), the list starts over unpaged, as
        client-go's pager does, since a list stitched from two snapshots is not one: the
        page that starts it over has `first` set, so a consumer applying pages as they
        come starts its reconciliation over.

        The next page is asked for before a page is handed over, so the server prepares
        it while the consumer applies this one (the initial sync, issue 13): at most two
        pages are in memory. Closing the iterator early cancels the request ahead.
        `decoder` decodes each page (decoding.py: pods are read slim).
        """
        token = ""
        first = True
        ahead: asyncio.Task[JsonObject] | None = None
        try:
            while True:
                try:
                    if ahead is None:
                        page = await self._list_page(
                            path, query, page_size, token, timeout, decoder
                        )
                    else:
                        page = await ahead
                except ApiError as err:
                    if err.gone and token:
                        token, page_size, first = "", 0, True
                        continue
                    raise
                finally:
                    ahead = None
                listed = page.get("items")
                items = (
                    [i for i in listed if isinstance(i, dict)] if isinstance(listed, list) else []
                )
                del page["items"]  # `items` is the only reference left to them
                meta = page.get("metadata")
                meta = meta if isinstance(meta, dict) else {}
                token = str(meta.get("continue") or "")
                if token:
                    ahead = asyncio.create_task(
                        self._list_page(path, query, page_size, token, timeout, decoder),
                        name=f"list-ahead {path}",
                    )
                yield ListPage(items, str(meta.get("resourceVersion") or ""), first, not token)
                first = False
                if not token:
                    return
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)

    async def _list_page(
        self,
        path: str,
        query: Query,
        page_size: int,
        token: str,
        timeout: aiohttp.ClientTimeout | None,
        decoder: Decoder = PLAIN,
    ) -> JsonObject:
        """One page of a LIST: `limit` page_size (0: no limit), from `token` when set."""
        page_query = list(query)
        if page_size > 0:
            page_query.append(("limit", str(page_size)))
        if token:
            page_query.append(("continue", token))
        return await self.request_json(
            "GET", path, query=page_query, timeout=timeout, decode=decoder.page
        )

    async def list_json(
        self,
        path: str,
        *,
        query: Query = (),
        page_size: int = DEFAULT_PAGE_SIZE,
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> ListResult:
        """LIST a whole collection into memory (see `list_pages`)."""
        items: list[JsonObject] = []
        version = ""
        async for page in self.list_pages(path, query=query, page_size=page_size, timeout=timeout):
            if page.first:
                items = []
            items.extend(page.items)
            version = page.resource_version
        return ListResult(items, version)

    @asynccontextmanager
    async def watch(
        self,
        path: str,
        *,
        query: Query = (),
        timeout: aiohttp.ClientTimeout | None = None,
        decoder: Decoder = PLAIN,
    ) -> AsyncIterator[WatchStream]:
        """Open a watch (`watch=true` is added); ApiError when the server refuses it.
        `decoder` decodes each event (decoding.py)."""
        response = await self.open("GET", path, query=[*query, ("watch", "true")], timeout=timeout)
        try:
            if response.status != 200:
                raise error_from_body(response.status, response.reason or "", await response.read())
            yield WatchStream(response, decoder)
        finally:
            if response.content.at_eof():
                response.release()
            else:
                response.close()


class WatchStream:
    """The events of one watch, decoded, in stream order."""

    def __init__(self, response: aiohttp.ClientResponse, decoder: Decoder = PLAIN) -> None:
        self._response = response
        self._decoder = decoder

    async def batches(self) -> AsyncIterator[list[JsonObject]]:
        """Every event that arrived in one network read, as a list; ends when the
        server finishes the stream; WatchBroken when it is cut."""
        pending = bytearray()
        try:
            async for chunk in self._response.content.iter_any():
                pending += chunk
                end = pending.rfind(b"\n")
                if end < 0:
                    continue
                lines = bytes(pending[:end]).split(b"\n")
                del pending[: end + 1]
                yield [_decode_event(line, self._decoder) for line in lines if line.strip()]
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise WatchBroken(f"watch stream cut: {type(err).__name__}: {err}") from err
        if pending.strip():
            yield [_decode_event(bytes(pending), self._decoder)]


def _total_seconds(timeout: aiohttp.ClientTimeout | None) -> float | None:
    """The limit a lean request honours: aiohttp's `total`, else the longest of the
    limits of a phase (connect, read), so that a caller's limit always bounds it; None
    only for a timeout that sets none at all."""
    if timeout is None:
        return None
    if timeout.total is not None:
        return timeout.total
    phases = [t for t in (timeout.sock_connect, timeout.sock_read, timeout.connect) if t]
    return sum(phases) if phases else None


def lean_ssl_context(configuration: Configuration) -> ssl.SSLContext:
    """The TLS context kubernetes_asyncio's REST client builds from the same
    configuration (CA, client certificate, verification switches), so lean writes
    trust and present exactly what aiohttp's connections do."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def decode_json(raw: bytes) -> Any:
    """The standard library's decoding of an answer (decoding.paused_gc_loads)."""
    return paused_gc_loads(raw)


def _decode_event(line: bytes, decoder: Decoder = PLAIN) -> JsonObject:
    try:
        event = decoder.event(line)
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
        raise WatchBroken(f"undecodable watch event: {err}") from err
    if not isinstance(event, dict):
        raise WatchBroken("watch event is not a JSON object")
    return event


def error_from_body(status: int, reason: str, raw: bytes) -> ApiError:
    """The ApiError for a failed request, from its Status body when it has one."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return ApiError.from_status(body, status)
    text = raw[:200].decode("utf-8", "replace") if raw else ""
    return ApiError(status, reason, text, {})


async def create_client(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    qps: float | None = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> KubeClient:
    """A client from `kubeconfig`, else the in-cluster service account when running in a
    pod, else the default kubeconfig ($KUBECONFIG or ~/.kube/config).

    qps None (or 0) turns the client-side rate limit off. kubernetes_asyncio's
    ConfigException says what is missing when no configuration can be loaded.
    """
    configuration = Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        load_incluster: Callable[..., None] = load_incluster_config
        load_incluster(client_configuration=configuration)
    else:
        load_kubeconfig: Callable[..., Awaitable[Any]] = load_kube_config
        await load_kubeconfig(
            config_file=kubeconfig,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    configuration.connection_pool_maxsize = max_connections
    limiter = TokenBucket(qps, burst) if qps else None
    return KubeClient(ApiClient(configuration=configuration), limiter)


def environment_proxy(host: str) -> str | None:
    """The proxy for the API server at `host` from the environment, as aiohttp's
    trust_env and client-go read it (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`), or None."""
    parts = urlsplit(host)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme or "https")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy
