"""The watch-list stream (issue 31): the initial state as a watch with
`sendInitialEvents=true`, ended by the initial-events-end BOOKMARK; paged lists where
the server refuses it; the emulator refusing what the API server refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.kube.client import ApiError, create_client
from tests.factories import pod_obj
from tests.kube.test_informer import fresh_state, running, seed, state
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.waiting import eventually

# The kinds that are always served; optional ones keep the paged list (its 404).
STREAMED = {"pods", "nodes", "namespaces"}


@pytest.mark.asyncio
async def test_the_initial_state_is_streamed_not_listed(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api:
        seed(api)
        async with running(tmp_path, api) as run:
            assert state(run.core) == fresh_state(api)
            assert run.informers.pods.streamed == 1
            assert run.informers.nodes.streamed == 1
            for kind in STREAMED:
                assert api.request_count("list", kind) == 0, kind
            assert run.informers.pods.resource_version == str(api.resource_version)
            # The same stream goes on as the watch.
            api.put_pod(pod_obj("later"))
            await eventually(lambda: run.core.cache.pod("uid-default-later") is not None)
            assert api.request_count("watch", "pods") == 1


@pytest.mark.asyncio
async def test_a_server_without_the_stream_is_listed_in_pages(tmp_path: Path) -> None:
    async with KubeApiEmulator(watch_list=False) as api:
        seed(api)
        async with running(tmp_path, api) as run:
            assert state(run.core) == fresh_state(api)
            assert run.informers.pods.streamed == 0
            assert run.informers.pods.watch_list_refused
            assert api.request_count("list", "pods") == 1
            api.put_pod(pod_obj("later"))
            await eventually(lambda: run.core.cache.pod("uid-default-later") is not None)


@pytest.mark.asyncio
async def test_after_a_410_the_state_is_streamed_again_and_reconciled(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api:
        seed(api)
        async with running(tmp_path, api) as run:
            # While no watch runs, a pod goes and one comes: only a new initial state
            # shows the deletion.
            api.restart()
            api.delete_pod("default", "bound-0")
            api.put_pod(pod_obj("new"))
            await eventually(lambda: run.informers.pods.streamed == 2, "pods streamed again")
            await eventually(lambda: state(run.core) == fresh_state(api), "cache equals a relist")
            assert run.core.cache.pod("uid-default-bound-0") is None
            assert api.request_count("list", "pods") == 0


def query(**params: str) -> list[tuple[str, str]]:
    return list(params.items())


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("params", "watch", "why"),
    [
        (query(sendInitialEvents="true"), False, "sendInitialEvents is forbidden for list"),
        (query(sendInitialEvents="false"), False, "sendInitialEvents is forbidden for list"),
        (query(resourceVersionMatch="NotOlderThan"), False, "unless resourceVersion"),
        (
            query(resourceVersion="0", resourceVersionMatch="Exact"),
            False,
            'forbidden for resourceVersion "0"',
        ),
        (query(sendInitialEvents="true"), True, "requires setting resourceVersionMatch"),
        (
            query(sendInitialEvents="true", resourceVersionMatch="Exact"),
            True,
            "requires setting resourceVersionMatch",
        ),
        (
            query(resourceVersionMatch="NotOlderThan"),
            True,
            "forbidden for watch unless sendInitialEvents",
        ),
    ],
)
async def test_the_emulator_refuses_what_the_api_server_refuses(
    tmp_path: Path, params: list[tuple[str, str]], watch: bool, why: str
) -> None:
    async with KubeApiEmulator() as api:
        client = await create_client(str(write_kubeconfig(api.base_url, tmp_path / "kc")))
        try:
            with pytest.raises(ApiError) as refused:
                if watch:
                    async with client.watch("/api/v1/pods", query=params):
                        pass
                else:
                    await client.request_json("GET", "/api/v1/pods", query=params)
            assert refused.value.status == 422
            assert why in refused.value.message
        finally:
            await client.close()


@pytest.mark.asyncio
async def test_without_the_feature_gate_the_stream_is_refused(tmp_path: Path) -> None:
    async with KubeApiEmulator(watch_list=False) as api:
        client = await create_client(str(write_kubeconfig(api.base_url, tmp_path / "kc")))
        try:
            params = query(sendInitialEvents="true", resourceVersionMatch="NotOlderThan")
            with pytest.raises(ApiError) as refused:
                async with client.watch("/api/v1/pods", query=params):
                    pass
            assert refused.value.status == 422
            assert "WatchList feature gate" in refused.value.message
        finally:
            await client.close()
