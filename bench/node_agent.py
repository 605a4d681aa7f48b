"""Node agent footprint: CPU and memory of `gang-scheduler node-agent` on a node with 8
GPUs, scraped every second.

The agent runs as its own process (so that its CPU time and RSS are its own), with NVML
faked as the tests fake it (a DGX A100: 8 GPUs, 12 NVLinks each), its device plugin
registered with a fake kubelet (8,000 share-devices), its event watcher waiting on the
fake event set, the API emulator holding its Node and 8 pods: 4 holding shares of GPUs
0-3, 4 holding whole GPUs 4-7 that NVIDIA's plugin served, as the kubelet's
pod-resources API (a test server) says, read every 10 s and reported on the Node
(attribution re-read every 30 s, as deployed). This process scrapes /metrics every
`--scrape` seconds for `--seconds` and reads the agent's /proc counters.

The fake NVML answers in microseconds; the real library's queries take longer (tens of
microseconds to a millisecond each), so the CPU measured here is the agent's own share
(Python, exposition, gRPC, HTTP), not NVML's.

    .venv/bin/python bench/node_agent.py                    # 60 s, 1 s scrape
    .venv/bin/python bench/node_agent.py --seconds 120 --scrape 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NODE = "gpu-bench"
TICKS = os.sysconf("SC_CLK_TCK")


def child(kubeconfig: str, port: int, plugin_dir: str, pod_resources: str) -> int:
    """The agent itself, as the DaemonSet runs it, with the fake NVML."""
    from scheduler.agent.deviceplugin import DevicePluginConfig
    from scheduler.agent.publisher import AgentOptions, run_node_agent
    from tests.agent import DGX_A100, FakeNvml

    nvml = FakeNvml(DGX_A100)
    for index in range(8):
        nvml.used_mib[index] = 1000 * (index + 1)
        nvml.util[index] = (10 * index, 5 * index)
    options = AgentOptions(
        node_name=NODE,
        kubeconfig=kubeconfig,
        interval=60,
        metrics_port=port,
        metrics_address="127.0.0.1",
        attribution_interval=30,
        pod_resources_socket=pod_resources,
        pod_resources_interval=10,
    )
    plugin = DevicePluginConfig(node_name="", directory=Path(plugin_dir))
    return run_node_agent(options, nvml, plugin)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def memory_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


async def measure(seconds: float, scrape: float) -> None:
    # Imported here, not at the top: the agent's process runs this file too, and must not
    # carry the emulator's modules in its memory.
    import aiohttp

    from cache.gpu import ASSIGNMENT_ANNOTATION
    from tests.agent import DGX_A100
    from tests.agent.kubelet import FakeKubelet
    from tests.agent.podresources_server import FakePodResources, holding
    from tests.factories import pod_obj
    from tests.kubeapi import KubeApiEmulator, write_kubeconfig
    from tests.waiting import free_port

    plugin_dir = Path(tempfile.mkdtemp(prefix="nab", dir="/tmp"))
    tmp = Path(tempfile.mkdtemp(prefix="nab-cfg"))
    try:
        async with KubeApiEmulator() as emulator:
            emulator.put_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
            pod_resources = FakePodResources(plugin_dir / "pod-resources.sock")
            for index in range(8):
                shares = index < 4
                pod = pod_obj(
                    f"p{index}",
                    vgpu=500 if shares else 0,
                    gpus=0 if shares else 1,
                    node_name=NODE,
                    phase="Running",
                    annotations={ASSIGNMENT_ANNOTATION: f"{index}:{500 if shares else 1000}"},
                )
                emulator.put_pod(pod)
                if not shares:
                    pod_resources.pods.append(
                        holding("default", f"p{index}", "nvidia.com/gpu", DGX_A100.gpus[index].uuid)
                    )
            await pod_resources.start()
            kubelet = FakeKubelet(plugin_dir)
            await kubelet.start()
            kubeconfig = write_kubeconfig(emulator.base_url, tmp / "kubeconfig")
            port = free_port()
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--child",
                str(kubeconfig),
                str(port),
                str(plugin_dir),
                str(pod_resources.socket),
            )
            base = f"http://127.0.0.1:{port}"
            try:
                async with aiohttp.ClientSession() as http:
                    for _ in range(600):
                        try:
                            async with http.get(base + "/readyz") as response:
                                if response.status == 200:
                                    break
                        except aiohttp.ClientConnectionError:
                            pass
                        await asyncio.sleep(0.05)
                    else:
                        raise SystemExit("the agent did not get ready")
                    await asyncio.sleep(2)  # past start-up
                    pid = process.pid
                    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
                    latencies: list[float] = []
                    size = 0
                    end = wall0 + seconds
                    while time.monotonic() < end:
                        began = time.perf_counter()
                        async with http.get(base + "/metrics") as response:
                            body = await response.read()
                        latencies.append(time.perf_counter() - began)
                        size = len(body)
                        await asyncio.sleep(max(0.0, scrape - (time.perf_counter() - began)))
                    cpu1, wall1 = cpu_seconds(pid), time.monotonic()
                    rss, peak = memory_kib(pid, "VmRSS"), memory_kib(pid, "VmHWM")
            finally:
                process.terminate()
                await process.wait()
                await kubelet.stop()
                await pod_resources.stop()
        busy = (cpu1 - cpu0) / (wall1 - wall0)
        print(f"node agent, 8 GPUs (fake NVML), 8,000 share-devices, scrape every {scrape:g}s")
        print(f"  measured over {wall1 - wall0:.0f}s, {len(latencies)} scrapes")
        print(f"  CPU: {busy * 100:.1f}% of one core ({(cpu1 - cpu0) * 1000:.0f} ms CPU)")
        print(f"  memory: RSS {rss / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB")
        held = [
            line
            for line in body.decode().splitlines()
            if line.startswith("gang_scheduler_node_agent_gpu_share_milli{")
        ]
        print(f"  attributed: {len(held)} GPU holdings (shares and whole GPUs)")
        print(
            f"  /metrics: {size / 1024:.1f} KiB, latency median "
            f"{statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms"
        )
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--scrape", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(measure(args.seconds, args.scrape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
