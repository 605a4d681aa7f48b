"""A Prometheus scrape as the tests read it, for the scheduler's and the node agent's
metrics alike."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# (sample name, labels, value)
Sample = tuple[str, dict[str, str], float]

# Series of prometheus_client's process and Python collectors that every component's
# registry carries (how much CPU, memory and file descriptors it uses, and since when).
PROCESS_SERIES = (
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_start_time_seconds",
    "python_info",
    "python_gc_collections_total",
)


def parse(text: str) -> list[Sample]:
    """Every sample of a scrape in the text exposition format."""
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def series(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    """The samples of `name` whose labels include `labels`."""
    return [s for s in samples if s[0] == name and all(s[1].get(k) == v for k, v in labels.items())]
