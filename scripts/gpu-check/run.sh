#!/usr/bin/env bash
# The node agent against the real NVML: one prepared run (docs/node-agent.md, "On a real GPU").
# The GPU machine reaches no registry and its python3 (3.12) lacks kubernetes_asyncio,
# tenacity and the emulator's CEL library, so their wheels travel with the tree; prepare
# them here first (the directory is git-ignored via .git/info/exclude):
#   .venv/bin/pip download -d .gpucheck/wheels --python-version 3.12 \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux_2_28_x86_64 --only-binary=:all: \
#     cel-python==0.5.0 kubernetes_asyncio==36.1.0 tenacity==9.2.1 \
#     msgspec==0.22.0 google-re2==1.1.20251105
# then run `bash scripts/gpu-check/run.sh` there with $OUT set (the device tool sets it).
# Everything is written under $R and packed into $OUT/gpu-check.tgz at the end (the
# device tool brings back only a few files).
set -u
FINAL_OUT=$OUT
R=/tmp/gpu-check-out; rm -rf "$R"; mkdir -p "$R"; OUT=$R
exec > >(tee "$OUT/run.log") 2>&1
date -u; uname -r; nvidia-smi; nvidia-smi topo -m; python3 --version
python3 -m pip install -q --no-index --find-links .gpucheck/wheels --target /tmp/pydeps cel-python kubernetes_asyncio tenacity msgspec google-re2 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/pydeps
python3 -c "import pynvml, aiohttp, grpc, prometheus_client; print('pynvml', pynvml.__file__)"
python3 scripts/gpu-check/nvml_facts.py > "$OUT/nvml_facts.json" 2> "$OUT/nvml_facts.err"; echo "facts rc=$?"
timeout 60 python3 -m scheduler.cli.main node-agent --dry-run --once --no-device-plugin > "$OUT/dry_run.json" 2> "$OUT/dry_run.err"; echo "dry-run rc=$?"
# DRA mode: the ResourceSlices the agent would publish from the real NVML (no API server),
# and the MIG placements nvidia-smi lists, to compare with the partitions in them.
timeout 60 python3 -m scheduler.cli.main node-agent --print-resourceslices --node-name gpu-node > "$OUT/resourceslice.json" 2> "$OUT/resourceslice.err"; echo "resourceslice rc=$?"
nvidia-smi mig -lgipp > "$OUT/mig_placements.txt" 2>&1; echo "mig placements rc=$?"
python3 -m tests.kubeapi --port 18080 --kubeconfig /tmp/kc > /tmp/emu.log 2>&1 &
EMU=$!
for i in $(seq 50); do grep -q listening /tmp/emu.log && break; sleep 0.2; done; cat /tmp/emu.log
python3 - <<'PY'
import json, urllib.request
node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node", "labels": {"kubernetes.io/hostname": "gpu-node"}},
        "status": {"allocatable": {"cpu": "16", "memory": "128Gi", "pods": "110"}, "capacity": {"cpu": "16", "memory": "128Gi", "pods": "110"}}}
req = urllib.request.Request("http://127.0.0.1:18080/api/v1/nodes", data=json.dumps(node).encode(), headers={"Content-Type": "application/json"}, method="POST")
print("create node:", urllib.request.urlopen(req).status)
# The printed slices, created on the emulator, which validates them as 1.36 does.
import urllib.error
for item in json.load(open(__import__("os").environ["OUT"] + "/resourceslice.json"))["items"]:
    req = urllib.request.Request("http://127.0.0.1:18080/apis/resource.k8s.io/v1/resourceslices", data=json.dumps(item).encode(), headers={"Content-Type": "application/json"}, method="POST")
    try:
        print("create slice", item["metadata"]["name"], urllib.request.urlopen(req).status)
    except urllib.error.HTTPError as error:
        print("slice REFUSED", item["metadata"]["name"], error.code, error.read().decode()[:2000])
PY
python3 -m scheduler.cli.main node-agent --kubeconfig /tmp/kc --node-name gpu-node --no-device-plugin --metrics-port 10271 --metrics-address 127.0.0.1 --interval 5 --pod-resources-interval 0 --attribution-interval 0 > "$OUT/agent.log" 2>&1 &
AGENT=$!
for i in $(seq 100); do curl -sf localhost:10271/readyz >/dev/null && break; sleep 0.2; done
sleep 3
curl -s localhost:10271/healthz; echo; curl -s localhost:10271/readyz; echo
curl -s localhost:10271/metrics > "$OUT/metrics_idle.txt"
python3 scripts/gpu-check/load.py 40 > "$OUT/load.log" 2>&1 &
LOAD=$!
sleep 20
curl -s localhost:10271/metrics > "$OUT/metrics_load.txt"
nvidia-smi --query-gpu=utilization.gpu,memory.used,power.draw --format=csv
wait $LOAD; cat "$OUT/load.log"
sleep 6
curl -s localhost:10271/metrics > "$OUT/metrics_after.txt"
curl -s http://127.0.0.1:18080/api/v1/nodes/gpu-node > "$OUT/node.json"
kill $AGENT; wait $AGENT; echo "agent rc=$?"
# DRA mode for real: the agent publishes its slices to the emulator (the ones created
# above from the printout are found and reconciled, as after a restart) and serves the
# kubelet's registration and DRA sockets in scratch directories.
mkdir -p /tmp/dra/reg /tmp/dra/plugins /tmp/dra/cdi
python3 -m scheduler.cli.main node-agent --kubeconfig /tmp/kc --node-name gpu-node --dra --no-device-plugin --kubelet-registry-dir /tmp/dra/reg --kubelet-plugins-dir /tmp/dra/plugins --cdi-dir /tmp/dra/cdi --metrics-port 10272 --metrics-address 127.0.0.1 --interval 5 --pod-resources-interval 0 --attribution-interval 0 > "$OUT/agent_dra.log" 2>&1 &
AGENT=$!
for i in $(seq 100); do curl -sf localhost:10272/readyz >/dev/null && break; sleep 0.2; done
sleep 8
curl -s http://127.0.0.1:18080/apis/resource.k8s.io/v1/resourceslices > "$OUT/published_slices.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('published slices:', [(i['metadata']['name'], i['spec']['pool'], len(i['spec'].get('devices', []))) for i in d['items']])" "$OUT/published_slices.json"
find /tmp/dra -maxdepth 3 | sort
kill $AGENT; wait $AGENT; echo "agent dra rc=$?"
kill $EMU
grep -E "^(DCGM|gang)" "$OUT/metrics_load.txt" | head -40
ls -la "$OUT"
tar czf "$FINAL_OUT/gpu-check.tgz" -C "$OUT" .
