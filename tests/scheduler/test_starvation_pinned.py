"""The starvation guard against pods the scheduler did not bind (docs/security.md,
"The starvation guard and pinned pods"). A tenant pins a tiny pod holding a host port
on every node (our schedulerName, `spec.nodeName` at create), then submits a large
gang asking for that port. The guard's "what if the running work drained" must drain
only what will really leave (pods this scheduler bound), so that gang, which can never
be placed, reserves nothing; a reservation that can no longer lead to a placement is
dropped; and another tenant's starving gang still runs within the guard's bound."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from scheduler.planner.result import Plan
from tests.cache.test_quota import quota_obj
from tests.factories import pod_obj
from tests.scheduler.cores import core_on_nodes
from tests.scheduler.cores import run_binding as run
from tests.scheduler.test_planner_ports_and_preferences import with_host_port
from tests.signed import TEST_KEY, signed

ADDED, DELETED = EventType.ADDED, EventType.DELETED
GUARD = 100.0
PORT = 9000
NODES = 4
MAX_BACKOFF = 60.0  # the queue's default cap


def attacked_core() -> Any:
    """Four nodes of 8 GPUs, each running a 4-GPU pod this scheduler bound (signed: it
    will leave when its job ends)."""
    core = core_on_nodes(NODES)
    core.cache.assignment_key = TEST_KEY
    core.starvation.guard_seconds = GUARD
    for i in range(NODES):
        work = signed(
            pod_obj(
                f"work-{i}",
                gang=f"work{i}",
                min_member=1,
                gpus=4,
                node_name=f"n{i}",
                phase="Running",
            )
        )
        core.apply_pod(ADDED, work, 0.0)
    return core


def pin_port(core: Any, node: str, now: float) -> None:
    """The tenant's tiny pod on `node`, holding the port: never bound by the scheduler,
    so nothing says it will ever leave."""
    pin = pod_obj(
        f"pin-{node}",
        namespace="evil",
        gang=f"pin-{node}",
        min_member=1,
        cpu="10m",
        memory="1Mi",
        node_name=node,
        phase="Running",
    )
    core.apply_pod(ADDED, with_host_port(pin, PORT), now)


def submit(core: Any, namespace: str, name: str, port: bool, now: float, size: int = NODES) -> None:
    """A gang of `size` 8-GPU members (asking for the port when `port`)."""
    for i in range(size):
        pod = pod_obj(f"{name}-{i}", namespace=namespace, gang=name, min_member=size, gpus=8)
        core.apply_pod(ADDED, with_host_port(pod, PORT) if port else pod, now)


def small(core: Any, name: str, now: float) -> bool:
    """Submit a 1-GPU gang of another tenant; whether it is placed at once."""
    core.apply_pod(
        ADDED, pod_obj(f"{name}-0", namespace="other", gang=name, min_member=1, gpus=1), now
    )
    return any(a.gang.key == f"other/{name}" and isinstance(a.result, Plan) for a in run(core, now))


def finish_work(core: Any, now: float) -> None:
    for i in range(NODES):
        core.apply_pod(DELETED, pod_obj(f"work-{i}"), now)


def test_a_gang_that_only_fits_if_pinned_pods_left_reserves_nothing() -> None:
    core = attacked_core()
    for i in range(NODES):
        pin_port(core, f"n{i}", 0.0)
    submit(core, "evil", "hog", port=True, now=1.0)
    run(core, 1.0)
    run(core, GUARD + 2.0)
    assert "evil/hog" not in core.starvation_reservations(), "reserved every GPU it can never use"
    assert small(core, "s1", GUARD + 10.0), "the other tenant's gang was held back"


def test_another_tenants_starving_gang_keeps_its_bound_under_the_attack() -> None:
    """The attack's gangs ask for more GPUs than the other tenant's, so they come first
    in the guard's order; none of them can ever be placed. The other tenant's 32-GPU
    gang must still be reserved when it starves and placed within guardSeconds + the
    remaining run of the work on its nodes + one backoff. (Each gang that fits nowhere
    pauses the searches of its own namespace only: a pause for everyone let six such
    gangs hold the other tenant back six minutes, and a stream of them for good.)"""
    core = attacked_core()
    for i in range(NODES):
        pin_port(core, f"n{i}", 0.0)
    submit(core, "evil", "hog", port=True, now=1.0)
    for i in range(6):
        submit(core, "evil", f"hopeless{i}", port=True, now=1.0, size=NODES + 1)
    submit(core, "victim", "big", port=False, now=1.0)
    run(core, 1.0)
    work_ends = 300.0
    placed_at = None
    now = 2.0
    while now <= 500.0 and placed_at is None:
        if now == work_ends:
            finish_work(core, now)
        for attempt in run(core, now):
            if attempt.gang.key == "victim/big" and isinstance(attempt.result, Plan):
                placed_at = now
        if now == GUARD + 2.0:
            assert set(core.starvation_reservations()) == {"victim/big"}
        now += 1.0
    assert placed_at is not None, "the victim's gang never ran"
    assert placed_at <= work_ends + MAX_BACKOFF


def test_a_reservation_that_can_no_longer_lead_to_a_placement_is_dropped() -> None:
    """The tenant lets its port-asking gang reserve honestly (nothing pinned yet), then
    pins a port holder on one reserved node: the gang can never be placed there, and
    the reservation, held on the same nodes, would keep every GPU of them from others
    for good. At the gang's next attempt it is dropped."""
    core = attacked_core()
    submit(core, "evil", "hog", port=True, now=1.0)
    run(core, 1.0)
    run(core, GUARD + 2.0)
    assert set(core.starvation_reservations()) == {"evil/hog"}
    pin_port(core, "n0", GUARD + 3.0)
    finish_work(core, GUARD + 10.0)  # the room the gang waited for is free: it is retried
    for second in range(int(GUARD) + 10, int(GUARD) + 10 + int(MAX_BACKOFF) + 2):
        run(core, float(second))
    assert "evil/hog" not in core.starvation_reservations()
    assert small(core, "s1", 200.0), "the useless reservation still held the room"


def test_a_tenants_reservations_together_stay_within_its_quota_max() -> None:
    """The attack without pinning: the tenant has the scheduler place its own port
    holders on every node (they will leave only when it deletes them), then submits
    gangs asking for the port, each within its max of 16 GPUs. A reservation is not
    charged to the quota, so each would reserve 16 GPUs, and two the whole cluster.
    Together they may hold no more than the max leaves: one reservation, and the other
    tenant's gang finds room on the nodes left."""
    core = attacked_core()
    core.apply_elasticquota(ADDED, quota_obj("evil", {"nvidia.com/gpu": 16}), 0.0)
    for i in range(NODES):
        holder = pod_obj(
            f"holder-{i}",
            namespace="evil",
            gang=f"holder{i}",
            min_member=1,
            cpu="10m",
            memory="1Mi",
            node_selector={"kubernetes.io/hostname": f"n{i}"},
        )
        core.apply_pod(ADDED, with_host_port(holder, PORT), 0.0)
    run(core, 0.0)
    assert len([p for p in core.cache.pods() if p.name.startswith("holder") and p.node_name]) == 4
    for name in ("hog1", "hog2"):
        submit(core, "evil", name, port=True, now=1.0, size=2)
    run(core, 1.0)
    for second in range(int(GUARD) + 2, int(GUARD) + 6):
        run(core, float(second))
    held = core.starvation_reservations()
    assert len(held) == 1, held
    assert small(core, "s1", GUARD + 10.0), "every node was reserved"
