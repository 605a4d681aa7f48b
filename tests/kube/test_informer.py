"""Informers against the API emulator, over real HTTP with the real client: initial
sync, ordered watch events, bookmarks, broken watches, 410 Gone, a server restart with
reservations, an absent PodGroup CRD, and the size of lists and bursts."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from cache.cluster import Placement
from policies.profile import build_profile
from scheduler.cycle.core import Reconciliation, SchedulingCore
from scheduler.kube.client import ApiError, KubeClient, TokenBucket, create_client
from scheduler.kube.informer import (
    PODS,
    ClusterInformers,
    Informer,
    InformerOptions,
)
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.kubeapi import PODGROUPS, KubeApiEmulator, write_kubeconfig
from tests.waiting import HANG, eventually

FAST = InformerOptions(
    watch_timeout=30.0,
    backoff_initial=0.05,
    backoff_max=0.5,
    healthy_after=10.0,
    crd_recheck=0.3,
)


def seed(api: KubeApiEmulator, nodes: int = 3, pods: int = 5) -> None:
    for i in range(nodes):
        api.put_node(node_obj(f"n{i}", gpus=8))
    for i in range(pods):
        api.put_pod(pod_obj(f"bound-{i}", node_name=f"n{i % nodes}", phase="Running"))
    api.put_pod(pod_obj("pending-0", gang="g", min_member=2))
    api.put(PODGROUPS, podgroup_obj("g", 2))


def state(core: SchedulingCore) -> dict[str, Any]:
    """What the cache holds, without bookkeeping counters."""
    cache = core.cache
    return {
        "nodes": {n.name: dataclasses.replace(n, generation=0) for n in cache.nodes()},
        "pods": {p.uid: p for p in cache.pods()},
        "podgroups": dict(cache.podgroups()),
        "assumed": dict(cache.assumed()),
    }


def fresh_state(api: KubeApiEmulator) -> dict[str, Any]:
    """The cache of a new core fed one relist of what the server holds now."""
    core = SchedulingCore(build_profile())
    core.replace_nodes(api.nodes(), 0.0)
    core.replace_pods(api.pods(), 0.0)
    core.replace_podgroups(api.objects(PODGROUPS) if api.has_crd else [], 0.0)
    return state(core)


@dataclasses.dataclass
class Running:
    api: KubeApiEmulator
    core: SchedulingCore
    informers: ClusterInformers
    client: KubeClient
    relists: Counter[str]


# Every informer lists once: pods, nodes, PodGroups and the volume kinds.
ONE_LIST_EACH = Counter(
    {
        "nodes": 1,
        "pods": 1,
        "podgroups": 1,
        "namespaces": 1,
        "persistentvolumeclaims": 1,
        "persistentvolumes": 1,
        "storageclasses": 1,
        "csinodes": 1,
        "elasticquotas": 1,
        "volcano-podgroups": 1,
        "native-podgroups": 1,
        "kai-podgroups": 1,
        "resourceslices": 1,
        "deviceclasses": 1,
        "resourceclaims": 1,
    }
)


@asynccontextmanager
async def running(
    tmp_path: Path,
    api: KubeApiEmulator,
    *,
    sync: bool = True,
    options: InformerOptions = FAST,
) -> AsyncIterator[Running]:
    config = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    client = await create_client(str(config), qps=None)
    core = SchedulingCore(build_profile())
    relists: Counter[str] = Counter()
    informers = ClusterInformers(
        core, client, options=options, on_relist=lambda resource: relists.update([resource])
    )
    task = asyncio.create_task(informers.run())
    try:
        if sync:
            await asyncio.wait_for(informers.wait_synced(), HANG)
        yield Running(api, core, informers, client, relists)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.close()


@pytest.mark.asyncio
async def test_initial_sync_fills_the_core(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api:
        seed(api)
        async with running(tmp_path, api) as run:
            assert run.informers.synced
            assert state(run.core) == fresh_state(api)
            assert len(state(run.core)["pods"]) == 6
            assert set(run.core.cache.podgroups()) == {"default/g"}
            assert run.relists == ONE_LIST_EACH
            assert run.informers.pods.resource_version == str(api.resource_version)


@pytest.mark.asyncio
async def test_watch_applies_adds_updates_deletes_in_stream_order(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api:
        seed(api)
        async with running(tmp_path, api) as run:
            seen: list[tuple[str, str, int]] = []
            pods = run.informers.pods
            apply = pods._apply

            def recording(event: str, obj: Mapping[str, Any], now: float) -> None:
                meta = obj["metadata"]
                seen.append((event, meta["name"], int(meta["resourceVersion"])))
                apply(event, obj, now)

            pods._apply = recording
            run.informers.changed.clear()
            api.put_pod(pod_obj("a"))
            api.put_pod(pod_obj("a", node_name="n0", phase="Running"))
            api.put_pod(pod_obj("b"))
            api.delete_pod("default", "a")
            api.put_node(node_obj("n9", gpus=4))
            await eventually(lambda: len(seen) == 4 and run.core.cache.node("n9") is not None)
            assert [(e, n) for e, n, _ in seen] == [
                ("ADDED", "a"),
                ("MODIFIED", "a"),
                ("ADDED", "b"),
                ("DELETED", "a"),
            ]
            versions = [rv for _, _, rv in seen]
            assert versions == sorted(versions)
            assert run.informers.changed.is_set()
            assert state(run.core) == fresh_state(api)
            assert run.relists == ONE_LIST_EACH


@pytest.mark.asyncio
async def test_bookmarks_advance_the_resource_version(tmp_path: Path) -> None:
    async with KubeApiEmulator(bookmark_interval=0.05) as api:
        seed(api)
        async with running(tmp_path, api) as run:
            pods = run.informers.pods
            listed_at = pods.resource_version
            for i in range(3):  # writes of other resources move the global version on
                api.put_node(node_obj(f"extra-{i}"))
            await eventually(lambda: pods.resource_version == str(api.resource_version))
            assert int(pods.resource_version) > int(listed_at)
            # A clean end (the server's timeout) resumes from the bookmark: no relist,
            # and what happens next still arrives.
            api.end_watches()
            api.put_pod(pod_obj("after-bookmark"))
            await eventually(lambda: run.core.cache.pod("uid-default-after-bookmark") is not None)
            assert run.relists["pods"] == 1
            assert state(run.core) == fresh_state(api)


@pytest.mark.asyncio
async def test_dropped_watches_relist_and_match_a_fresh_core(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api:
        seed(api)
        async with running(tmp_path, api) as run:
            await eventually(lambda: api.open_watches() == len(run.informers.informers))
            assert api.drop_watches() == len(run.informers.informers)
            # Changes while no watch is open: only a relist can show the deletions.
            api.delete_pod("default", "bound-0")
            api.put_pod(pod_obj("new-while-dropped"))
            api.put_node(node_obj("n1", gpus=8, labels={"zone": "b"}))
            api.delete(PODGROUPS, "default", "g")
            await eventually(lambda: min(run.relists.values()) >= 2)
            await eventually(lambda: state(run.core) == fresh_state(api))
            # And the new watches carry on.
            api.put_pod(pod_obj("after-recovery"))
            api.put(PODGROUPS, podgroup_obj("h", 3))
            await eventually(lambda: state(run.core) == fresh_state(api))
            assert run.core.cache.pod("uid-default-after-recovery") is not None
            assert set(run.core.cache.podgroups()) == {"default/h"}


@pytest.mark.asyncio
async def test_gone_resource_version_relists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="scheduler.kube.informer")
    async with KubeApiEmulator(history_size=3, bookmark_interval=0) as api:
        seed(api)
        async with running(tmp_path, api) as run:
            api.put_pod(pod_obj("seen-by-watch"))
            await eventually(lambda: run.core.cache.pod("uid-default-seen-by-watch") is not None)
            # Nothing awaits between these lines: the watch ends cleanly, then more
            # changes happen than the server's history keeps, so resuming gets 410.
            api.end_watches()
            for i in range(5):
                api.put_pod(pod_obj(f"burst-{i}"))
            api.delete_pod("default", "bound-1")
            await eventually(lambda: run.relists["pods"] == 2)
            await eventually(lambda: state(run.core) == fresh_state(api))
            assert any("watch expired" in r.message and "410" in r.message for r in caplog.records)


@pytest.mark.parametrize("early", [True, False])
@pytest.mark.asyncio
async def test_restart_relists_and_keeps_reservations_of_existing_pods(
    tmp_path: Path, early: bool
) -> None:
    async with KubeApiEmulator() as api:
        seed(api)
        api.put_pod(pod_obj("doomed", gang="g", min_member=2))
        # early: the session is young, so the informer backs off before relisting;
        # otherwise it has been healthy and relists at once.
        options = FAST if early else dataclasses.replace(FAST, healthy_after=0.0)
        async with running(tmp_path, api, options=options) as run:
            cache = run.core.cache
            kept, doomed = "uid-default-pending-0", "uid-default-doomed"
            cache.assume([Placement(kept, "n0"), Placement(doomed, "n1")], now=time.monotonic())
            await eventually(lambda: api.open_watches() == len(run.informers.informers))
            api.restart()
            api.delete_pod("default", "doomed")
            await eventually(lambda: run.relists["pods"] == 2)
            assert cache.is_assumed(kept)
            assert not cache.is_assumed(doomed)
            assert cache.pod(doomed) is None
            assert cache.charged_shares(kept) == ()  # still charged on n0
            assert cache.assumed_placement(kept) == Placement(kept, "n0")


@pytest.mark.asyncio
async def test_absent_podgroup_crd_leaves_the_scheduler_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="scheduler.kube.informer")
    async with KubeApiEmulator(crd_present=False) as api:
        api.put_node(node_obj("n0", gpus=8))
        api.put_pod(pod_obj("p0"))
        async with running(tmp_path, api) as run:
            podgroups = run.informers.podgroups
            assert podgroups is not None and podgroups.present is False
            assert run.informers.synced
            assert dict(run.core.cache.podgroups()) == {}
            assert run.core.cache.pod("uid-default-p0") is not None
            # Two re-checks done (each a list answered 404), still absent: said once.
            checks = [0]
            relist = podgroups.relist

            async def counted() -> bool:
                try:
                    return await relist()
                finally:
                    checks[0] += 1

            monkeypatch.setattr(podgroups, "relist", counted)
            await eventually(lambda: checks[0] >= 2, "two re-checks of the CRD")
            absent = [
                r
                for r in caplog.records
                if "is not served" in r.message and "podgroups" in r.message
            ]
            assert len(absent) == 1
            # Installed later: found on the next check, then watched.
            api.crd_present(True)
            api.put(PODGROUPS, podgroup_obj("late", 2))
            await eventually(lambda: "default/late" in run.core.cache.podgroups())
            api.put(PODGROUPS, podgroup_obj("later", 2))
            await eventually(lambda: "default/later" in run.core.cache.podgroups())
            # Removed again: the core forgets every PodGroup and pods still flow.
            api.crd_present(False)
            await eventually(lambda: not run.core.cache.podgroups())
            api.put_pod(pod_obj("p1"))
            await eventually(lambda: run.core.cache.pod("uid-default-p1") is not None)


@pytest.mark.asyncio
async def test_2000_pod_list_and_1000_event_burst_take_one_list_and_no_relist(
    tmp_path: Path,
) -> None:
    """What the sync and a burst cost in requests, which no machine's speed changes: the
    2,000 pods come in one list, the 1,000 new ones as watch events, with no relist.
    (How fast that is, is bench/'s to measure, not a test's to assert.)"""
    async with KubeApiEmulator() as api:
        for i in range(100):
            api.put_node(node_obj(f"n{i}", gpus=8))
        for i in range(2000):
            api.put_pod(pod_obj(f"p{i}", node_name=f"n{i % 100}", phase="Running"))
        async with running(tmp_path, api) as run:
            assert len(list(run.core.cache.pods())) == 2000
            lists = api.request_count("list", "pods")
            for i in range(1000):
                api.put_pod(pod_obj(f"burst-{i}", gang=f"g{i // 8}", min_member=8))
            await eventually(lambda: len(list(run.core.cache.pods())) == 3000, "the burst")
            assert api.request_count("list", "pods") == lists
            assert run.relists["pods"] == 1


@pytest.mark.asyncio
async def test_unreachable_server_is_retried_with_backoff(tmp_path: Path) -> None:
    # A server without the watch-list stream: the pods' initial state is a paged list.
    async with KubeApiEmulator(watch_list=False) as api:
        seed(api)
        api.fail_requests("list", "pods", count=3, status=500)
        started = time.monotonic()
        async with running(tmp_path, api) as run:
            # Three failures backed off (>= 0.05 + 0.1 + 0.2 s) before the list succeeded.
            assert time.monotonic() - started >= 0.3
            assert api.request_count("list", "pods") == 4
            assert state(run.core) == fresh_state(api)
            await api.outage(0.3)
            api.put_pod(pod_obj("after-outage"))
            await eventually(lambda: run.core.cache.pod("uid-default-after-outage") is not None)


def test_error_event_stops_the_batch_after_applying_what_came_before() -> None:
    applied: list[str] = []
    informer = Informer(
        KubeClient(None),
        PODS,
        lambda event, obj, now: applied.append(obj["metadata"]["name"]),
        lambda: Reconciliation(lambda obj, now: "", lambda listed, now: None),
    )
    batch = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
        {"type": "ADDED", "object": {"metadata": {"name": "b", "resourceVersion": "10"}}},
    ]
    with pytest.raises(ApiError) as raised:
        informer.handle(batch)
    assert raised.value.gone
    assert applied == ["a"]
    assert informer.resource_version == "9"


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    now[0] = 10.0  # a long pause refills up to the burst, not beyond
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)


@pytest.mark.asyncio
async def test_paged_list_restarts_unpaged_when_its_continue_token_expires(
    tmp_path: Path,
) -> None:
    """The emulator does not page, so a tiny server plays a paging API server."""
    pods = [{"metadata": {"name": f"p{i}", "uid": f"u{i}"}} for i in range(5)]
    asked: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.Response:
        query = dict(request.query)
        asked.append(query)
        limit, token = int(query.get("limit", "0")), query.get("continue")
        if token == "expired":
            return web.json_response(
                {"kind": "Status", "code": 410, "reason": "Expired", "message": "expired"},
                status=410,
            )
        start = int(token or 0)
        end = start + limit if limit else len(pods)
        meta = {"resourceVersion": "42"}
        if end < len(pods):
            meta["continue"] = "expired" if start else str(end)
        return web.json_response({"metadata": meta, "items": pods[start:end]})

    app = web.Application()
    app.router.add_get("/api/v1/pods", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        config = write_kubeconfig(f"http://127.0.0.1:{port}", tmp_path / "kubeconfig")
        async with await create_client(str(config)) as client:
            listed = await client.list_json("/api/v1/pods", page_size=2)
    finally:
        await runner.cleanup()
    assert [p["metadata"]["name"] for p in listed.items] == [f"p{i}" for i in range(5)]
    assert listed.resource_version == "42"
    assert [(q.get("limit"), q.get("continue")) for q in asked] == [
        ("2", None),
        ("2", "2"),
        ("2", "expired"),
        (None, None),
    ]


@dataclasses.dataclass
class PageSpy(Reconciliation):
    """A core's reconciliation that notes each page and what the core held after it."""

    core: SchedulingCore | None = None
    pages: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    held_at_finish: int = 0

    def add(self, objs: Any, now: float) -> None:
        objs = list(objs)
        super().add(objs, now)
        assert self.core is not None
        self.pages.append((len(objs), len(list(self.core.cache.pods()))))

    def finish(self, now: float) -> None:
        assert self.core is not None
        self.held_at_finish = len(list(self.core.cache.pods()))
        super().finish(now)


@pytest.mark.asyncio
async def test_a_relist_is_applied_page_by_page_and_removes_what_it_lacks_at_the_end(
    tmp_path: Path,
) -> None:
    """Each page reaches the core as it arrives (the event loop runs between pages);
    what the list lacks is removed only once the last page is in."""
    async with KubeApiEmulator() as api:
        seed(api, nodes=1, pods=5)  # 6 pods in all
        core = SchedulingCore(build_profile())
        core.replace_pods([*api.pods(), pod_obj("vanished", phase="Running")], 0.0)
        spies: list[PageSpy] = []
        ticks: list[int] = []  # pages applied, each time another task ran

        def begin() -> Reconciliation:
            inner = core.relist_pods()
            spies.append(PageSpy(inner.apply, inner.remove_missing, core=core))
            return spies[-1]

        async def tick() -> None:
            while True:
                ticks.append(len(spies[-1].pages) if spies else 0)
                await asyncio.sleep(0)

        config = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        async with await create_client(str(config), qps=None) as client:
            informer = Informer(
                client, PODS, core.apply_pod, begin, options=dataclasses.replace(FAST, page_size=2)
            )
            ticker = asyncio.create_task(tick())
            try:
                assert await informer.relist()
            finally:
                ticker.cancel()
        (spy,) = spies
        assert spy.pages == [(2, 7), (2, 7), (2, 7)]  # nothing removed before the end
        assert spy.held_at_finish == 7
        assert {1, 2} <= set(ticks)  # other tasks ran between two pages
        assert core.cache.pod("uid-default-vanished") is None
        assert state(core)["pods"] == fresh_state(api)["pods"]
