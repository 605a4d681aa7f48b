"""A paged LIST asks for its next page before handing the current one over
(KubeClient.list_pages), so the API server prepares it while the informer applies the
page it has: the initial sync of `gang-scheduler run` (issue 13). Against the emulator
over real HTTP; ordering only, nothing timed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from scheduler.kube.client import KubeClient
from tests.factories import pod_obj
from tests.kubeapi import KubeApiEmulator, api_client
from tests.waiting import HANG, eventually

pytestmark = pytest.mark.asyncio

PODS = "/api/v1/pods"
# Long enough never to be reached when the client behaves; the test fails otherwise.
PATIENCE_SECONDS = HANG


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator() as emulator:
        for i in range(7):
            emulator.put_pod(pod_obj(f"p{i}"))
        yield emulator


@pytest_asyncio.fixture
async def client(api: KubeApiEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient(await api_client(api.base_url)) as kube:
        yield kube


async def lists_reach(api: KubeApiEmulator, count: int) -> None:
    await eventually(
        lambda: api.request_count("list", "pods") >= count,
        f"list request {count} sent",
        timeout=PATIENCE_SECONDS,
    )


def ahead_tasks() -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task.get_name().startswith("list-ahead")]


async def test_the_next_page_is_asked_for_while_the_consumer_holds_this_one(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seen: list[list[str]] = []
    async for page in client.list_pages(PODS, page_size=3):
        seen.append([item["metadata"]["name"] for item in page.items])
        if not page.last:
            # The consumer is still on this page: the request for the next one goes
            # out (and is answered) without the consumer asking.
            await lists_reach(api, len(seen) + 1)
    assert seen == [["p0", "p1", "p2"], ["p3", "p4", "p5"], ["p6"]]
    # One request a page: the request ahead is the next page's, never an extra one.
    assert api.request_count("list", "pods") == 3


async def test_a_list_closed_early_leaves_no_request_behind(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    pages = client.list_pages(PODS, page_size=3)
    async with contextlib.aclosing(pages):
        async for page in pages:
            assert page.first
            assert ahead_tasks()  # the second page's request, ahead
            break
    assert ahead_tasks() == []


async def test_a_consumer_that_fails_closes_the_request_ahead_too(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    pages = client.list_pages(PODS, page_size=2)
    with pytest.raises(RuntimeError, match="applying failed"):
        async with contextlib.aclosing(pages):
            async for _ in pages:
                raise RuntimeError("applying failed")
    assert ahead_tasks() == []
