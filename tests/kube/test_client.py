"""KubeClient's transport: what goes on the wire (auth, query, body, user agent) and which
proxy it uses, against a bare aiohttp server that records what it is sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from kubernetes_asyncio import client as k8s

from scheduler.kube.client import USER_AGENT, ApiError, KubeClient, TokenBucket, environment_proxy


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": list(request.query.items()),
                "headers": dict(request.headers),
                "body": await request.read(),
            }
        )
        if request.path.endswith("/missing"):
            status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"}
            return web.json_response(status, status=404)
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield recorder, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def configured(host: str, token: str | None = None) -> k8s.Configuration:
    configuration = k8s.Configuration(host=host)
    if token is not None:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return configuration


@pytest.mark.asyncio
async def test_a_request_carries_the_token_query_body_and_user_agent(
    server: tuple[Recorder, str],
) -> None:
    recorder, host = server
    async with KubeClient(k8s.ApiClient(configured(host, "s3cret"))) as kube:
        answer = await kube.request_json(
            "PATCH",
            "/api/v1/namespaces/ml/pods/p",
            query=[("fieldManager", "gang scheduler"), ("dryRun", "All")],
            body={"metadata": {"labels": {"a": "b"}}},
            content_type="application/merge-patch+json",
        )
    assert answer["metadata"]["name"] == "p"
    (sent,) = recorder.requests
    assert sent["method"] == "PATCH" and sent["path"] == "/api/v1/namespaces/ml/pods/p"
    assert sent["query"] == [("fieldManager", "gang scheduler"), ("dryRun", "All")]
    assert json.loads(sent["body"]) == {"metadata": {"labels": {"a": "b"}}}
    assert sent["headers"]["Authorization"] == "Bearer s3cret"
    assert sent["headers"]["Content-Type"] == "application/merge-patch+json"
    assert sent["headers"]["User-Agent"] == USER_AGENT


@pytest.mark.asyncio
async def test_the_token_refresh_hook_runs_before_each_request(
    server: tuple[Recorder, str],
) -> None:
    recorder, host = server
    configuration = configured(host, "old")
    tokens = iter(["first", "second"])

    def refresh(conf: k8s.Configuration) -> None:
        conf.api_key["BearerToken"] = next(tokens)

    configuration.refresh_api_key_hook = refresh
    async with KubeClient(k8s.ApiClient(configuration)) as kube:
        await kube.request_json("GET", "/api/v1/nodes/a")
        await kube.request_json("GET", "/api/v1/nodes/b")
    assert [r["headers"]["Authorization"] for r in recorder.requests] == [
        "Bearer first",
        "Bearer second",
    ]


@pytest.mark.asyncio
async def test_no_credentials_send_no_authorization_and_errors_keep_the_status(
    server: tuple[Recorder, str],
) -> None:
    recorder, host = server
    async with KubeClient(k8s.ApiClient(configured(host))) as kube:
        with pytest.raises(ApiError) as raised:
            await kube.request_json("GET", "/api/v1/namespaces/ml/pods/missing")
    assert raised.value.status == 404 and raised.value.reason == "NotFound"
    assert "Authorization" not in recorder.requests[0]["headers"]


def test_the_proxy_comes_from_the_environment_unless_no_proxy_names_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert environment_proxy("https://10.0.0.1:6443") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://plain.internal:3128")
    assert environment_proxy("https://10.0.0.1:6443") == "http://proxy.internal:3128"
    assert environment_proxy("http://10.0.0.1:8080") == "http://plain.internal:3128"
    monkeypatch.setenv("NO_PROXY", "10.0.0.1,.cluster.local")
    assert environment_proxy("https://10.0.0.1:6443") is None
    assert environment_proxy("https://kubernetes.default.svc.cluster.local") is None
    assert environment_proxy("https://api.example.test:6443") == "http://proxy.internal:3128"


@pytest.mark.asyncio
async def test_a_shared_client_spends_its_own_budget_on_the_same_connections(
    server: tuple[Recorder, str],
) -> None:
    recorder, host = server
    clock = [0.0]
    main_budget = TokenBucket(qps=1, burst=2, clock=lambda: clock[0])
    feedback_budget = TokenBucket(qps=1, burst=5, clock=lambda: clock[0])
    kube = KubeClient(k8s.ApiClient(configured(host)), main_budget)
    feedback = kube.sharing(feedback_budget)
    for _ in range(4):
        await feedback.request_json("POST", "/api/v1/namespaces/ml/events")
    await feedback.close()  # closes nothing: the owner's connections stay open
    await kube.request_json("GET", "/api/v1/nodes/a")
    await kube.close()
    assert len(recorder.requests) == 5
    assert feedback_budget.reserve() == 0.0  # 4 of its 5 taken, one left
    assert main_budget.reserve() == 0.0  # 1 of its 2 taken, one left
    assert main_budget.reserve() > 0.0
