"""A scheduler driven step by step: `SchedulerRun` against the API emulator over real
HTTP, with its informers and write queue running, but no scheduling loop of its own.
The test moves the clock and runs each cycle itself (`cycle(at)`), then waits for the
writes that cycle queued (`WriteQueue.drain`), so what it asserts depends on events and
on the clock it sets, never on how fast anything ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from scheduler.kube.client import create_client
from scheduler.kube.runner import SchedulerRun
from scheduler.process.config import SchedulerConfig
from tests.kube.test_runner import fast_config
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.waiting import eventually, free_port

START = 1_000_000.0


@dataclass
class Stepped:
    run: SchedulerRun
    api: KubeApiEmulator
    now: float = START

    async def cycle(self, at: float) -> None:
        """One scheduling cycle at `at` (seconds after START), then every bind it started
        and every write it queued, finished."""
        self.now = START + at
        await self.run._guarded_cycle(self.now)
        while self.run._binding:
            await asyncio.gather(*self.run._binding, return_exceptions=True)
        await self.run.writes.drain()

    async def seen(self, pods: int, nodes: int | None = None) -> None:
        """Until the informers have seen `pods` pods (and `nodes` nodes)."""
        cache = self.run.core.cache
        await eventually(lambda: len(list(cache.pods())) == pods, f"{pods} pods seen")
        if nodes is not None:
            await eventually(lambda: len(list(cache.nodes())) == nodes, f"{nodes} nodes seen")


@asynccontextmanager
async def stepped(
    api: KubeApiEmulator, tmp_path: Path, config: SchedulerConfig | None = None
) -> AsyncIterator[Stepped]:
    kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    kube = await create_client(str(kubeconfig), qps=1000, burst=1000)
    state = Stepped(None, api)  # type: ignore[arg-type]
    run = SchedulerRun(config or fast_config(free_port()), kube, clock=lambda: state.now)
    state.run = run
    run.writes.start()
    informers = asyncio.create_task(run.informers.run(), name="informers")
    try:
        await run.informers.wait_synced()
        yield state
    finally:
        informers.cancel()
        await asyncio.gather(informers, return_exceptions=True)
        await run.writes.close(drain=True)
        await kube.close()
