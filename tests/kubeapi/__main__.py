"""Run the emulator as its own process (for benchmarks that measure the scheduler alone).

    python -m tests.kubeapi --port 0
prints `listening on http://127.0.0.1:PORT` and serves until interrupted. Request counts
are at GET /_emulator/requests (not a Kubernetes path). `--kubeconfig PATH` also writes a
kubeconfig for that URL there, so a benchmark's own process need not import the emulator
(and its admission's CEL library) to get one: its RSS is then the scheduler's.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from tests.kubeapi.emulator import KubeApiEmulator
from tests.kubeapi.kubeconfig import write_kubeconfig


async def serve(args: argparse.Namespace) -> None:
    emulator = KubeApiEmulator(
        history_size=args.history_size,
        bookmark_interval=args.bookmark_interval,
        crd_present=not args.no_crd,
        watch_list=not args.no_watch_list,
    )
    url = await emulator.start(args.host, args.port)
    if args.kubeconfig:
        write_kubeconfig(url, args.kubeconfig)
    print(f"listening on {url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await emulator.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.kubeapi")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--history-size", type=int, default=10_000)
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    parser.add_argument("--no-crd", action="store_true", help="serve without the PodGroup CRD")
    parser.add_argument(
        "--no-watch-list", action="store_true", help="refuse the watch-list stream (422)"
    )
    parser.add_argument("--kubeconfig", help="also write a kubeconfig for the URL to this path")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
