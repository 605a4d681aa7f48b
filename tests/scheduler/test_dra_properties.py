"""Properties of whole-gang DRA allocation through the core, over random gangs, plans
and outcomes (bound, claim writes failed, binds failed and the writes rolled back):
no device is ever taken by two claims; no claim stays assumed for a gang that did not
bind; and the core's DraCache after a relist equals one built fresh from the lists."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.dra.store import DraCache
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.dra_builders import claim_obj, class_obj, device, exactly, slice_obj
from tests.scheduler.dra_cores import KINDS, add_pods, claiming, dra_core, feed, taken_twice

NODES = ("n0", "n1")


class _Api:
    """The objects as the API server holds them, and the events the core sees."""

    def __init__(self, core: SchedulingCore) -> None:
        self.core = core
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 1

    def put(self, obj: dict[str, Any], event: str = "ADDED") -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        meta = obj["metadata"]
        self.objs[(obj["kind"], f"{meta.get('namespace', '')}/{meta['name']}")] = obj
        feed(self.core, obj, event=event)

    def write_status(self, plan: Plan, allocate: bool) -> None:
        for entry in plan.claims:
            obj = copy.deepcopy(self.objs[("ResourceClaim", entry.key)])
            status = obj.setdefault("status", {})
            if allocate:
                if entry.allocation is not None:
                    status["allocation"] = entry.allocation.to_api()
                status["reservedFor"] = status.get("reservedFor", []) + [
                    {"resource": "pods", "name": c.name, "uid": c.uid} for c in entry.reserved_for
                ]
            else:  # the adapter's rollback of what it wrote
                status.pop("allocation", None) if entry.allocation is not None else None
                status["reservedFor"] = []
            self.put(obj, "MODIFIED")

    def listed(self, kind: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (k, _), o in self.objs.items() if k == kind]


def _start(api: _Api) -> None:
    for node in NODES:
        api.put(slice_obj(f"s-{node}", [device(f"gpu-{i}") for i in range(3)], node=node))
    api.put(slice_obj("fabric", [device("link-0"), device("link-1")], node=None, allNodes=True))
    api.put(class_obj())


gangs = st.lists(
    st.tuples(
        st.lists(st.integers(1, 2), min_size=1, max_size=3),  # each member's device count
        st.booleans(),  # the members also share one claim
        st.sampled_from(["bind", "writes fail", "broken before writes", "binds fail"]),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None)
@given(gangs=gangs)
def test_devices_are_never_taken_twice_and_no_hold_outlives_its_gang(
    gangs: list[tuple[list[int], bool, str]],
) -> None:
    core = dra_core(*NODES)
    api = _Api(core)
    _start(api)
    now = 0.0
    for number, (counts, shares, outcome) in enumerate(gangs):
        gang = f"g{number}"
        shared = [f"{gang}-shared"] if shares else []
        if shares:
            api.put(claim_obj(f"{gang}-shared", [exactly()]))
        for i, count in enumerate(counts):
            api.put(claim_obj(f"{gang}-{i}", [exactly(count=count)]))
        add_pods(
            core,
            *(
                claiming(f"{gang}-{i}", f"{gang}-{i}", *shared, gang=gang, size=len(counts))
                for i in range(len(counts))
            ),
            now=now,
        )
        failing = {gang}  # each gang's outcome happens once; planned again, it binds
        for _ in range(20):
            attempt = core.schedule_next(now)
            if attempt is None:
                break
            now += 1.0
            result = attempt.result
            if not isinstance(result, Plan):
                continue
            assert not taken_twice(core)
            fails = result.gang_key.endswith(f"/{gang}") and gang in failing
            failing.discard(gang)
            if fails and outcome == "writes fail":
                core.claims_failed(result)
                core.bind_failed(result.gang_key, result.placements, now, "writes failed")
            elif fails and outcome == "broken before writes":
                core.bind_failed(result.gang_key, result.placements, now, "member deleted")
            elif fails and outcome == "binds fail":
                core.claims_written(result)
                api.write_status(result, allocate=True)
                core.bind_failed(result.gang_key, result.placements, now, "a bind failed")
                api.write_status(result, allocate=False)
            else:
                core.claims_written(result)
                api.write_status(result, allocate=True)
                for placement in result.placements:
                    core.bound(placement)
            # Every outcome is settled: nothing is left assumed, whoever planned it.
            assert not [key for key in core.dra.claims if core.dra.is_assumed(key)]
            assert not taken_twice(core)
        now += 100.0
    for kind in ("ResourceSlice", "DeviceClass", "ResourceClaim"):
        reconciliation = core.relist_dra_objects(KINDS[kind])
        reconciliation.add(api.listed(kind), now)
        reconciliation.finish(now)
    fresh = DraCache()
    fresh.relist("slices", api.listed("ResourceSlice"))
    fresh.relist("classes", api.listed("DeviceClass"))
    fresh.relist("claims", api.listed("ResourceClaim"))
    assert core.dra.slices == fresh.slices
    assert core.dra.classes == fresh.classes
    assert core.dra.claims == fresh.claims
    assert core.dra.taken() == fresh.taken()
