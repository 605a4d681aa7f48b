"""A relist after 410 Gone does not stall the scheduler (issue 31): while the pods'
new state streams in, scheduling cycles go on on the state the core holds, and a gang
that the relist's first read shows is bound before its last read arrives. Through the
API emulator over real HTTP: the watch is expired as etcd's compaction expires it (an
ERROR event with a 410 Expired Status), and the relist's stream is held half-way by the
emulator, so the test waits on events (a cycle counter, a bind), never on speed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.client import create_client
from scheduler.kube.runner import SchedulerRun
from scheduler.process.config import SchedulerConfig, build_core_from
from tests.factories import node_obj, pod_obj
from tests.kube.test_informer import state
from tests.kube.test_runner import bound, fast_config, seed_gang
from tests.kubeapi import PODGROUPS, KubeApiEmulator, write_kubeconfig
from tests.signed import with_key
from tests.waiting import HANG, cycles_pass, eventually, free_port

NODES = 30
BOUND_PODS = 3_000


def seed_running_pods(api: KubeApiEmulator) -> None:
    for i in range(NODES):
        api.put_node(node_obj(f"n{i}", gpus=8, pods=200))
    for i in range(BOUND_PODS):
        api.put_pod(
            pod_obj(
                f"running-{i:05d}",
                node_name=f"n{i % NODES}",
                phase="Running",
                cpu="10m",
                memory="16Mi",
            )
        )


def fresh_state(api: KubeApiEmulator, config: SchedulerConfig) -> dict[str, Any]:
    """The cache of a new core of `config` (its signing key: the GPUs of the pods it
    bound are read from their signed assignments) fed one list of what the server holds."""
    core = build_core_from(config)
    core.replace_nodes(api.nodes(), 0.0)
    core.replace_pods(api.pods(), 0.0)
    core.replace_podgroups(api.objects(PODGROUPS), 0.0)
    return state(core)


@pytest.mark.asyncio
async def test_cycles_run_and_a_new_gang_binds_while_a_relist_after_410_streams_in(
    tmp_path: Path,
) -> None:
    async with KubeApiEmulator() as api:
        seed_running_pods(api)
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        kube = await create_client(str(kubeconfig), qps=1000, burst=1000)
        config = with_key(fast_config(free_port()), tmp_path)
        run = SchedulerRun(config, kube)
        stop = asyncio.Event()
        task = asyncio.create_task(run.run(stop))
        try:
            await asyncio.wait_for(run.informers.wait_synced(), HANG)
            pods = run.informers.pods
            await eventually(lambda: api.open_watches("pods") == 1, "the pods watch")
            await cycles_pass(run.metrics.registry)
            assert pods.relists == 1

            # The pods watch expires; the relist it calls for writes its first socket
            # write (a few hundred pods) and is held there.
            api.hold_watch_streams("pods")
            assert api.expire_watches("pods") == 1
            # A gang arrives before the relist reads: its pods sort first, so they are
            # in the relist's first write ("a-..." before "running-...").
            seed_gang(api, "a-gang", 2)
            await eventually(
                lambda: api.watch_streams_held("pods") == 1 and pods.reconciling,
                "the relist held half-way",
            )

            # The scheduler goes on: cycles complete and the gang binds, with the
            # relist still open (its last read not in).
            await eventually(lambda: len(bound(api, "a-gang")) == 2, "the new gang bound")
            await cycles_pass(run.metrics.registry, 2)
            assert pods.reconciling and pods.relists == 1
            assert api.watch_streams_held("pods") == 1

            # The rest streams in: the cache is then what a fresh relist would give.
            api.release_watch_streams()
            await eventually(lambda: pods.relists == 2 and not pods.reconciling, "the relist")
            await eventually(
                lambda: state(run.core) == fresh_state(api, config), "the cache == a relist"
            )
            assert len(list(run.core.cache.pods())) == BOUND_PODS + 2
        finally:
            stop.set()
            assert await asyncio.wait_for(task, HANG) == 0
            await kube.close()
