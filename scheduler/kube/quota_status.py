"""ElasticQuota `status.used`, written back off the loop (docs/quotas.md).

Each namespace's usage (bound and assumed pods, cache/quota.py) is patched onto the
ElasticQuota that governs it, through the write queue of the other feedback (its own
token budget, coalesced by key): only when it changed, and at most once per
`min_interval` seconds per quota, so a namespace whose 1,000 pods start one by one
costs a few writes, not 1,000. A change held back by the interval is written by a later
`publish` (the scheduling loop calls it every cycle and at least every tick). A 404
(quota deleted, no CRD) is skipped. GPU usage is `nvidia.com/gpu` when whole, else
`nvidia.com/vgpu` in milli of a GPU; the other key is removed in the same patch.
"""

from __future__ import annotations

from dataclasses import dataclass

from cache import resources as res
from cache.quota import QUOTA_GROUP, QUOTA_PLURAL, QUOTA_VERSION, QuotaBook, as_resource_list
from scheduler.kube.events import MERGE, WriteQueue, status_patch

DEFAULT_MIN_INTERVAL = 10.0


def quota_status_path(namespace: str, name: str) -> str:
    return (
        f"/apis/{QUOTA_GROUP}/{QUOTA_VERSION}/namespaces/{namespace}/{QUOTA_PLURAL}/{name}/status"
    )


@dataclass(frozen=True, slots=True)
class _Written:
    uid: str
    used: tuple[tuple[str, str], ...]
    at: float


class QuotaStatusWriter:
    def __init__(self, queue: WriteQueue, min_interval: float = DEFAULT_MIN_INTERVAL) -> None:
        self.queue = queue
        self.min_interval = min_interval
        self._written: dict[str, _Written] = {}
        self.writes = 0

    def publish(self, book: QuotaBook, now: float) -> None:
        """Queue a status write for each governing quota whose usage changed."""
        for namespace, quota in book.governed().items():
            used = as_resource_list(book.ledger.used(namespace))
            shown = tuple(sorted(used.items()))
            last = self._written.get(quota.key)
            held = last is not None and last.uid == quota.uid
            if (
                held
                and last is not None
                and (last.used == shown or now - last.at < self.min_interval)
            ):
                continue
            self._written[quota.key] = _Written(quota.uid, shown, now)
            self._submit(quota.key, used)
        for key in [k for k in self._written if k not in book.quotas()]:
            del self._written[key]

    def _submit(self, key: str, used: dict[str, str]) -> None:
        namespace, _, name = key.partition("/")
        body_used: dict[str, str | None] = dict(used)
        for gpu in (res.WHOLE_GPU, res.SHARED_GPU):
            body_used.setdefault(gpu, None)  # RFC 7386: null removes the unused GPU key
        body = {"status": {"used": body_used}}
        path = quota_status_path(namespace, name)
        self.writes += 1

        def forget() -> None:
            self._written.pop(key, None)  # written again on the next publish

        self.queue.submit(
            ("quota-status", key), status_patch(path, body, MERGE, forget, f"ElasticQuota {key}")
        )
