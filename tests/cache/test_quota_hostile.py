"""ElasticQuota objects a broken stream could deliver (docs/security.md): reading one
never raises, and one that names no readable namespace governs none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cache.cluster import EventType
from cache.quota import QuotaBook
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from tests.cache.test_quota import quota_obj
from tests.fuzz.hostile import _nested, beyond_int_text


def unreadable(field: str, value: Any) -> dict[str, Any]:
    obj = quota_obj("team", min_={"nvidia.com/gpu": 4})
    obj["metadata"][field] = value
    return obj


@pytest.mark.parametrize("field", ["name", "namespace"])
@pytest.mark.parametrize(
    "value",
    [lambda: beyond_int_text(1), lambda: _nested(1500), lambda: 7, lambda: ["team"]],
    ids=["5000 digits", "nested", "number", "list"],
)
def test_a_quota_with_an_unreadable_name_or_namespace_is_read_without_raising(
    field: str, value: Callable[[], Any]
) -> None:
    book = QuotaBook()
    quota = book.apply("ADDED", unreadable(field, value()))
    assert quota is not None
    if field == "namespace":
        assert book.governing("team") is None  # it names no namespace: it governs none


@pytest.mark.parametrize("field", ["name", "namespace"])
def test_the_core_applies_and_relists_such_quotas(field: str) -> None:
    core = SchedulingCore(build_profile())
    obj = unreadable(field, beyond_int_text(1))
    core.apply_elasticquota(EventType.ADDED, obj, 0.0)
    reconciliation = core.relist_elasticquotas()
    reconciliation.add([obj], 1.0)
    reconciliation.finish(1.0)
    assert len(core.cache.quotas.quotas()) == 1  # listed again, so kept
