"""Decoding a page of pods (issue 31): CPU per 1,000 pods and memory per 1,000 pods for
the standard library, orjson (when installed: it is not a dependency), untyped msgspec,
and the scheduler's slim pod decoder (scheduler/kube/decoding.py), whole page and item
by item (its fallback path).

    .venv/bin/python bench/decode.py [--pods 500] [--repeat 40]

The pods are bench/kube.py's running pods with a kubelet managedFields entry added, as
a real cluster's carry (about 3.7 KB each). Memory is tracemalloc's: what the decoded
page holds, and the peak while decoding. The collector is off, as it is while the
scheduler decodes a page.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
from kube import running_pod  # bench/kube.py: this script's directory is on sys.path

from scheduler.kube.decoding import SlimPodDecoder


def kubelet_fields() -> dict[str, Any]:
    conditions = {
        f'k:{{"type":"{kind}"}}': {".": {}, "f:lastTransitionTime": {}, "f:status": {}}
        for kind in ("Ready", "Initialized", "PodScheduled", "ContainersReady")
    }
    return {
        "manager": "kubelet",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-11-01T08:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:conditions": conditions, "f:podIP": {}, "f:phase": {}}},
        "subresource": "status",
    }


def page(pods: int) -> bytes:
    items = []
    for index in range(pods):
        pod = running_pod(f"p{index}", f"n{index % 5000}", index, "d")
        pod["metadata"]["managedFields"] = [kubelet_fields()]
        items.append(pod)
    body = {"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}
    return json.dumps(body, separators=(",", ":")).encode()


def candidates() -> dict[str, Callable[[bytes], Any]]:
    slim = SlimPodDecoder()
    found: dict[str, Callable[[bytes], Any]] = {
        "json.loads": json.loads,
        "msgspec untyped": msgspec.json.Decoder().decode,
        "slim, whole page": slim.page,
        "slim, item by item": slim._page_by_item,
    }
    try:
        import orjson  # type: ignore[import-not-found]

        found["orjson"] = orjson.loads
    except ImportError:
        pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    raw = page(args.pods)
    per_thousand = 1000 / args.pods
    print(f"page: {len(raw)} bytes, {len(raw) // args.pods} a pod")
    gc.disable()
    for name, decode in candidates().items():
        decode(raw)
        began = time.process_time()
        for _ in range(args.repeat):
            decode(raw)
        cpu_ms = (time.process_time() - began) / args.repeat * per_thousand * 1000
        tracemalloc.start()
        kept = decode(raw)
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del kept
        mib = per_thousand / 2**20
        print(
            f"{name:20s} {cpu_ms:6.1f} ms CPU / 1,000 pods, "
            f"{held * mib:5.1f} MiB held / 1,000, peak {peak * mib:5.1f} MiB / 1,000"
        )


if __name__ == "__main__":
    main()
