"""DRA devices seen as GPUs with milli shares: the adapter that lets the packing scores
(FGD, share completion, fill fragmentation), the whole-node reserve and the device
chooser judge a DRA share exactly as they judge an `nvidia.com/vgpu` share
(docs/dra.md, "Packing DRA shares").

The convention (docs/conventions.md): a device is a *shared GPU* when it allows
multiple allocations and has the capacity `gpu.gang-scheduler.io/milli` (written with
that fully qualified name), this project's milli-GPU: 1000 is the whole device (a
device publishing another value is not read as a shared GPU). A claim is a *GPU
demand* when it has one request, `exactly`, ExactCount, no admin access, no
constraints, that asks `capacity.requests` of that capacity and of nothing else:
count 1 with a share below the whole is a fraction of one GPU; count N asking the
whole capacity is N whole GPUs (what `nvidia.com/vgpu` and `nvidia.com/gpu` ask).

A node's shared GPUs, in the order the allocator lists them, become `GpuDevice`s (index
in that order, uuid the device's "driver/pool/device", model from the device's
`productName` attribute) with their free milli: the capacity minus the shares
allocations and holds consume, 0 for a device taken whole. Pure functions over the
DraCache's records; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from cache.dra.claims import ALL, Claim
from cache.dra.slices import Device, DeviceId
from cache.dra.usage import DeviceUse
from cache.gpu import DeviceShares, GpuDevice, GpuRequest
from cache.resources import MILLI_PER_GPU

SHARE_DRIVER = "gpu.gang-scheduler.io"
# The capacity a shared GPU publishes, in milli-GPU (the whole device).
SHARE_CAPACITY = f"{SHARE_DRIVER}/milli"
# The GPU model, as NVIDIA's DRA driver names the attribute (qualified by the driver).
PRODUCT_ATTRIBUTE = "productName"


@dataclass(frozen=True, slots=True)
class SharedGpus:
    """A node's shared GPUs as the GPU view of a node has them: `devices[i]` is
    `ids[i]`, with `free[i]` milli left."""

    ids: tuple[DeviceId, ...] = ()
    devices: tuple[GpuDevice, ...] = ()
    free: tuple[int, ...] = ()

    def index_of(self, device: DeviceId) -> int:
        """The index of `device` (-1 when it is not one of them)."""
        try:
            return self.ids.index(device)
        except ValueError:
            return -1


NO_SHARED_GPUS = SharedGpus()


def share_capacity(device: Device) -> Fraction | None:
    """The device's milli-GPU capacity when it is a shared GPU (None otherwise)."""
    if not device.allow_multiple_allocations or device.refusal:
        return None
    value = device.written_capacity.get(SHARE_CAPACITY)
    return value if value == MILLI_PER_GPU else None


def plain_shared_gpu(device: Device) -> bool:
    """A shared GPU on which a GPU demand is served by its free milli alone: the share
    capacity is its only capacity and has no requestPolicy (a share consumes what it
    asks, nothing is rounded), and no counters, taints or node binding of its own
    take part. On a node whose devices a demand can use are all such, whether the
    demand fits is what GpuFit finds on the node's shown GPUs (docs/dra.md, "Packing
    DRA shares")."""
    return (
        share_capacity(device) is not None
        and len(device.written_capacity) == 1
        and not device.policies
        and not device.consumes_counters
        and not device.taints
        and device.binding is None
        and not device.binds_to_node
    )


def free_milli(capacity: Fraction, use: DeviceUse) -> int:
    """Milli-GPU left of a shared GPU of `capacity` under `use`, rounded down (a device
    taken whole, or over-committed, has 0)."""
    if use.whole:
        return 0
    left = capacity - use.consumed.get(SHARE_CAPACITY, Fraction(0))
    if left <= 0:
        return 0
    return int(left)


def device_model(driver: str, device: Device) -> str:
    value = device.attributes.get(f"{driver}/{PRODUCT_ATTRIBUTE}")
    if value is None or value.kind != "string" or not isinstance(value.value, str):
        return ""
    return value.value


def shared_gpus(
    candidates: Iterable[tuple[DeviceId, Device]], use_of: Mapping[DeviceId, DeviceUse]
) -> SharedGpus:
    """The shared GPUs among a node's `candidates` (in the allocator's order) and their
    free milli given what each device's use is (`use_of`; a device not named is free)."""
    ids: list[DeviceId] = []
    devices: list[GpuDevice] = []
    free: list[int] = []
    for device_id, device in candidates:
        capacity = share_capacity(device)
        if capacity is None:
            continue
        index = len(ids)
        ids.append(device_id)
        devices.append(
            GpuDevice(index, str(device_id), device_model(device_id.driver, device), 0, None)
        )
        free.append(free_milli(capacity, use_of.get(device_id, DeviceUse())))
    if not ids:
        return NO_SHARED_GPUS
    return SharedGpus(tuple(ids), tuple(devices), tuple(free))


def device_id_of(uuid: str) -> DeviceId | None:
    """The DeviceId a shared GPU's uuid ("driver/pool/device") names: a driver name
    and a device name hold no "/", a pool name may."""
    driver, _, rest = uuid.partition("/")
    pool, _, device = rest.rpartition("/")
    if not driver or not pool or not device:
        return None
    return DeviceId(driver, pool, device)


def shared_gpu_ids(devices: Sequence[GpuDevice], shares: DeviceShares) -> tuple[DeviceId, ...]:
    """The DRA devices that `shares` ((index, milli), ...) of a node showing its shared
    GPUs as `devices` name, in the shares' order (indices out of range are skipped)."""
    found: list[DeviceId] = []
    for index, _ in shares:
        if 0 <= index < len(devices):
            device_id = device_id_of(devices[index].uuid)
            if device_id is not None:
                found.append(device_id)
    return tuple(found)


def gpu_demand(claim: Claim) -> GpuRequest | None:
    """The GPUs `claim` asks, as a vgpu/gpu request would (module docstring); None when
    the claim is not a GPU demand of this form."""
    if len(claim.requests) != 1 or claim.constraints:
        return None
    exact = claim.requests[0].exactly
    if exact is None or exact.refusal or exact.admin_access or exact.mode == ALL:
        return None
    if len(exact.capacity) != 1 or exact.capacity[0][0] != SHARE_CAPACITY:
        return None
    asked = exact.capacity[0][1]
    if asked <= 0 or asked.denominator != 1 or asked > MILLI_PER_GPU:
        return None
    milli = int(asked)
    if milli < MILLI_PER_GPU and exact.count != 1:
        return None  # several fractions: not a shape vgpu can ask
    return GpuRequest(exact.count, milli)
