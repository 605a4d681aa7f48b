"""Property: whatever the API does to binds and to the watch, no room is booked twice.

The real `GangBinder`, `bind_and_settle` and `resolve_unknown` run against a model of
the API server whose every answer hypothesis chooses and orders: a bind that lands and
answers 201, lands and answers 500 (the answer lost after the write), lands and times
out, does not land and answers 500, times out or drops the connection; reads of pods
that fail; deletes; pods deleted and recreated by a controller; watch events delivered
late, or dropped until a relist. After every step:

- the API never holds more than a node offers: per GPU device at most 1000 milli, CPU
  at most allocatable (so no GPU share and no CPU went to two pods);
- every pod the API has bound is charged by the scheduler's cache on that node with
  those devices (so the planner can never hand its room to another pod), and the cache
  never counts more than a node offers;
- no pod gets a binding request once a bind of it has landed.

At the end every fault is healed; then every reservation is settled (nothing is held
forever for a bind that did not land, nor released early for one that did).
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.cluster import EventType
from cache.gpu import ASSIGNMENT_ANNOTATION, parse_assignment
from cache.quantity import to_milli
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.binder import GangBinder, PartialGangs, bind_and_settle, resolve_unknown
from scheduler.kube.client import ApiError, KubeClient
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj

NODES = {"n0": 2, "n1": 2, "n2": 1}  # name -> GPUs
NODE_CPU = 6
BIND_ANSWERS = ("landed-201", "landed-500", "landed-timeout", "lost-500", "lost-timeout", "reset")


@dataclass
class Call:
    method: str
    name: str
    body: Any
    answer: asyncio.Future[dict[str, Any]]


@dataclass
class ModelApi:
    """The pods of one namespace as an API server holds them, answering only when told."""

    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    binding_requests: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    rv: int = 1

    def write(self, kind: str, pod: dict[str, Any]) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((kind, copy.deepcopy(pod)))

    def create(self, pod: dict[str, Any]) -> None:
        self.pods[pod["metadata"]["name"]] = pod
        self.write(EventType.ADDED, pod)

    def remove(self, name: str) -> None:
        pod = self.pods.pop(name)
        self.write(EventType.DELETED, pod)

    # --- the client side (what GangBinder calls) ----------------------------------------
    async def request_json(
        self,
        method: str,
        path: str,
        *,
        query: Any = (),
        body: Any = None,
        content_type: str = "",
        timeout: aiohttp.ClientTimeout | None = None,
    ) -> dict[str, Any]:
        parts = path.strip("/").split("/")  # api v1 namespaces ns pods name [binding]
        name = parts[5]
        if method == "POST":
            assert parts[6:] == ["binding"], path
            self.binding_requests[name] += 1
            pod = self.pods.get(name)
            if pod is not None and pod["spec"].get("nodeName"):
                self.violations.append(f"binding request for {name}, bound already")
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.calls.append(Call(method, name, body, answer))
        return await answer

    # --- the server side (what the test decides) ----------------------------------------
    def answer(self, call: Call, how: str) -> None:
        self.calls.remove(call)
        if call.answer.done():
            return
        try:
            result = {
                "POST": self._bind,
                "GET": self._get,
                "DELETE": self._delete,
            }[call.method](call, how)
        except BaseException as err:
            call.answer.set_exception(err)
        else:
            call.answer.set_result(result)

    def _bind(self, call: Call, how: str) -> dict[str, Any]:
        if how.startswith("landed"):
            pod = self.pods.get(call.name)
            if pod is None:
                raise ApiError(404, "NotFound", f"pods {call.name} not found", {})
            if pod["metadata"]["uid"] != call.body["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "uid precondition failed", {})
            if pod["spec"].get("nodeName"):
                raise ApiError(409, "Conflict", "already assigned", {})
            pod["spec"]["nodeName"] = call.body["target"]["name"]
            pod["metadata"]["annotations"].update(call.body["metadata"].get("annotations", {}))
            self.write(EventType.MODIFIED, pod)
        return _fail_as(how) or {"kind": "Status", "code": 201}

    def _get(self, call: Call, how: str) -> dict[str, Any]:
        if how != "ok":
            return _fail_as(how) or {}
        pod = self.pods.get(call.name)
        if pod is None:
            raise ApiError(404, "NotFound", f"pods {call.name} not found", {})
        return copy.deepcopy(pod)

    def _delete(self, call: Call, how: str) -> dict[str, Any]:
        if how != "ok":
            return _fail_as(how) or {}
        pod = self.pods.get(call.name)
        if pod is None:
            raise ApiError(404, "NotFound", f"pods {call.name} not found", {})
        if pod["metadata"]["uid"] != call.body["preconditions"]["uid"]:
            raise ApiError(409, "Conflict", "uid precondition failed", {})
        self.remove(call.name)
        return {}


def _fail_as(how: str) -> None:
    """Raise what the client sees for `how` (nothing for a success)."""
    if how.endswith("500"):
        raise ApiError(500, "InternalError", "injected", {})
    if how.endswith("timeout"):
        raise TimeoutError()
    if how == "reset":
        raise aiohttp.ServerDisconnectedError()


@dataclass
class World:
    api: ModelApi
    core: SchedulingCore
    binder: GangBinder
    partial: PartialGangs
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    delivered: int = 0  # events of api.events the scheduler's watch has applied
    now: float = 0.0
    recreated: int = 0

    def spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cycle(self) -> None:
        while (attempt := self.core.schedule_next(self.now)) is not None:
            if isinstance(attempt.result, Plan):
                self.spawn(
                    bind_and_settle(
                        self.core,
                        self.binder,
                        attempt.gang,
                        attempt.result,
                        clock=lambda: self.now,
                        partial=self.partial,
                    )
                )

    def deliver(self, count: int) -> None:
        for kind, obj in self.api.events[self.delivered : self.delivered + count]:
            self.core.apply_pod(kind, copy.deepcopy(obj), self.now)
            self.delivered += 1

    def relist(self) -> None:
        self.core.replace_pods([copy.deepcopy(p) for p in self.api.pods.values()], self.now)
        self.delivered = len(self.api.events)


async def quiet() -> None:
    """Let every task run until it waits for an answer."""
    for _ in range(30):
        await asyncio.sleep(0)


def pod_cpu(pod: dict[str, Any]) -> int:
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    return to_milli(requests["cpu"])


def check(world: World) -> None:
    api, cache = world.api, world.core.cache
    assert api.violations == []
    gpu_used: dict[tuple[str, int], int] = Counter()
    cpu_used: Counter[str] = Counter()
    for pod in api.pods.values():
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        uid = pod["metadata"]["uid"]
        cpu_used[node] += pod_cpu(pod)
        text = pod["metadata"]["annotations"].get(ASSIGNMENT_ANNOTATION, "")
        shares = parse_assignment(text) if text else ()
        for index, milli in shares:
            gpu_used[(node, index)] += milli
        # The cache charges it there, with those devices: its room cannot be planned.
        placement = cache.assumed_placement(uid)
        known = cache.pod(uid)
        charged_on = placement.node if placement else (known.node_name if known else None)
        assert charged_on == node, (
            f"{pod['metadata']['name']} bound on {node}, charged on {charged_on}"
        )
        assert tuple(cache.charged_shares(uid) or ()) == tuple(shares)
    assert all(used <= 1000 for used in gpu_used.values()), f"a GPU given twice: {gpu_used}"
    assert all(used <= NODE_CPU * 1000 for used in cpu_used.values()), f"CPU: {cpu_used}"
    for info in cache.nodes():
        assert all(free >= 0 for free in info.gpu_free), (info.name, info.gpu_free)
        assert info.requested.get("cpu", 0) <= info.allocatable["cpu"], info.name


def gang_pods(index: int, size: int, vgpu: bool) -> list[dict[str, Any]]:
    return [
        pod_obj(
            f"g{index}-{m}",
            gang=f"g{index}",
            min_member=size,
            cpu="2",
            gpus=0 if vgpu else 1,
            vgpu=500 if vgpu else 0,
            created=f"2026-01-01T00:00:{index:02d}Z",
        )
        for m in range(size)
    ]


ACTIONS = ("cycle", "answer", "answer", "answer", "deliver", "drop", "relist", "resolve")
ACTIONS += ("recreate", "tick")


async def run(data: st.DataObject, gangs: list[tuple[int, bool]]) -> None:
    api = ModelApi()
    core = SchedulingCore(build_profile(), explain_failures=False)
    for name, gpus in NODES.items():
        core.apply_node(
            EventType.ADDED, node_obj(name, gpus=gpus, vgpu=gpus * 1000, cpu=str(NODE_CPU)), 0
        )
    for index, (size, vgpu) in enumerate(gangs):
        for pod in gang_pods(index, size, vgpu):
            api.create(pod)
    binder = GangBinder(cast(KubeClient, api), retry_jitter=0.0, clock=lambda: 0.0)
    world = World(api, core, binder, PartialGangs())
    world.relist()
    steps = data.draw(st.integers(10, 60), label="steps")
    for _ in range(steps):
        action = data.draw(st.sampled_from(ACTIONS), label="action")
        if action == "cycle":
            world.cycle()
        elif action == "answer" and api.calls:
            call = data.draw(st.sampled_from(api.calls), label="call")
            kinds: tuple[str, ...] = (
                BIND_ANSWERS if call.method == "POST" else ("ok", "500", "timeout", "reset")
            )
            api.answer(call, data.draw(st.sampled_from(kinds), label="how"))
        elif action == "deliver":
            world.deliver(data.draw(st.integers(1, 4), label="events"))
        elif action == "drop":
            world.delivered = len(api.events)  # lost: only a relist brings them back
        elif action == "relist":
            world.relist()
        elif action == "resolve":
            world.spawn(resolve_unknown(core, binder, clock=lambda: world.now))
        elif action == "recreate" and api.pods:
            # A user deletes a pod; its controller recreates it under the same name.
            name = data.draw(st.sampled_from(sorted(api.pods)), label="recreate")
            old = api.pods[name]
            api.remove(name)
            world.recreated += 1
            fresh = copy.deepcopy(old)
            fresh["metadata"]["uid"] = f"uid-{name}-{world.recreated}"
            fresh["metadata"]["annotations"].pop(ASSIGNMENT_ANNOTATION, None)
            fresh["spec"].pop("nodeName", None)
            api.create(fresh)
        elif action == "tick":
            world.now += data.draw(st.sampled_from((0.5, 5.0, 100.0)), label="tick")
        await quiet()
        check(world)
    # Heal: every answer a success, every event delivered, a relist, unknowns re-read.
    for _ in range(50):
        for call in list(api.calls):
            api.answer(call, "landed-201" if call.method == "POST" else "ok")
        world.deliver(len(api.events))
        if core.cache.unresolved():
            world.spawn(resolve_unknown(core, binder, clock=lambda: world.now))
        await quiet()
        check(world)
        if not api.calls and not world.tasks and not core.cache.unresolved():
            break
    assert not world.tasks and not api.calls
    world.relist()
    check(world)
    assert core.cache.assumed() == {}, "a reservation outlived its bind"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    gangs=st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=5),
)
def test_no_room_is_booked_twice_under_any_bind_and_watch_faults(
    data: st.DataObject, gangs: list[tuple[int, bool]]
) -> None:
    asyncio.run(run(data, gangs))
