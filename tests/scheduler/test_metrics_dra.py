"""gang_scheduler_dra_devices (docs/metrics.md): DRA devices taken per driver, allocated
(a claim's status names them) apart from held (a plan of this scheduler not yet
written), and a driver's series gone once nothing of it is taken."""

from __future__ import annotations

from cache.dra.slices import DeviceId
from scheduler.planner.result import Plan
from scheduler.process.metrics import SchedulerMetrics
from tests.dra_builders import DRIVER, allocated, claim_obj, class_obj, device, exactly, slice_obj
from tests.scheduler.dra_cores import add_pods, claiming, dra_core, feed


def value(metrics: SchedulerMetrics, driver: str, state: str) -> float | None:
    return metrics.registry.get_sample_value(
        "gang_scheduler_dra_devices", {"driver": driver, "state": state}
    )


def test_devices_allocated_and_held_are_counted_per_driver() -> None:
    core = dra_core("node-1")
    feed(
        core,
        slice_obj("s", [device("gpu-0"), device("gpu-1"), device("gpu-2")]),
        class_obj(),
        # Allocated by someone (its status says so): one device of our driver, one of a
        # driver that publishes no slice here.
        claim_obj(
            "running",
            [exactly()],
            allocation=allocated((DRIVER, "node-1", "gpu-0"), ("other.example.com", "p", "x")),
        ),
        claim_obj("wanted", [exactly(count=2)]),
    )
    add_pods(core, claiming("p", "wanted"))
    metrics = SchedulerMetrics()
    metrics.observe_core(core)
    assert value(metrics, DRIVER, "allocated") == 1
    assert value(metrics, DRIVER, "held") == 0
    assert value(metrics, "_other", "allocated") == 1

    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    metrics.observe_core(core)
    # The plan's two devices are held until the claim's event shows the allocation.
    assert value(metrics, DRIVER, "allocated") == 1
    assert value(metrics, DRIVER, "held") == 2

    # Every claim gone: no device of the driver is taken, and its series go.
    for name in ("running", "wanted"):
        feed(core, claim_obj(name, [exactly()]), event="DELETED")
    metrics.observe_core(core)
    assert value(metrics, DRIVER, "allocated") is None
    assert value(metrics, DRIVER, "held") is None
    assert value(metrics, "_other", "allocated") is None


def test_devices_kept_for_a_preempting_gang_are_counted_until_released() -> None:
    """A device kept for a gang whose victims are leaving (DraCache.keep) is neither
    allocated nor held by a plan: it is counted as kept, once, and no longer after the
    keep ends."""
    core = dra_core("node-1")
    feed(
        core,
        slice_obj("s", [device("gpu-0"), device("gpu-1")]),
        class_obj(),
        claim_obj("victim", [exactly()], allocation=allocated((DRIVER, "node-1", "gpu-0"))),
    )
    gpu_0, gpu_1 = (DeviceId(DRIVER, "node-1", name) for name in ("gpu-0", "gpu-1"))
    core.dra.keep("default/high", [gpu_0, gpu_1])
    metrics = SchedulerMetrics()
    metrics.observe_core(core)
    # gpu-0 is still allocated to the victim's claim: counted there, not twice.
    assert value(metrics, DRIVER, "allocated") == 1
    assert value(metrics, DRIVER, "kept") == 1

    core.dra.release_kept("default/high")
    metrics.observe_core(core)
    assert value(metrics, DRIVER, "kept") == 0
