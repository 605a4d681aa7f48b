"""Which pod an Allocate call is for, what its container gets, and share-device IDs.

Pure functions, no I/O (the device plugin, `deviceplugin.py`, lists the pods and
writes the patch). docs/device-plugin.md states the same rules for operators.

Whole GPUs (`nvidia.com/gpu`, on nodes that opt in) follow the same rules with a unit of
1000 and one device per GPU named by its UUID; there the IDs the kubelet passes name
GPUs, so `choose` first takes the container assigned exactly those GPUs.

Share-devices: every GPU is advertised as `MILLI_PER_GPU / unit` devices with IDs
`<GPU uuid>::<k>`, each worth `unit` milli (default 1: 1000 per GPU). The kubelet
counts IDs: a container asking for `nvidia.com/vgpu: r` is given r IDs, whichever it
likes; only their number matters here, the devices come from the pod's assignment.

The kubelet's Allocate names device IDs, not the pod. The rule that finds the pod:
1. candidates: pods bound to this node, not terminating, not finished, scheduled by
   one of the trusted schedulers, asking for `nvidia.com/vgpu` in their containers,
   with a valid `gang-scheduler.io/gpu-devices` assignment that splits over those
   containers (below), and with a container not yet marked allocated in
   `gang-scheduler.io/gpu-allocated`;
2. a candidate's next container is its first vgpu container (its init containers in
   spec order, then its containers: the order the kubelet allocates them in) not yet
   marked, nor served by this plugin since it
   started (a mark removed by anyone never gets a container served twice); it
   matches when its request equals the number of IDs asked for;
3. among the matches, the pod bound first wins: the PodScheduled=True condition's
   lastTransitionTime, else creationTimestamp; ties by creationTimestamp, then
   namespace/name.

Splitting a pod's assignment over its containers: the assignment is per pod (the
scheduler places the pod's total). The vgpu containers take it in spec order as
consecutive pieces of one tape laid over the assigned devices (index order): a
container under 1000 milli must find its piece on one device, a container of whole
GPUs must get whole devices. Two containers of 300 and 700 share the one device of
`2:1000`; two of 1000 each get one device of `0:1000,1:1000`. A pod whose split does
not work out (700 + 700 + 600 over two devices) is refused with that reason. Init
containers asking for GPUs take theirs from the start of the tape, which the containers
after them take again, as the kubelet reuses their devices (split_assignment).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from cache.gpu import ASSIGNMENT_ANNOTATION, DeviceShares, format_assignment, parse_assignment
from cache.jsonobj import mapping
from cache.pod import DEFAULT_SCHEDULER, parse_time
from cache.resources import MILLI_PER_GPU, SHARED_GPU, parse_resource_list
from cache.signing import NODE_SIGNATURE_ANNOTATION, SigningKeys

ALLOCATED_ANNOTATION = "gang-scheduler.io/gpu-allocated"
DEFAULT_SCHEDULER_NAMES = ("gang-scheduler",)

# What a container gets (docs/conventions.md lists them).
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
SHARE_ENV = "GANG_SCHEDULER_GPU_SHARE_MILLI"
DEVICES_ENV = "GANG_SCHEDULER_GPU_DEVICES"
CONTAINER_ENV = "GANG_SCHEDULER_GPU_CONTAINER"

ID_SEPARATOR = "::"
# No container served yet (read_pod, choose).
EMPTY_SERVED: Mapping[str, frozenset[str]] = {}
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


# --- share-devices -----------------------------------------------------------------------------
def valid_unit(unit: int) -> bool:
    """Whether a GPU splits into whole share-devices of `unit` milli."""
    return 0 < unit <= MILLI_PER_GPU and MILLI_PER_GPU % unit == 0


def share_ids(uuid: str, unit: int) -> list[str]:
    """The share-device IDs of one GPU: `<uuid>::0` .. `<uuid>::<1000/unit - 1>`."""
    return [f"{uuid}{ID_SEPARATOR}{k}" for k in range(MILLI_PER_GPU // unit)]


def uuid_of(device_id: str) -> str:
    """The GPU a share-device ID belongs to ("" when the ID is not one of ours)."""
    uuid, sep, _ = device_id.rpartition(ID_SEPARATOR)
    return uuid if sep else ""


# Whole GPUs (`nvidia.com/gpu`, served when the node opts in): one device per GPU whose
# ID is the GPU's UUID, as NVIDIA's device plugin names them by default, so that the
# kubelet's checkpoint of running containers stays valid across the hand-over from
# NVIDIA's plugin (docs/device-plugin.md, "Whole GPUs").
def device_ids(uuid: str, unit: int, whole: bool) -> list[str]:
    """The IDs one GPU is advertised as: its UUID (whole) or its share-devices."""
    return [uuid] if whole else share_ids(uuid, unit)


def gpu_of(device_id: str, whole: bool) -> str:
    """The UUID of the GPU an advertised ID stands for."""
    return device_id if whole else uuid_of(device_id)


# --- reading a pod -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ContainerPart:
    """One vgpu container and its piece of the pod's assignment."""

    name: str
    request: int  # the container's nvidia.com/vgpu, in share-devices
    shares: DeviceShares  # (device index, milli)
    # An ordinary init container: it runs to completion before the next container
    # starts, and the containers after it take its devices again.
    init: bool = False

    @property
    def milli(self) -> int:
        return sum(milli for _, milli in self.shares)

    def indices(self) -> frozenset[int]:
        """The GPUs (NVML indices) of the container's piece."""
        return frozenset(index for index, _ in self.shares)


@dataclass(frozen=True, slots=True)
class Candidate:
    namespace: str
    name: str
    uid: str
    resource_version: str
    bound_at: float  # epoch seconds; 0.0 when unknown
    created: float
    containers: tuple[ContainerPart, ...]
    allocated: frozenset[str]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def next_container(self) -> ContainerPart | None:
        for part in self.containers:
            if part.name not in self.allocated:
                return part
        return None

    def order(self) -> tuple[float, float, str]:
        created = self.created or float("inf")
        return (self.bound_at or created, created, self.key)


@dataclass(frozen=True, slots=True)
class Refused:
    """A pod on this node that asks for vgpu but cannot be served, and why."""

    key: str
    reason: str


def _device_request(container: Mapping[str, object], resource: str = SHARED_GPU) -> int:
    resources = mapping(container.get("resources"))
    merged = dict(mapping(resources.get("limits")))
    merged.update(mapping(resources.get("requests")))
    if resource not in merged:
        return 0
    return parse_resource_list({resource: merged[resource]})[resource]


def _bind_time(status: Mapping[str, object]) -> float:
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        condition = mapping(condition)
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return 0.0


def split_assignment(
    shares: DeviceShares,
    requests: Sequence[tuple[str, int]],
    unit: int,
    init: Sequence[tuple[str, int, bool]] = (),
) -> tuple[ContainerPart, ...]:
    """The containers' pieces of a pod's assignment (module docstring), init containers
    first, in the order the kubelet allocates them; ValueError says why it does not
    split. `init`: the init containers asking for the resource, (name, request,
    sidecar) in spec order; a sidecar (restartPolicy Always) keeps running beside what
    follows, an ordinary one runs alone beside the sidecars started before it.

    The layout follows kube-scheduler's sum (cache.pod.pod_requests): sidecars and then
    the app containers take consecutive pieces of the tape; an ordinary init container
    takes the piece right after the sidecars started before it, which the containers
    after it take again (the kubelet hands an init container's devices on to them:
    its device manager's devicesToReuse), so the pod needs the larger of the two."""
    pieces: list[tuple[str, int, int, bool]] = []  # name, request, offset, ordinary init
    running = 0  # share-devices taken by the sidecars so far, then by the app containers
    peak = 0
    for name, request, sidecar in init:
        pieces.append((name, request, running, not sidecar))
        if sidecar:
            running += request
            peak = max(peak, running)
        else:
            peak = max(peak, running + request)
    for name, request in requests:
        pieces.append((name, request, running, False))
        running += request
    wanted = max(running, peak) * unit
    total = sum(milli for _, milli in shares)
    if wanted != total:
        asks = " + ".join(str(r * unit) for _, r in requests)
        if init:
            asks = f"the larger of the init containers' peak and {asks or '0'}"
        return _refuse(
            f"{ASSIGNMENT_ANNOTATION} gives {total} milli in all, but the containers ask "
            f"for {wanted} ({asks})"
        )
    parts = []
    for name, request, offset, ordinary in pieces:
        taken = _tape_piece(shares, offset * unit, request * unit)
        whole = request * unit >= MILLI_PER_GPU
        if (len(taken) > 1 or whole) and any(milli != MILLI_PER_GPU for _, milli in taken):
            return _refuse(
                f"container {name}'s {request * unit} milli do not fall on "
                + ("whole GPUs" if whole else "one GPU")
                + f" of {ASSIGNMENT_ANNOTATION}={format_assignment(shares)} "
                "(the containers take the assignment in the kubelet's order)"
            )
        parts.append(ContainerPart(name, request, taken, ordinary))
    return tuple(parts)


def _tape_piece(shares: DeviceShares, start: int, need: int) -> DeviceShares:
    """The `need` milli of the tape laid over the assigned devices (index order) that
    begin `start` milli into it."""
    taken: list[tuple[int, int]] = []
    for index, milli in shares:
        skip = min(start, milli)
        start -= skip
        piece = min(milli - skip, need)
        if piece > 0:
            taken.append((index, piece))
            need -= piece
        if need == 0:
            break
    return tuple(taken)


def _refuse(reason: str) -> tuple[ContainerPart, ...]:
    raise ValueError(reason)


def read_pod(
    obj: Mapping[str, object],
    node: str,
    unit: int,
    schedulers: Iterable[str],
    served: Mapping[str, frozenset[str]] = EMPTY_SERVED,
    resource: str = SHARED_GPU,
    keys: SigningKeys | None = None,
) -> Candidate | Refused | None:
    """A pod as the Allocate rule sees it: a Candidate, a Refused vgpu pod with its
    reason, or None when the pod is not a vgpu pod that may start on this node (not
    bound here, terminating, finished, or asking for no vgpu). Never raises on a
    user's values. `served`: pod uid -> containers this plugin served since it
    started; they count as allocated whatever the pod's mark says now. `resource`:
    the plugin's resource (`nvidia.com/gpu` with unit 1000 for whole GPUs). `keys`: the
    node agents' keys; when given, an assignment counts only with a node signature one
    of them verifies for this pod's uid, this node and these devices."""
    meta = mapping(obj.get("metadata"))
    spec = mapping(obj.get("spec"))
    status = mapping(obj.get("status"))
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    if str(spec.get("nodeName") or "") != node or meta.get("deletionTimestamp"):
        return None
    if str(status.get("phase") or "Pending") in FINISHED_PHASES:
        return None
    containers = spec.get("containers")
    init = spec.get("initContainers")
    try:
        requests = [
            (str(mapping(c).get("name") or ""), _device_request(mapping(c), resource))
            for c in (containers if isinstance(containers, list) else ())
        ]
        init_requests = [
            (
                str(mapping(c).get("name") or ""),
                _device_request(mapping(c), resource),
                mapping(c).get("restartPolicy") == "Always",
            )
            for c in (init if isinstance(init, list) else ())
        ]
    except ValueError as error:
        return Refused(key, str(error))
    requests = [(name, request) for name, request in requests if request > 0]
    init_requests = [entry for entry in init_requests if entry[1] > 0]
    if not requests and not init_requests:
        return None
    trusted = set(schedulers)
    scheduler = str(spec.get("schedulerName") or DEFAULT_SCHEDULER)
    if scheduler not in trusted:
        return Refused(
            key,
            f"scheduled by {scheduler!r}, not by {' or '.join(sorted(trusted))}: its "
            f"{ASSIGNMENT_ANNOTATION} (if any) is not trusted",
        )
    annotations = mapping(meta.get("annotations"))
    text = annotations.get(ASSIGNMENT_ANNOTATION)
    if not isinstance(text, str):
        return Refused(key, f"no {ASSIGNMENT_ANNOTATION} assignment")
    uid = str(meta.get("uid") or "")
    try:
        shares = parse_assignment(text)
        parts = split_assignment(shares, requests, unit, init_requests)
    except ValueError as error:
        return Refused(key, str(error))
    if keys is not None:
        signature = annotations.get(NODE_SIGNATURE_ANNOTATION)
        if not isinstance(signature, str) or not keys.verifies(uid, node, shares, signature):
            return Refused(
                key,
                f"{ASSIGNMENT_ANNOTATION}={format_assignment(shares)} is not signed by the "
                f"scheduler for this pod and node ({NODE_SIGNATURE_ANNOTATION} "
                f"{'missing' if signature is None else 'does not verify'}): forged, copied "
                "or edited after the bind; refused",
            )
    marked = annotations.get(ALLOCATED_ANNOTATION)
    allocated = frozenset(
        name.strip() for name in (marked.split(",") if isinstance(marked, str) else ()) if name
    ) | served.get(uid, frozenset())
    return Candidate(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=uid,
        resource_version=str(meta.get("resourceVersion") or ""),
        bound_at=_bind_time(status),
        created=parse_time(meta.get("creationTimestamp")),
        containers=parts,
        allocated=allocated,
    )


# --- choosing ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Match:
    pod: Candidate
    container: ContainerPart


@dataclass(frozen=True, slots=True)
class NoMatch:
    """Why no pod matched: a message for the kubelet (the pod's event) and the log."""

    message: str


def choose(
    pods: Iterable[Mapping[str, object]],
    node: str,
    count: int,
    unit: int,
    schedulers: Iterable[str] = DEFAULT_SCHEDULER_NAMES,
    served: Mapping[str, frozenset[str]] = EMPTY_SERVED,
    resource: str = SHARED_GPU,
    named: Collection[int] = (),
    keys: SigningKeys | None = None,
) -> Match | NoMatch:
    """The container an Allocate of `count` devices is for (module docstring); `served`
    and `resource` as for read_pod. `named`: the GPU indices the kubelet's IDs stand
    for, when they name GPUs (whole GPUs): a container assigned exactly those GPUs is
    taken before the bound-first rule. The kubelet asks GetPreferredAllocation right
    before Allocate and uses the GPUs it was given, so this finds the pod the
    preference was for even when the bound-first order changed in between. `keys`: as
    for read_pod."""
    schedulers = tuple(schedulers)
    matches: list[Match] = []
    refused: list[Refused] = []
    waiting: list[str] = []
    for obj in pods:
        read = read_pod(obj, node, unit, schedulers, served, resource, keys)
        if isinstance(read, Refused):
            refused.append(read)
        elif isinstance(read, Candidate):
            part = read.next_container()
            if part is None:
                continue
            if part.request == count:
                matches.append(Match(read, part))
            else:
                waiting.append(f"{read.key} container {part.name} asks for {part.request}")
    if matches:
        wanted = frozenset(named)
        exact = [m for m in matches if wanted and m.container.indices() == wanted]
        return min(exact or matches, key=lambda match: match.pod.order())
    lines = [
        f"no pod bound to node {node} waits for {count} {resource} devices "
        f"({count * unit} milli) with a valid {ASSIGNMENT_ANNOTATION} assignment"
    ]
    lines += [f"{item.key}: {item.reason}" for item in refused[:5]]
    lines += waiting[:5]
    return NoMatch("; ".join(lines))


# --- what the container gets -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GpuState:
    """A GPU as the plugin last saw it."""

    index: int
    uuid: str
    healthy: bool
    numa: int | None = None
    minor: int | None = None  # /dev/nvidia<minor> (isolation.py)
    memory_mib: int = 0  # 0: unknown


def container_env(match: Match, gpus: Mapping[int, GpuState]) -> dict[str, str]:
    """The environment of the matched container; ValueError when an assigned GPU is
    not on the node (any more) or unhealthy."""
    uuids = []
    for index, _ in match.container.shares:
        gpu = gpus.get(index)
        if gpu is None or not gpu.uuid:
            raise ValueError(
                f"{match.pod.key}: {ASSIGNMENT_ANNOTATION} names GPU {index}, which this node "
                "does not have (or whose UUID NVML cannot read)"
            )
        if not gpu.healthy:
            raise ValueError(f"{match.pod.key}: assigned GPU {index} ({gpu.uuid}) is unhealthy")
        uuids.append(gpu.uuid)
    shares = match.container.shares
    return {
        VISIBLE_DEVICES_ENV: ",".join(uuids),
        SHARE_ENV: str(shares[0][1]),
        DEVICES_ENV: format_assignment(shares),
        CONTAINER_ENV: f"{match.pod.key}/{match.container.name}",
    }


def allocated_patch(match: Match) -> dict[str, object]:
    """The JSON merge patch marking the container allocated; it names the pod's
    resourceVersion, so it fails (409) if the pod changed since it was read."""
    names = sorted({*match.pod.allocated, match.container.name})
    return {
        "metadata": {
            "resourceVersion": match.pod.resource_version,
            "annotations": {ALLOCATED_ANNOTATION: ",".join(names)},
        }
    }


def preferred_ids(
    match: Match,
    gpus: Mapping[int, GpuState],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    unit: int,
    whole: bool = False,
) -> list[str]:
    """IDs on the GPUs the container was assigned (share-devices, or the GPUs
    themselves when `whole`), for GetPreferredAllocation, so that the kubelet's own
    record (and the pod-resources API) names the right GPUs. Falls back to the
    kubelet's first choices when the assigned GPUs do not have enough free IDs."""
    chosen = list(must_include)
    by_uuid: dict[str, list[str]] = {}
    for device_id in available:
        if device_id not in chosen:
            by_uuid.setdefault(gpu_of(device_id, whole), []).append(device_id)
    for index, milli in match.container.shares:
        gpu = gpus.get(index)
        free = by_uuid.get(gpu.uuid, []) if gpu else []
        chosen += free[: milli // unit]
    if len(chosen) >= size:
        return chosen[:size]
    rest = [i for i in available if i not in chosen]
    return (chosen + rest)[:size]
