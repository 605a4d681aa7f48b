"""GPU devices, their pairwise links, a pod's GPU request and its device assignment.

Conventions (docs/conventions.md lists them for users):
- `gang-scheduler.io/gpu-topology` (node annotation, JSON, written by the node agent):
  `{"version": 1, "devices": [{"index": 0, "uuid": "GPU-..", "model": "A100-SXM4-80GB",
  "memoryMiB": 81920, "numa": 0, "healthy": true}, ...],
  "links": [["X", "NV12", "SYS"], ...]}` where links[i][j] is the level between devices
  i and j in `nvidia-smi topo -m` notation (NV<n>, BOARD, PIX, PXB, PHB, NODE, SYS).
- `gang-scheduler.io/gpu-devices` (pod annotation, written at bind):
  `<index>:<milli>[,<index>:<milli>...]`, e.g. `0:1000,1:1000` or `3:470`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from cache.limits import (
    INT32_DIGITS,
    MAX_GPU_MEMORY_MIB,
    MAX_GPUS_PER_NODE,
    MAX_INT32,
    MAX_NVLINK_LINKS,
    MAX_TOPOLOGY_TEXT,
    MIN_INT32,
    shown,
    small_int,
)
from cache.resources import MILLI_PER_GPU, SHARED_GPU, WHOLE_GPU

TOPOLOGY_ANNOTATION = "gang-scheduler.io/gpu-topology"
ASSIGNMENT_ANNOTATION = "gang-scheduler.io/gpu-devices"
TOPOLOGY_VERSION = 1

# GPU feature discovery labels (NVIDIA GFD), read when no topology annotation exists.
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
COUNT_LABEL = "nvidia.com/gpu.count"


class LinkLevel(IntEnum):
    """How two GPUs are joined, worst to best; the value orders them."""

    UNKNOWN = 0
    SYS = 1
    NODE = 2
    PHB = 3
    PXB = 4
    PIX = 5
    BOARD = 6
    NVLINK = 7


# Pair scores as the field uses them (NVIDIA go-gpuallocator, HAMi): NVLink 100 per
# link, same board 60, PIX 50, PXB 40, PHB 30, NODE 20, SYS 10. Unknown scores 0.
LEVEL_SCORE = {
    LinkLevel.UNKNOWN: 0,
    LinkLevel.SYS: 10,
    LinkLevel.NODE: 20,
    LinkLevel.PHB: 30,
    LinkLevel.PXB: 40,
    LinkLevel.PIX: 50,
    LinkLevel.BOARD: 60,
}
NVLINK_SCORE_PER_LINK = 100

_NVLINK = re.compile(r"^NV(\d+)$")
_LEVEL_NAMES = {level.name: level for level in LinkLevel if level != LinkLevel.NVLINK}


def link_score(text: str) -> int:
    """Score of one `nvidia-smi topo -m` cell ("NV4", "PIX", "SYS", ...)."""
    cell = text.strip().upper()
    match = _NVLINK.match(cell)
    if match:
        links = small_int(match[1], 3)
        if links is None or links > MAX_NVLINK_LINKS:
            raise ValueError(f"GPU link level {shown(text)} has more than {MAX_NVLINK_LINKS} links")
        return NVLINK_SCORE_PER_LINK * max(1, links)
    level = _LEVEL_NAMES.get(cell)
    if level is None:
        raise ValueError(f"unknown GPU link level {shown(text)}")
    return LEVEL_SCORE[level]


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str
    model: str
    memory_mib: int
    numa: int | None
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """A node's devices and pair scores; `pair_scores` is None when links are unknown."""

    devices: tuple[GpuDevice, ...]
    pair_scores: tuple[tuple[int, ...], ...] | None


def parse_topology(text: str) -> GpuInventory:
    """Parse the topology annotation; raises ValueError with a readable message. Its
    size, device count and numbers are bounded (cache.limits)."""
    if len(text) > MAX_TOPOLOGY_TEXT:
        raise ValueError(f"{TOPOLOGY_ANNOTATION} is longer than {MAX_TOPOLOGY_TEXT} characters")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{TOPOLOGY_ANNOTATION} is not JSON: {error.msg}") from None
    except ValueError:  # a number of 4,300+ digits, which int() refuses
        raise ValueError(f"{TOPOLOGY_ANNOTATION} has a number out of range") from None
    except RecursionError:
        raise ValueError(f"{TOPOLOGY_ANNOTATION} is nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError(f"{TOPOLOGY_ANNOTATION} must be a JSON object")
    if data.get("version") != TOPOLOGY_VERSION:
        raise ValueError(
            f"{TOPOLOGY_ANNOTATION} version {shown(data.get('version'))} is not supported "
            f"(expected {TOPOLOGY_VERSION})"
        )
    raw_devices = data.get("devices")
    if not isinstance(raw_devices, list):
        raise ValueError(f"{TOPOLOGY_ANNOTATION}: devices must be a list")
    if len(raw_devices) > MAX_GPUS_PER_NODE:
        raise ValueError(
            f"{TOPOLOGY_ANNOTATION} lists {len(raw_devices)} devices, more than "
            f"{MAX_GPUS_PER_NODE} GPUs per node"
        )
    devices = []
    for position, raw in enumerate(raw_devices):
        if not isinstance(raw, dict):
            raise ValueError(f"{TOPOLOGY_ANNOTATION}: device {position} is not an object")
        if raw.get("index") != position:
            raise ValueError(
                f"{TOPOLOGY_ANNOTATION}: device {position} has index {shown(raw.get('index'))}; "
                "devices must be listed by index from 0"
            )
        numa = raw.get("numa")
        memory = raw.get("memoryMiB", 0)
        if not _int_within(memory, 0, MAX_GPU_MEMORY_MIB) or (
            numa is not None and not _int_within(numa, MIN_INT32, MAX_INT32)
        ):
            raise ValueError(
                f"{TOPOLOGY_ANNOTATION}: device {position} has a memoryMiB or numa that is "
                "not an integer in range"
            )
        devices.append(
            GpuDevice(
                index=position,
                uuid=str(raw.get("uuid", "")),
                model=str(raw.get("model", "")),
                memory_mib=memory,
                numa=numa,
                healthy=bool(raw.get("healthy", True)),
            )
        )
    links = data.get("links")
    if links is None:
        return GpuInventory(tuple(devices), None)
    count = len(devices)
    if not isinstance(links, list) or len(links) != count:
        raise ValueError(f"{TOPOLOGY_ANNOTATION}: links must be a {count}x{count} matrix")
    scores: list[tuple[int, ...]] = []
    for i, row in enumerate(links):
        if not isinstance(row, list) or len(row) != count:
            raise ValueError(f"{TOPOLOGY_ANNOTATION}: links row {i} must have {count} cells")
        scores.append(tuple(0 if i == j else link_score(str(cell)) for j, cell in enumerate(row)))
    for i in range(count):
        for j in range(i):
            if scores[i][j] != scores[j][i]:
                raise ValueError(f"{TOPOLOGY_ANNOTATION}: links[{i}][{j}] != links[{j}][{i}]")
    return GpuInventory(tuple(devices), tuple(scores))


def _int_within(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def format_topology(devices: Sequence[GpuDevice], links: Sequence[Sequence[str]] | None) -> str:
    """The topology annotation for `devices` and a `nvidia-smi topo -m` style link
    matrix (None: links unknown); `parse_topology` reads it back."""
    document: dict[str, object] = {
        "version": TOPOLOGY_VERSION,
        "devices": [
            {
                "index": device.index,
                "uuid": device.uuid,
                "model": device.model,
                "memoryMiB": device.memory_mib,
                "numa": device.numa,
                "healthy": device.healthy,
            }
            for device in devices
        ],
    }
    if links is not None:
        document["links"] = [list(row) for row in links]
    return json.dumps(document)


def inventory_from_capacity(whole: int, shared_milli: int, labels: dict[str, str]) -> GpuInventory:
    """Devices inferred from `nvidia.com/gpu` / `nvidia.com/vgpu` capacity and GFD labels.

    Both resources describe the same physical GPUs, so the node has as many devices as
    the larger of the two implies (GFD's count label when it is larger still). Links
    are unknown. ValueError when that is more than MAX_GPUS_PER_NODE (a label of 10^6
    would build a million device records).
    """
    count = max(whole, -(-shared_milli // MILLI_PER_GPU))
    counted = _label_number(labels, COUNT_LABEL)
    if count and counted is not None:
        count = max(count, counted)
    if count > MAX_GPUS_PER_NODE:
        source = f"label {COUNT_LABEL}" if counted == count else f"{WHOLE_GPU}/{SHARED_GPU}"
        raise ValueError(
            f"{source} says {shown(count)} GPUs, more than {MAX_GPUS_PER_NODE} per node; "
            "the node offers no GPU until it is fixed"
        )
    model = labels.get(PRODUCT_LABEL, "")
    memory = _label_number(labels, MEMORY_LABEL)
    if memory is None or memory > MAX_GPU_MEMORY_MIB:
        memory = 0
    devices = tuple(GpuDevice(i, "", model, memory, None) for i in range(count))
    return GpuInventory(devices, None)


def _label_number(labels: dict[str, str], key: str) -> int | None:
    """A label's whole number (ASCII digits; isdigit() alone admits "²", which int()
    refuses), or None; longer than an int64 reads as a number beyond every bound."""
    text = labels.get(key, "")
    if not text.isascii() or not text.isdigit():
        return None
    value = small_int(text, 19)
    return value if value is not None else 2**63


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of GPUs: `count` devices with `milli` free on each (0 = none)."""

    count: int = 0
    milli: int = 0

    @property
    def total_milli(self) -> int:
        return self.count * self.milli

    @property
    def fractional(self) -> bool:
        return 0 < self.milli < MILLI_PER_GPU

    def describe(self) -> str:
        if not self.count:
            return "no GPU"
        if self.fractional:
            return f"{self.milli}/{MILLI_PER_GPU} of one GPU"
        return f"{self.count} whole GPU" + ("s" if self.count > 1 else "")


NO_GPU = GpuRequest()


def gpu_request(requests: dict[str, int], share_milli: int = 1) -> GpuRequest:
    """A pod's GPU request from its summed requests (shares in milli); ValueError
    explains a refusal, in the units the pod was written in (`share_milli` milli each)."""
    whole = requests.get(WHOLE_GPU, 0)
    shared = requests.get(SHARED_GPU, 0)
    if whole and shared:
        raise ValueError(
            f"requests both {WHOLE_GPU} ({whole}) and {SHARED_GPU} ({shared}); ask for one"
        )
    if max(whole, shared // MILLI_PER_GPU) > MAX_GPUS_PER_NODE:
        raise ValueError(
            f"requests more than {MAX_GPUS_PER_NODE} GPUs, more than any node may have"
        )
    if whole:
        return GpuRequest(whole, MILLI_PER_GPU)
    if not shared:
        return NO_GPU
    if shared < MILLI_PER_GPU:
        return GpuRequest(1, shared)
    if shared % MILLI_PER_GPU:
        asked, per_gpu = shared // share_milli, MILLI_PER_GPU // share_milli
        raise ValueError(
            f"{SHARED_GPU}: {asked} is above {per_gpu} but not a whole multiple of it; "
            f"a share under {per_gpu} fits on one GPU, larger requests take whole GPUs"
        )
    return GpuRequest(shared // MILLI_PER_GPU, MILLI_PER_GPU)


DeviceShares = tuple[tuple[int, int], ...]
"""(device index, milli) pairs, sorted by index."""


def format_assignment(shares: DeviceShares) -> str:
    return ",".join(f"{index}:{milli}" for index, milli in shares)


def parse_assignment(text: str) -> DeviceShares:
    """Parse `0:1000,1:1000`; raises ValueError with a readable message."""
    shares: dict[int, int] = {}
    for part in text.split(","):
        index_text, sep, milli_text = part.strip().partition(":")
        index = small_int(index_text, INT32_DIGITS) if sep else None
        milli = small_int(milli_text, INT32_DIGITS) if sep else None
        if index is None or milli is None:
            raise ValueError(
                f"{ASSIGNMENT_ANNOTATION}: {shown(part.strip())} is not <device index>:<milli>"
            )
        if not 0 < milli <= MILLI_PER_GPU or index in shares:
            raise ValueError(
                f"{ASSIGNMENT_ANNOTATION}: {shown(part.strip())} repeats a device or has a share "
                f"outside 1..{MILLI_PER_GPU}"
            )
        shares[index] = milli
    return tuple(sorted(shares.items()))


# --- the scheduler's signature on an assignment ---------------------------------------------
# A bound pod's `gang-scheduler.io/gpu-devices` is trusted only when it carries the
# scheduler's signature in this annotation (docs/security.md): anyone who may create or
# patch a pod can write the assignment, only the holder of the key can sign it.
SIGNATURE_ANNOTATION = "gang-scheduler.io/gpu-devices-signature"
SIGNATURE_VERSION = "v1"
MIN_KEY_BYTES = 16


def _signed_text(uid: str, node: str, shares: DeviceShares) -> bytes:
    # The pod's uid and node are signed with the devices, so a signed value copied onto
    # another pod (or read from a pod bound elsewhere) does not verify.
    return "\n".join((SIGNATURE_VERSION, uid, node, format_assignment(shares))).encode()


def sign_assignment(key: bytes, uid: str, node: str, shares: DeviceShares) -> str:
    """The signature annotation's value for this pod, node and devices:
    `v1:<hex HMAC-SHA256>`."""
    digest = hmac.new(key, _signed_text(uid, node, shares), hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}:{digest}"


def verify_assignment(
    key: bytes, uid: str, node: str, shares: DeviceShares, signature: str
) -> bool:
    """Whether `signature` is the scheduler's for this pod, node and devices."""
    expected = sign_assignment(key, uid, node, shares)
    return hmac.compare_digest(expected.encode(), signature.encode(errors="replace"))
