"""ElasticQuota objects for the tests that limit GPUs only."""

from __future__ import annotations

from typing import Any

from tests.cache.test_quota import quota_obj

_GPU = "nvidia.com/gpu"  # the extended resource, as an ElasticQuota names it


def gpu_quota(
    namespace: str, max_gpus: int, min_gpus: int | None = None, name: str = "quota"
) -> dict[str, Any]:
    """The ElasticQuota `name` of `namespace`: at most `max_gpus`, `min_gpus` guaranteed
    (no min when None)."""
    return quota_obj(
        namespace, {_GPU: max_gpus}, None if min_gpus is None else {_GPU: min_gpus}, name=name
    )
