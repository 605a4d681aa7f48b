"""Paged lists in the emulator, read with the project's client: later pages come from
the first page's resourceVersion, and a token expires with the watch history."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from scheduler.kube.client import ApiError, KubeClient
from tests.factories import pod_obj
from tests.kubeapi import KubeApiEmulator, api_client

pytestmark = pytest.mark.asyncio

PODS = "/api/v1/pods"


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator(history_size=20) as emulator:
        for i in range(5):
            emulator.put_pod(pod_obj(f"p{i}"))
        yield emulator


@pytest_asyncio.fixture
async def client(api: KubeApiEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient(await api_client(api.base_url)) as kube:
        yield kube


def names(page: dict[str, object]) -> list[str]:
    items = page["items"]
    assert isinstance(items, list)
    return [item["metadata"]["name"] for item in items]


async def test_pages_put_together_are_the_list_as_of_the_first_page(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    first = await client.request_json("GET", PODS, query=[("limit", "2")])
    version = first["metadata"]["resourceVersion"]
    assert names(first) == ["p0", "p1"]
    assert first["metadata"]["remainingItemCount"] == 3
    api.delete_pod("default", "p3")
    api.put_pod(pod_obj("p2", annotations={"changed": "yes"}))
    api.put_pod(pod_obj("p9"))
    token = first["metadata"]["continue"]
    second = await client.request_json("GET", PODS, query=[("limit", "2"), ("continue", token)])
    assert names(second) == ["p2", "p3"]
    assert "changed" not in (second["items"][0]["metadata"].get("annotations") or {})
    assert second["metadata"]["resourceVersion"] == version
    token = second["metadata"]["continue"]
    last = await client.request_json("GET", PODS, query=[("limit", "2"), ("continue", token)])
    assert names(last) == ["p4"]
    assert "continue" not in last["metadata"] and "remainingItemCount" not in last["metadata"]


async def test_a_list_that_fits_one_page_has_no_token_and_selectors_hide_the_count(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    whole = await client.request_json("GET", PODS, query=[("limit", "5")])
    assert len(names(whole)) == 5 and "continue" not in whole["metadata"]
    selected = await client.request_json(
        "GET", PODS, query=[("limit", "1"), ("fieldSelector", "metadata.namespace=default")]
    )
    assert "continue" in selected["metadata"]
    assert "remainingItemCount" not in selected["metadata"]


async def test_a_token_expires_once_the_history_moves_past_its_list(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    first = await client.request_json("GET", PODS, query=[("limit", "2")])
    for i in range(25):  # more writes than the 20 changes of history kept
        api.put_pod(pod_obj("churn", annotations={"n": str(i)}))
    token = first["metadata"]["continue"]
    with pytest.raises(ApiError) as expired:
        await client.request_json("GET", PODS, query=[("limit", "2"), ("continue", token)])
    assert expired.value.status == 410 and expired.value.reason == "Expired"
    assert "too old to display a consistent list" in expired.value.message


async def test_a_restart_expires_every_token_and_a_garbled_token_is_a_bad_request(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    first = await client.request_json("GET", PODS, query=[("limit", "2")])
    api.restart()
    token = first["metadata"]["continue"]
    with pytest.raises(ApiError) as expired:
        await client.request_json("GET", PODS, query=[("limit", "2"), ("continue", token)])
    assert expired.value.status == 410
    with pytest.raises(ApiError) as garbled:
        await client.request_json("GET", PODS, query=[("continue", "not a token")])
    assert garbled.value.status == 400


async def test_list_pages_starts_over_unpaged_when_the_token_expires_mid_list(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seen: list[tuple[list[str], bool, bool]] = []
    async for page in client.list_pages(PODS, page_size=2):
        seen.append(([i["metadata"]["name"] for i in page.items], page.first, page.last))
        if len(seen) == 1:
            api.restart()
    assert seen == [
        (["p0", "p1"], True, False),
        (["p0", "p1", "p2", "p3", "p4"], True, True),
    ]
