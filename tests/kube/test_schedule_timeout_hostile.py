"""A PodGroup's scheduleTimeoutSeconds beyond what a float holds (a lenient server, or
a gang built by hand) caps at the operator's grace instead of raising."""

from __future__ import annotations

import dataclasses

from scheduler.kube.binder import PartialGangs
from tests.kube.test_schedule_timeout import partial_gang


def test_a_huge_schedule_timeout_is_the_operators_grace() -> None:
    gang = dataclasses.replace(partial_gang(None), timeout_seconds=10**400)
    assert PartialGangs(grace=60.0).grace_for(gang) == 60.0
    assert PartialGangs(grace=60.0).grace_for(partial_gang(5)) == 5.0
