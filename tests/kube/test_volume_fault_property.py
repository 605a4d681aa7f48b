"""Property: PreBind's claim writes and their undo, under any sequence of API faults
(5xx after the write landed or before it, 409, 429) and with claims that already carry
a node, through the real client against the emulator.

- A gang may be bound only when every claim holds its node (`result.ok`).
- After the undo, no claim keeps a node this scheduler wrote, unless the undo says it
  could not take it back; a node the claim carried before is never removed."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.volumes import SELECTED_NODE_ANNOTATION, VolumeCache
from policies.filters.volume_binding import ClaimChoice
from scheduler.kube.client import KubeClient
from scheduler.kube.volumes import VolumePrebinder
from tests.kubeapi import PERSISTENT_VOLUME_CLAIMS, KubeApiEmulator, api_client
from tests.volume_objects import pvc_obj
from tests.waiting import HANG

# (status, committed): committed faults store the write, then answer the error.
FAULTS = st.sampled_from([(500, True), (503, True), (500, False), (409, False), (429, False)])


async def _scenario(presets: list[bool], faults: list[tuple[int, bool]]) -> None:
    async with KubeApiEmulator() as api, KubeClient(await api_client(api.base_url)) as client:
        cache = VolumeCache()
        for i, preset in enumerate(presets):
            notes = {SELECTED_NODE_ANNOTATION: "n1"} if preset else {}
            obj = pvc_obj(f"d{i}", storage_class="any", annotations=notes)
            cache.apply_claim("ADDED", api.put(PERSISTENT_VOLUME_CLAIMS, obj))
        for status, committed in faults:
            api.fail_requests("patch", "persistentvolumeclaims", status=status, committed=committed)
        prebinder = VolumePrebinder(client, undo_retry_pause=0.0)
        choices = {key: [ClaimChoice(claim, "n1")] for key, claim in cache.claims.items()}
        result = await prebinder.prebind(choices, cache)

        def node_of(i: int) -> Any:
            stored: Any = api.get(PERSISTENT_VOLUME_CLAIMS, "default", f"d{i}")
            return (stored["metadata"].get("annotations") or {}).get(SELECTED_NODE_ANNOTATION)

        if result.ok:
            assert all(node_of(i) == "n1" for i in range(len(presets)))
        undo = await prebinder.undo(result)
        failed = set(undo.errors or {})
        for i, preset in enumerate(presets):
            target = f"persistentvolumeclaim default/d{i}"
            if preset:
                assert node_of(i) == "n1", f"d{i}: a node we did not write was removed"
            elif target not in failed:
                assert node_of(i) is None, f"d{i}: our node was left behind"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    presets=st.lists(st.booleans(), min_size=1, max_size=4),
    faults=st.lists(FAULTS, max_size=8),
)
def test_prebind_and_undo_keep_their_invariants_under_any_faults(
    presets: list[bool], faults: list[tuple[int, bool]]
) -> None:
    asyncio.run(asyncio.wait_for(_scenario(presets, faults), HANG))
