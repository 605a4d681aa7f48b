"""Event and condition times: the per-second memo of `rfc3339` gives the text the plain
formatting gives, for any instant (fractions, negative times, second boundaries)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from scheduler.kube.events import _rfc3339_second, rfc3339


def _formatted(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@given(st.lists(st.floats(min_value=-86_400.0, max_value=4_102_444_800.0), max_size=30))
def test_rfc3339_is_the_plain_formatting(instants: list[float]) -> None:
    for seconds in instants:
        assert rfc3339(seconds) == _formatted(seconds)


def test_one_second_is_formatted_once() -> None:
    _rfc3339_second.cache_clear()
    stamps = {rfc3339(1_795_000_000 + fraction / 10) for fraction in range(10)}
    assert stamps == {"2026-11-18T11:06:40Z"}
    assert _rfc3339_second.cache_info().misses == 1
    assert rfc3339(1_795_000_000.999999) == "2026-11-18T11:06:40Z"
    assert rfc3339(1_795_000_001.0) == "2026-11-18T11:06:41Z"
    assert rfc3339(-0.5) == "1969-12-31T23:59:59Z"
