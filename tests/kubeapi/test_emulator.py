"""The emulator, driven by the real kubernetes_asyncio client over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from cache.pod import GANG_LABEL
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator, api_client, write_kubeconfig
from tests.kubeapi.patch import json_patch, merge_patch, strategic_merge_patch
from tests.kubeapi.selectors import parse_field_selector, parse_label_selector
from tests.waiting import HANG, eventually

pytestmark = pytest.mark.asyncio

GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"
MERGE = "application/merge-patch+json"


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator(bookmark_interval=0.1) as emulator:
        yield emulator


@pytest_asyncio.fixture
async def http(api: KubeApiEmulator) -> AsyncIterator[client.ApiClient]:
    async with await api_client(api.base_url) as api_http:
        yield api_http


@pytest_asyncio.fixture
async def core(http: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(http)


def new_pod(name: str, **kwargs: Any) -> Any:
    """A pod body for POST: no resourceVersion, as a real client sends it."""
    body = pod_obj(name, **kwargs)
    del body["metadata"]["resourceVersion"]
    return body


def status_of(error: ApiException) -> dict[str, Any]:
    """The Status object of a failed request."""
    body: dict[str, Any] = json.loads(error.body or b"{}")
    return body


def stored_pod(api: KubeApiEmulator, name: str) -> dict[str, Any]:
    pod = api.get_pod("default", name)
    assert pod is not None
    return pod


def binding(name: str, node: str, annotations: dict[str, str] | None = None) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        target=client.V1ObjectReference(kind="Node", name=node),
    )


async def bind(core: client.CoreV1Api, name: str, node: str, **annotations: str) -> int:
    """POST pods/binding; returns the HTTP status.

    The API answers a Status, which kubernetes_asyncio cannot deserialize into the
    declared V1Binding, so the raw response is read (and with _preload_content=False
    the client raises nothing: the caller checks the status).
    """
    response: Any = await core.create_namespaced_pod_binding(
        name, "default", binding(name, node, annotations or None), _preload_content=False
    )
    status: int = response.status
    response.release()
    return status


async def collect(
    stream: watch.Watch, events: list[dict[str, Any]], func: Any, *args: Any, **kwargs: Any
) -> None:
    async for event in stream.stream(func, *args, **kwargs):
        events.append(event)


async def wait_for(predicate: Any) -> None:
    await eventually(predicate)


async def ended(
    api: KubeApiEmulator, task: asyncio.Task[None], events: list[dict[str, Any]], count: int
) -> None:
    """Until the watch collected `count` events, then end it (as a server-side timeout
    would) and wait for the collector: the watch's length is no wall-clock bet."""
    await eventually(lambda: len(events) >= count, f"{count} watch events")
    api.end_watches()
    await task


# ----------------------------------------------------------------- list and watch
async def test_list_then_watch_from_its_resource_version_sees_later_changes_in_order(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("before"))
    listed = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["before"]
    assert listed.items[0].kind is None  # list items carry no kind, as the API sends them
    events: list[dict[str, Any]] = []
    task = asyncio.create_task(
        collect(
            watch.Watch(),
            events,
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=int(HANG),
        )
    )
    await eventually(lambda: api.open_watches("pods") == 1, "the watch open")
    created = await core.create_namespaced_pod("default", new_pod("a"))
    await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    await core.delete_namespaced_pod("a", "default")
    await ended(api, task, events, 3)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3
    assert versions[0] == int(created.metadata.resource_version)
    assert events[1]["object"].metadata.labels == {"x": "1"}


async def test_watch_without_resource_version_starts_with_synthetic_added_events(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    for name in ("p1", "p2"):
        api.put_pod(pod_obj(name))
    events: list[dict[str, Any]] = []
    await collect(watch.Watch(), events, core.list_pod_for_all_namespaces, timeout_seconds=0.3)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "p1"),
        ("ADDED", "p2"),
    ]


async def test_bookmarks_carry_the_current_resource_version(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_node(node_obj("n1"))
    events: list[dict[str, Any]] = []
    stream = watch.Watch()
    await collect(
        stream,
        events,
        core.list_node,
        resource_version=str(api.resource_version),
        allow_watch_bookmarks=True,
        timeout_seconds=0.35,
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2
    assert bookmarks[0]["raw_object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(api.resource_version)},
    }
    assert stream.resource_version == str(api.resource_version)


async def test_too_old_resource_version_is_an_error_event_the_client_raises_as_410() -> None:
    async with KubeApiEmulator(history_size=2) as small:
        for i in range(5):
            small.put_pod(pod_obj(f"p{i}"))
        async with await api_client(small.base_url) as http:
            small_core = client.CoreV1Api(http)
            # The raw stream: HTTP 200, then an ERROR event with a 410 Expired Status.
            raw: Any = await small_core.list_namespaced_pod(
                "default", watch=True, resource_version="1", _preload_content=False
            )
            assert raw.status == 200
            event = json.loads(await raw.content.readline())
            raw.release()
            assert event["type"] == "ERROR"
            assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
            assert event["object"]["message"] == "too old resource version: 1 (3)"
            # The client turns it into ApiException(410).
            with pytest.raises(ApiException) as raised:
                await collect(
                    watch.Watch(),
                    [],
                    small_core.list_namespaced_pod,
                    "default",
                    resource_version="1",
                    timeout_seconds=1,
                )
            assert raised.value.status == 410
            # The oldest resumable version still works.
            events: list[dict[str, Any]] = []
            await collect(
                watch.Watch(),
                events,
                small_core.list_namespaced_pod,
                "default",
                resource_version="3",
                timeout_seconds=0.2,
            )
            assert [e["object"].metadata.name for e in events] == ["p3", "p4"]


# ------------------------------------------------------------------------ binding
async def test_binding_sets_node_and_annotations_in_one_write_and_a_second_gets_409(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_node(node_obj("n1"))
    api.put_pod(pod_obj("p", annotations={"keep": "me"}))
    events: list[dict[str, Any]] = []
    task = asyncio.create_task(
        collect(
            watch.Watch(),
            events,
            core.list_namespaced_pod,
            "default",
            resource_version=str(api.resource_version),
            timeout_seconds=int(HANG),
        )
    )
    await eventually(lambda: api.open_watches("pods") == 1, "the watch open")
    assert await bind(core, "p", "n1", **{"gpu.example/devices": "0,1"}) == 201
    with pytest.raises(ApiException) as second:
        await core.create_namespaced_pod_binding("p", "default", binding("p", "n1"))
    assert second.value.status == 409
    assert status_of(second.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"'
    )
    await ended(api, task, events, 1)
    assert [e["type"] for e in events] == ["MODIFIED"]
    pod = events[0]["raw_object"]
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {"keep": "me", "gpu.example/devices": "0,1"}
    assert [(c["type"], c["status"]) for c in pod["status"]["conditions"]] == [
        ("PodScheduled", "True")
    ]
    assert [(b.name, b.node) for b in api.bind_log] == [("p", "n1")]


async def test_binding_a_missing_pod_is_404_and_a_missing_node_is_accepted(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    with pytest.raises(ApiException) as missing:
        await core.create_namespaced_pod_binding("ghost", "default", binding("ghost", "n1"))
    assert missing.value.status == 404
    api.put_pod(pod_obj("p"))
    # The real BindingREST never reads the node: a binding to an unknown node succeeds.
    assert await bind(core, "p", "no-such-node") == 201
    assert stored_pod(api, "p")["spec"]["nodeName"] == "no-such-node"


async def test_binding_with_a_stale_uid_precondition_conflicts(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p", uid="new-uid"))
    body = binding("p", "n1")
    body.metadata.uid = "old-uid"
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_pod_binding("p", "default", body)
    assert raised.value.status == 409
    assert "Precondition failed: UID" in status_of(raised.value)["message"]


async def test_fail_next_binds_fails_the_kth_bind_onwards(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    for i in range(5):
        api.put_pod(pod_obj(f"p{i}"))
    api.fail_next_binds(2, status=503, after=1)
    statuses = [await bind(core, f"p{i}", "n1") for i in range(4)]
    assert statuses == [201, 503, 503, 201]
    assert [stored_pod(api, f"p{i}")["spec"].get("nodeName") for i in range(4)] == [
        "n1",
        None,
        None,
        "n1",
    ]
    api.fail_next_binds(1, status=500, committed=True)
    assert await bind(core, "p4", "n1") == 500
    assert stored_pod(api, "p4")["spec"]["nodeName"] == "n1"
    assert api.request_count("create", "pods", "binding") == 5


async def test_bind_delay_holds_each_bind(api: KubeApiEmulator, core: client.CoreV1Api) -> None:
    api.put_pod(pod_obj("p"))
    api.bind_delay(0.2)
    started = asyncio.get_running_loop().time()
    assert await bind(core, "p", "n1") == 201
    assert asyncio.get_running_loop().time() - started >= 0.2


# ---------------------------------------------------------------------- selectors
async def test_field_and_label_selectors_on_list(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("mine", gang="g1"))
    api.put_pod(pod_obj("bound", gang="g2", node_name="n1", phase="Running"))
    api.put_pod(pod_obj("other", scheduler="default-scheduler"))
    api.put_pod(pod_obj("done", node_name="n1", phase="Succeeded"))

    async def names(**kwargs: Any) -> list[str]:
        result = await core.list_pod_for_all_namespaces(**kwargs)
        return [p.metadata.name for p in result.items]

    assert await names(field_selector="spec.schedulerName=gang-scheduler,spec.nodeName=") == [
        "mine"
    ]
    assert await names(field_selector="spec.nodeName!=") == ["bound", "done"]
    assert await names(field_selector="status.phase!=Succeeded,status.phase!=Failed") == [
        "bound",
        "mine",
        "other",
    ]
    assert await names(field_selector="metadata.name=other,metadata.namespace=default") == ["other"]
    label_key = GANG_LABEL
    assert await names(label_selector=label_key) == ["bound", "mine"]
    assert await names(label_selector=f"!{label_key}") == ["done", "other"]
    assert await names(label_selector=f"{label_key} in (g1, g3)") == ["mine"]
    assert await names(label_selector=f"{label_key} notin (g1)") == ["bound", "done", "other"]
    assert await names(label_selector=f"{label_key}==g2") == ["bound"]
    assert await names(label_selector=f"{label_key}!=g2") == ["done", "mine", "other"]
    with pytest.raises(ApiException) as raised:
        await core.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert raised.value.status == 400
    assert status_of(raised.value)["message"] == "field label not supported: spec.bogus"


async def test_watch_with_a_selector_sees_an_object_that_stops_matching_as_deleted(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p"))
    start = api.resource_version
    events: list[dict[str, Any]] = []
    task = asyncio.create_task(
        collect(
            watch.Watch(),
            events,
            core.list_pod_for_all_namespaces,
            field_selector="spec.nodeName=",
            resource_version=str(start),
            timeout_seconds=int(HANG),
        )
    )
    await eventually(lambda: api.open_watches("pods") == 1, "the watch open")
    await core.create_namespaced_pod("default", new_pod("q"))
    assert await bind(core, "p", "n1") == 201
    await ended(api, task, events, 2)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "q"),
        ("DELETED", "p"),
    ]
    deleted = events[1]["raw_object"]
    # Previous content (still unbound), stamped with the binding's resourceVersion.
    assert "nodeName" not in deleted["spec"]
    assert (
        deleted["metadata"]["resourceVersion"]
        == stored_pod(api, "p")["metadata"]["resourceVersion"]
    )


# ------------------------------------------------------------------ writes, leases
async def test_lease_update_with_stale_or_missing_resource_version_conflicts(
    http: client.ApiClient,
) -> None:
    coordination = client.CoordinationV1Api(http)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="gang-scheduler"),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await coordination.create_namespaced_lease("kube-system", lease)
    stale_version = created.metadata.resource_version
    created.spec.holder_identity = "b"
    renewed = await coordination.replace_namespaced_lease("gang-scheduler", "kube-system", created)
    assert renewed.spec.holder_identity == "b"
    assert int(renewed.metadata.resource_version) > int(stale_version)
    created.spec.holder_identity = "c"
    created.metadata.resource_version = stale_version
    with pytest.raises(ApiException) as stale:
        await coordination.replace_namespaced_lease("gang-scheduler", "kube-system", created)
    assert stale.value.status == 409
    assert status_of(stale.value)["reason"] == "Conflict"
    created.metadata.resource_version = ""
    with pytest.raises(ApiException) as unconditional:
        await coordination.replace_namespaced_lease("gang-scheduler", "kube-system", created)
    assert unconditional.value.status == 409  # leases refuse unconditional updates
    with pytest.raises(ApiException) as exists:
        await coordination.create_namespaced_lease("kube-system", lease)
    assert exists.value.status == 409
    assert status_of(exists.value)["reason"] == "AlreadyExists"
    current = await coordination.read_namespaced_lease("gang-scheduler", "kube-system")
    assert current.spec.holder_identity == "b"


async def test_create_with_a_resource_version_is_refused_and_pod_status_is_reset(
    core: client.CoreV1Api,
) -> None:
    with_version: Any = pod_obj("p")  # carries resourceVersion "1"
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_pod("default", with_version)
    assert raised.value.status == 500
    created = await core.create_namespaced_pod("default", new_pod("p", phase="Running"))
    assert created.status.phase == "Pending"
    assert created.metadata.uid != "uid-default-p"  # the server assigns uids
    with pytest.raises(ApiException) as immutable:
        await core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "n1"}})
    assert immutable.value.status == 422


async def test_pod_status_strategic_patch_merges_conditions_by_type(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p"))
    ready = {"type": "Ready", "status": "False"}
    await core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [ready]}})
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/4 nodes fit the gang",
    }
    patched = await core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [unschedulable]}}
    )
    assert [(c.type, c.status) for c in patched.status.conditions] == [
        ("Ready", "False"),
        ("PodScheduled", "False"),
    ]
    unschedulable["message"] = "still no room"
    again = await core.patch_namespaced_pod_status(
        "p", "default", {"status": {"conditions": [unschedulable]}}
    )
    assert [c.message for c in again.status.conditions] == [None, "still no room"]
    # The status endpoint cannot change the spec; an unchanged patch writes nothing.
    version = again.metadata.resource_version
    same = await core.patch_namespaced_pod_status("p", "default", {"spec": {"nodeName": "n9"}})
    assert same.spec.node_name is None and same.metadata.resource_version == version
    # A JSON merge patch replaces the whole list.
    merged = await core.patch_namespaced_pod_status(
        "p",
        "default",
        {"status": {"conditions": [ready]}},
        _content_type=MERGE,
    )
    assert [c.type for c in merged.status.conditions] == ["Ready"]


async def test_graceful_delete_marks_then_removes(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("bound", node_name="n1", phase="Running"))
    api.put_pod(pod_obj("pending"))
    api.graceful(True, kubelet_delay=0.1)
    marked = await core.delete_namespaced_pod("bound", "default", grace_period_seconds=30)
    assert marked.metadata.deletion_timestamp is not None
    assert api.get_pod("default", "bound") is not None
    await core.delete_namespaced_pod("pending", "default")  # unbound: immediate
    assert api.get_pod("default", "pending") is None
    await wait_for(lambda: api.get_pod("default", "bound") is None)
    api.put_pod(pod_obj("p", uid="u1"))
    with pytest.raises(ApiException) as raised:
        await core.delete_namespaced_pod(
            "p",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="u0")),
        )
    assert raised.value.status == 409


# -------------------------------------------------------------------- custom resource
async def test_podgroup_crd_present_and_absent(
    api: KubeApiEmulator, http: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(http)
    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "g1"},
        "spec": {"minMember": 4},
        "status": {"phase": "Ignored"},
    }
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, group)
    assert "status" not in created  # status is only written through /status
    status = {"status": {"phase": "Scheduled", "scheduled": 4}}
    # kubernetes_asyncio sends a dict body as application/json-patch+json here (the first
    # type it knows for custom objects), which the API refuses: ask for a merge patch.
    with pytest.raises(ApiException) as wrong_type:
        await custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", PLURAL, "g1", status
        )
    assert wrong_type.value.status == 400
    updated = await custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "g1",
        status,
        _content_type=MERGE,  # type: ignore[call-arg]
    )
    assert updated["status"] == {"phase": "Scheduled", "scheduled": 4}
    listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listed["items"][0]["kind"] == "PodGroup"  # custom resources keep kind in lists
    with pytest.raises(ApiException) as smp:
        await custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            PLURAL,
            "g1",
            {"spec": {"minMember": 2}},
            _content_type="application/strategic-merge-patch+json",  # type: ignore[call-arg]
        )
    assert smp.value.status == 415

    api.crd_present(False)
    with pytest.raises(ApiException) as absent:
        await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert absent.value.status == 404
    groups = await client.ApisApi(http).get_api_versions()
    assert GROUP not in [g.name for g in groups.groups]
    with pytest.raises(ApiException):
        await client.ApiextensionsV1Api(http).read_custom_resource_definition(f"{PLURAL}.{GROUP}")


# ------------------------------------------------------------------ faults on watches
async def test_drop_watches_cuts_the_stream(api: KubeApiEmulator, core: client.CoreV1Api) -> None:
    api.put_pod(pod_obj("p"))
    task = asyncio.create_task(
        collect(watch.Watch(), [], core.list_pod_for_all_namespaces, timeout_seconds=30)
    )
    await wait_for(lambda: api.open_watches("pods") == 1)
    assert api.drop_watches() == 1
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(task, 2)
    assert api.open_watches() == 0


async def test_restart_makes_resumed_watches_get_410(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p"))
    listed = await core.list_pod_for_all_namespaces()
    api.put_pod(pod_obj("q"))
    api.restart()
    with pytest.raises(ApiException) as raised:
        await collect(
            watch.Watch(),
            [],
            core.list_pod_for_all_namespaces,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=1,
        )
    assert raised.value.status == 410
    # A relist gives a version to resume from; objects and the counter survived.
    relisted = await core.list_pod_for_all_namespaces()
    assert [p.metadata.name for p in relisted.items] == ["p", "q"]
    assert int(relisted.metadata.resource_version) == api.resource_version
    events: list[dict[str, Any]] = []
    task = asyncio.create_task(
        collect(
            watch.Watch(),
            events,
            core.list_pod_for_all_namespaces,
            resource_version=relisted.metadata.resource_version,
            timeout_seconds=int(HANG),
        )
    )
    await eventually(lambda: api.open_watches("pods") == 1, "the watch open")
    api.delete_pod("default", "q")
    await ended(api, task, events, 1)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("DELETED", "q")]


async def test_outage_refuses_requests_then_serves_again(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    api.put_pod(pod_obj("p"))
    back = asyncio.Event()
    outage = asyncio.create_task(api.outage(until=back))
    await eventually(lambda: api.down, "the server down")
    with pytest.raises(aiohttp.ClientError):
        await core.list_pod_for_all_namespaces()
    back.set()
    await outage
    assert not api.down
    listed = await core.list_pod_for_all_namespaces()
    assert [p.metadata.name for p in listed.items] == ["p"]


async def test_a_watch_that_falls_behind_is_ended() -> None:
    async with (
        KubeApiEmulator(max_watch_backlog=5) as slow,
        await api_client(slow.base_url) as http,
    ):
        slow_core = client.CoreV1Api(http)
        events: list[dict[str, Any]] = []
        task = asyncio.create_task(
            collect(
                watch.Watch(),
                events,
                slow_core.list_pod_for_all_namespaces,
                resource_version=str(slow.resource_version),
                timeout_seconds=5,
            )
        )
        await wait_for(lambda: slow.open_watches() == 1)
        for i in range(10):  # one burst: the queue passes the limit before any write
            slow.put_pod(pod_obj(f"p{i}"))
        await asyncio.wait_for(task, 2)  # ended cleanly, long before its timeout
        assert events == []


async def test_a_future_resource_version_is_a_504_error_event() -> None:
    async with (
        KubeApiEmulator(too_large_wait=0.05) as future,
        await api_client(future.base_url) as http,
    ):
        with pytest.raises(ApiException) as raised:
            await collect(
                watch.Watch(),
                [],
                client.CoreV1Api(http).list_node,
                resource_version="1000",
                timeout_seconds=1,
            )
    assert raised.value.status == 504


async def test_core_and_events_v1_events(http: client.ApiClient) -> None:
    regarding = client.V1ObjectReference(kind="Pod", name="p", namespace="default")
    core_event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="p."),
        involved_object=regarding,
        reason="FailedScheduling",
        message="0/3 nodes",
        type="Warning",
        count=1,
    )
    created = await client.CoreV1Api(http).create_namespaced_event("default", core_event)
    assert created.metadata.name.startswith("p.")
    await client.CoreV1Api(http).patch_namespaced_event(
        created.metadata.name, "default", {"count": 2}
    )
    found = await client.CoreV1Api(http).list_namespaced_event(
        "default", field_selector="involvedObject.name=p,reason=FailedScheduling"
    )
    assert [e.count for e in found.items] == [2]
    new_event = client.EventsV1Event(
        metadata=client.V1ObjectMeta(name="p.1"),
        event_time=datetime.now(UTC),
        reason="Scheduled",
        note="bound",
        type="Normal",
        action="Binding",
        reporting_controller="gang-scheduler",
        reporting_instance="gang-scheduler-0",
        regarding=regarding,
    )
    events_v1 = client.EventsV1Api(http)
    await events_v1.create_namespaced_event("default", new_event)
    listed = await events_v1.list_namespaced_event("default", field_selector="regarding.name=p")
    assert [e.note for e in listed.items] == ["bound"]


# ------------------------------------------------------------- config and bookkeeping
async def test_kubeconfig_file_loads_and_counts_requests(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    path = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    api.put_node(node_obj("n1"))
    async with client.ApiClient(configuration=configuration) as http:
        nodes = await client.CoreV1Api(http).list_node()
        version = await client.VersionApi(http).get_code()
    assert [n.metadata.name for n in nodes.items] == ["n1"]
    assert version.major == "1"
    assert api.request_count("list", "nodes") == 1
    assert api.request_counts()[("list", "nodes", "")] == 1


# ------------------------------------------------------- selectors and patches, pure
async def test_label_selector_grammar() -> None:
    selector = parse_label_selector("a in (x, y),b,!c,d!=1,e notin (z)")
    assert selector.matches({"a": "x", "b": ""})
    assert not selector.matches({"a": "x", "b": "", "c": "1"})
    assert not selector.matches({"a": "q", "b": ""})
    assert parse_field_selector("spec.nodeName=,status.phase!=Failed").matches(
        {"spec.nodeName": "", "status.phase": "Pending"}
    )


async def test_patch_formats() -> None:
    base: dict[str, Any] = {
        "metadata": {"labels": {"a": "1", "b": "2"}},
        "status": {"conditions": [{"type": "A"}]},
    }
    assert merge_patch(base, {"metadata": {"labels": {"a": None}}})["metadata"]["labels"] == {
        "b": "2"
    }
    merged = strategic_merge_patch(
        base, {"status": {"conditions": [{"type": "B"}, {"type": "A", "x": 1}]}}
    )
    assert merged["status"]["conditions"] == [{"type": "A", "x": 1}, {"type": "B"}]
    removed = strategic_merge_patch(
        base, {"status": {"conditions": [{"type": "A", "$patch": "delete"}]}}
    )
    assert removed["status"]["conditions"] == []
    assert json_patch(base, [{"op": "add", "path": "/metadata/labels/c", "value": "3"}])[
        "metadata"
    ]["labels"] == {
        "a": "1",
        "b": "2",
        "c": "3",
    }
    assert base["metadata"]["labels"] == {"a": "1", "b": "2"}  # inputs are untouched


async def test_a_host_network_pods_ports_default_to_host_ports(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    body = new_pod("net")
    body["spec"]["hostNetwork"] = True
    body["spec"]["containers"][0]["ports"] = [
        {"containerPort": 8080},
        {"containerPort": 9090, "hostPort": 0},
    ]
    body["spec"]["initContainers"] = [{"name": "init", "ports": [{"containerPort": 7070}]}]
    plain = new_pod("plain")
    plain["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    await core.create_namespaced_pod("default", body)
    await core.create_namespaced_pod("default", plain)
    spec = stored_pod(api, "net")["spec"]
    assert [p["hostPort"] for p in spec["containers"][0]["ports"]] == [8080, 9090]
    assert spec["initContainers"][0]["ports"][0]["hostPort"] == 7070
    assert "hostPort" not in stored_pod(api, "plain")["spec"]["containers"][0]["ports"][0]


# ------------------------------------------------- checks the real API server makes
async def test_binding_a_pod_with_scheduling_gates_conflicts_until_they_are_removed(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    body = new_pod("gated")
    body["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    await core.create_namespaced_pod("default", body)
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_pod_binding("gated", "default", binding("gated", "n1"))
    assert raised.value.status == 409
    status = status_of(raised.value)
    # BindingREST.setPodHostAndAnnotations, wrapped by assignPod in NewConflict.
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on pods/binding "gated": '
        "pod gated has non-empty .spec.schedulingGates"
    )
    assert stored_pod(api, "gated")["spec"].get("nodeName") is None
    await core.patch_namespaced_pod(
        "gated", "default", [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    assert await bind(core, "gated", "n1") == 201


def new_node(name: str, *, ready: bool) -> Any:
    body = node_obj(name, gpus=1)
    del body["metadata"]["resourceVersion"]
    body["spec"] = {}
    if ready:
        body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return body


def has_not_ready_taint(node: dict[str, Any] | None) -> bool:
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in taints


async def test_a_new_node_is_tainted_not_ready_until_it_reports_ready(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    # TaintNodesByCondition admission: every Node created through the API.
    created = await core.create_node(new_node("late", ready=False))
    assert [(t.key, t.effect) for t in created.spec.taints] == [
        ("node.kubernetes.io/not-ready", "NoSchedule")
    ]
    await core.create_node(new_node("ready", ready=True))
    # The node lifecycle controller takes it off a Ready node, and only then.
    await wait_for(lambda: not has_not_ready_taint(api.get_node("ready")))
    # A controller pass for "late" was due before this one ("late" was written first,
    # the delay is the same): had it untainted the node, it would have by now.
    assert has_not_ready_taint(api.get_node("late"))
    body = api.get_node("late")
    assert body is not None
    body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    await core.replace_node_status("late", body)
    await wait_for(lambda: not has_not_ready_taint(api.get_node("late")))
    # A taint already there is not added twice.
    tainted = new_node("tainted", ready=False)
    tainted["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    assert len((await core.create_node(tainted)).spec.taints) == 1


async def test_finalizers_hold_a_deleted_object_until_the_last_is_removed(
    api: KubeApiEmulator, core: client.CoreV1Api, http: client.ApiClient
) -> None:
    body = new_pod("held")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    await core.create_namespaced_pod("default", body)
    deleted = await core.delete_namespaced_pod("held", "default")
    assert deleted.metadata.deletion_timestamp is not None
    stored = stored_pod(api, "held")
    assert stored["metadata"]["deletionGracePeriodSeconds"] == 0
    # Being deleted: it cannot be bound, and no finalizer can be added.
    assert await bind(core, "held", "n1") == 409
    with pytest.raises(ApiException) as refused:
        await core.patch_namespaced_pod(
            "held",
            "default",
            {"metadata": {"finalizers": ["example.com/keep", "other/x"]}},
            _content_type=MERGE,
        )
    assert refused.value.status == 422
    assert (
        "no new finalizers can be added if the object is being deleted"
        in (status_of(refused.value)["message"])
    )
    await core.patch_namespaced_pod(
        "held", "default", {"metadata": {"finalizers": None}}, _content_type=MERGE
    )
    assert api.get_pod("default", "held") is None
    # A custom resource the same way; its DELETE answers the object while it is held.
    custom = client.CustomObjectsApi(http)
    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "finalizers": ["example.com/keep"]},
        "spec": {"minMember": 2},
    }
    await custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, group)
    answer = await custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "pg")
    assert answer["metadata"]["deletionTimestamp"]
    await custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "pg",
        {"metadata": {"finalizers": []}},
        _content_type=MERGE,
    )
    with pytest.raises(ApiException) as gone:
        await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "pg")
    assert gone.value.status == 404


async def test_a_bound_pod_with_finalizers_is_kept_after_its_graceful_deletion(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    running = pod_obj("bound", node_name="n1", phase="Running")
    running["metadata"]["finalizers"] = ["example.com/keep"]
    api.put_pod(running)
    api.graceful(True, kubelet_delay=0.05)
    await core.delete_namespaced_pod("bound", "default", grace_period_seconds=30)
    await wait_for(
        lambda: stored_pod(api, "bound")["metadata"].get("deletionGracePeriodSeconds") == 0
    )
    assert stored_pod(api, "bound")["spec"]["nodeName"] == "n1"
    await core.patch_namespaced_pod(
        "bound", "default", {"metadata": {"finalizers": []}}, _content_type=MERGE
    )
    assert api.get_pod("default", "bound") is None


async def test_names_labels_and_pod_fields_are_validated(
    api: KubeApiEmulator, core: client.CoreV1Api
) -> None:
    with pytest.raises(ApiException) as bad_name:
        await core.create_namespaced_pod("default", new_pod("Bad_Name"))
    assert bad_name.value.status == 422
    message = status_of(bad_name.value)["message"]
    assert message.startswith('Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"')
    assert "lowercase RFC 1123 subdomain" in message
    with pytest.raises(ApiException) as bad_node:
        await core.create_node(new_node("a" * 254, ready=True))
    assert bad_node.value.status == 422
    with pytest.raises(ApiException) as bad_label:
        await core.create_namespaced_pod("default", new_pod("p", gang="not a/valid/value"))
    assert bad_label.value.status == 422
    assert "metadata.labels: Invalid value" in status_of(bad_label.value)["message"]
    gated = new_pod("gated", node_name="n1")
    gated["spec"]["schedulingGates"] = [{"name": "hold"}]
    with pytest.raises(ApiException) as gated_bound:
        await core.create_namespaced_pod("default", gated)
    assert gated_bound.value.status == 422
    assert (
        "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been"
        in (status_of(gated_bound.value)["message"])
    )
    # After create: spec.nodeName cannot be set by an update (only a Binding sets it),
    # and scheduling gates can only be removed.
    await core.create_namespaced_pod("default", new_pod("pending"))
    for patch in ({"spec": {"nodeName": "n1"}}, {"spec": {"schedulingGates": [{"name": "x"}]}}):
        with pytest.raises(ApiException) as immutable:
            await core.patch_namespaced_pod("pending", "default", patch, _content_type=MERGE)
        assert immutable.value.status == 422
    assert stored_pod(api, "pending")["spec"].get("nodeName") is None


async def test_an_expired_watch_ends_with_a_410_error_event() -> None:
    """expire_watches: what an open watch sees when etcd compacts past it."""
    async with KubeApiEmulator() as api:
        api.put_pod(pod_obj("p0"))
        async with await api_client(api.base_url) as http:
            core = client.CoreV1Api(http)
            raw: Any = await core.list_pod_for_all_namespaces(
                watch=True, resource_version=str(api.resource_version), _preload_content=False
            )
            await eventually(lambda: api.open_watches("pods") == 1)
            assert api.expire_watches("pods") == 1
            event = json.loads(await raw.content.readline())
            assert event["type"] == "ERROR"
            status = event["object"]
            assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
            assert await raw.content.readline() == b""  # and the stream ends
            raw.release()
