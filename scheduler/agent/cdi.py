"""CDI spec files of prepared claims: one JSON file per claim in the CDI directory
(default `/var/run/cdi`, where containerd and CRI-O look), one CDI device per allocated
device, so that each container gets exactly the devices of the requests it uses.

A spec (CDI 0.6.0) of kind `k8s.gpu.gang-scheduler.io/claim`, file
`k8s.gpu.gang-scheduler.io-claim_<claim uid>.json`; each device `<claim uid>-<n>` (n: the
result's place among this driver's results of the claim) carries:

- the GPU's device node `/dev/nvidia<minor>`, which the runtime creates in the
  container and allows in its device cgroup;
- `NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices` and a bind of `/dev/null`
  to `/var/run/nvidia-container-devices/<GPU uuid>`: the NVIDIA container runtime's
  list of GPUs as volume mounts (NVIDIA's device plugin's `volume-mounts` strategy).
  Unlike a list in the variable, mounts add up when a container uses several devices
  (every device sets the same value, so none overrides another);
- for a share, `GANG_SCHEDULER_GPU_<index>_MILLI=<milli>` (a name per GPU, so two
  devices do not override each other).

The spec's own edits (applied whenever any of its devices is) add the driver's control
nodes every CUDA process opens: `/dev/nvidiactl`, `/dev/nvidia-uvm`,
`/dev/nvidia-uvm-tools`.

The file is the agent's record of the claim: written whole (a temporary file,
fsync, rename), it also carries in an annotation the devices the kubelet was answered
with, so a repeated NodePrepareResources answers the same without asking the API, and
a crash leaves either no file or the whole one (a leftover temporary file is removed at
start). Unprepare deletes it; a missing file is already unprepared.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.agent.dra_api import PreparedDevice

DEFAULT_CDI_DIR = Path("/var/run/cdi")
CDI_VERSION = "0.6.0"
VENDOR = "k8s.gpu.gang-scheduler.io"
CLASS = "claim"
KIND = f"{VENDOR}/{CLASS}"
PREPARED_RECORD_KEY = "gpu.gang-scheduler.io/prepared"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_TEMPORARY_SUFFIX = ".tmp"
# A claim's uid as the API server writes them (a UUID); anything else could walk out of
# the CDI directory through the file name.
_UID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def valid_uid(uid: str) -> bool:
    return bool(_UID.match(uid))


def spec_path(directory: Path, claim_uid: str) -> Path:
    if not valid_uid(claim_uid):
        raise ValueError(f"claim uid {claim_uid!r} is not a uid")
    return directory / f"{VENDOR}-{CLASS}_{claim_uid}.json"


def device_id(name: str) -> str:
    """The fully qualified CDI device ID the kubelet hands the runtime."""
    return f"{KIND}={name}"


@dataclass(frozen=True)
class GrantedGpu:
    """One allocation result of a claim, as the container gets it."""

    request: str
    device: str  # the slice's device name, gpu-<index>
    pool: str
    uuid: str
    minor: int
    index: int
    share_id: str = ""
    milli: int | None = None  # the consumed capacity of a share; None: the whole GPU


def claim_spec(
    claim_uid: str, gpus: Sequence[GrantedGpu]
) -> tuple[dict[str, Any], list[PreparedDevice]]:
    """The CDI spec of one claim, and the devices the kubelet is answered with."""
    devices: list[dict[str, Any]] = []
    prepared: list[PreparedDevice] = []
    for number, gpu in enumerate(gpus):
        name = f"{claim_uid}-{number}"
        env = [f"{VISIBLE_DEVICES_ENV}={DEVICE_LIST_ROOT}"]
        if gpu.milli is not None:
            env.append(f"GANG_SCHEDULER_GPU_{gpu.index}_MILLI={gpu.milli}")
        devices.append(
            {
                "name": name,
                "containerEdits": {
                    "env": env,
                    "deviceNodes": [{"path": f"/dev/nvidia{gpu.minor}"}],
                    "mounts": [
                        {
                            "hostPath": "/dev/null",
                            "containerPath": f"{DEVICE_LIST_ROOT}/{gpu.uuid}",
                            "options": ["ro", "nosuid", "nodev", "bind"],
                        }
                    ],
                },
            }
        )
        prepared.append(
            PreparedDevice((gpu.request,), gpu.pool, gpu.device, (device_id(name),), gpu.share_id)
        )
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "annotations": {PREPARED_RECORD_KEY: json.dumps([_record(d) for d in prepared])},
        "devices": devices,
        "containerEdits": {"deviceNodes": [{"path": path} for path in CONTROL_NODES]},
    }
    return spec, prepared


def _record(device: PreparedDevice) -> dict[str, Any]:
    return {
        "requests": list(device.request_names),
        "pool": device.pool_name,
        "device": device.device_name,
        "cdi": list(device.cdi_device_ids),
        "shareID": device.share_id,
    }


def write_spec(directory: Path, claim_uid: str, spec: dict[str, Any]) -> Path:
    """Write the claim's spec whole: a temporary file, fsync, rename over the name."""
    path = spec_path(directory, claim_uid)
    directory.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + _TEMPORARY_SUFFIX)
    with open(temporary, "w", encoding="utf-8") as out:
        json.dump(spec, out, indent=1, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    _sync_directory(directory)
    return path


def _sync_directory(directory: Path) -> None:
    """The rename itself made durable (a crash right after it keeps the file)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def read_prepared(directory: Path, claim_uid: str) -> list[PreparedDevice] | None:
    """The devices recorded for the claim, or None when it is not prepared (no file, or
    one this agent did not write whole: then it is prepared again)."""
    try:
        with open(spec_path(directory, claim_uid), encoding="utf-8") as source:
            spec = json.load(source)
        records = json.loads(spec["annotations"][PREPARED_RECORD_KEY])
        return [
            PreparedDevice(
                tuple(str(r) for r in record["requests"]),
                str(record["pool"]),
                str(record["device"]),
                tuple(str(c) for c in record["cdi"]),
                str(record.get("shareID", "")),
            )
            for record in records
        ]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_spec(directory: Path, claim_uid: str) -> bool:
    """Delete the claim's spec; False when there was none (already unprepared)."""
    try:
        spec_path(directory, claim_uid).unlink()
    except FileNotFoundError:
        return False
    _sync_directory(directory)
    return True


def remove_leftovers(directory: Path) -> list[Path]:
    """Temporary files of this driver a crash left behind (never renamed: the claim
    they were for is prepared again when the kubelet asks)."""
    removed = []
    for path in directory.glob(f"{VENDOR}-{CLASS}_*.json{_TEMPORARY_SUFFIX}"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
