"""The cluster side of scripts/build-image.sh's last check: `seed` creates one GPU node
and one gang of two pods in the API emulator; `wait` waits (up to --timeout seconds)
until the scheduler running in the image has bound both, and prints where.

    python scripts/image_smoke.py KUBECONFIG seed
    python scripts/image_smoke.py KUBECONFIG wait [--timeout 60]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.kube import bench_node, bench_pod
from scheduler.kube.client import create_client

NODE = "image-smoke-node"
PODS = ("image-smoke-0", "image-smoke-1")
RUN_ID = "image-smoke"


async def seed(kubeconfig: str) -> None:
    async with await create_client(kubeconfig) as client:
        await client.request_json("POST", "/api/v1/nodes", body=bench_node(NODE, RUN_ID))
        for name in PODS:
            pod = bench_pod(name, "image-smoke", len(PODS), "gang-scheduler", RUN_ID)
            await client.request_json("POST", "/api/v1/namespaces/default/pods", body=pod)
    print(f"seeded: node {NODE} (8 GPUs), gang image-smoke of {len(PODS)} pods")


async def wait(kubeconfig: str, timeout: float) -> int:
    async with await create_client(kubeconfig) as client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            nodes = {}
            for name in PODS:
                pod = await client.request_json("GET", f"/api/v1/namespaces/default/pods/{name}")
                nodes[name] = pod.get("spec", {}).get("nodeName", "")
            if all(nodes.values()) or loop.time() > deadline:
                break
            await asyncio.sleep(0.5)
    for name, node in nodes.items():
        print(f"{name}: {'bound to ' + node if node else 'NOT bound'}")
    return 0 if all(nodes.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kubeconfig")
    parser.add_argument("action", choices=("seed", "wait"))
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    if args.action == "seed":
        asyncio.run(seed(args.kubeconfig))
        return 0
    return asyncio.run(wait(args.kubeconfig, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
