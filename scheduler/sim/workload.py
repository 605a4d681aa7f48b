"""Learning tasks for the time-based replay: the workload file, its pods, a generator.

A task is one learning task: roles (a parameter-server role with no GPU, a worker role
with whole GPUs or a share of one GPU), each with replicas; it arrives at `arrival`
seconds, runs for `duration` seconds once at least `min_member` of its pods are bound,
and then leaves. The file format (YAML) is documented in docs/simulator.md:

    - name: bert
      arrival: 120        # seconds from the start of the replay
      duration: 3600      # seconds of running, from the moment the gang is bound
      priority: 0         # optional; higher is scheduled first
      min_member: 5       # optional; default: every replica of every role
      roles:
        - {name: ps, replicas: 1, cpu: 8, memory: 32Gi}
        - {name: worker, replicas: 4, cpu: 8, memory: 32Gi, gpus: 1, gpu_type: A100|V100}

A task may require a topology (issue 30) with `topology`, the very object a user
writes in this project's PodGroup `spec.topology` (requiredKey, preferredKeys,
sliceSize, sliceKey); such a task's gang size and requirement then travel in a PodGroup
(`task_podgroup`) that the core reads as it reads one from the API.

`task_pods` turns a task into the Pod objects the scheduler reads (gang label, min-member
annotation, requests, GPU type as a required node affinity). `generate_workload` draws
synthetic tasks whose shape follows figures published for production ML clusters; each
figure, its source and what could not be verified are written down below and in
docs/simulator.md. Nothing here prints or raises a traceback at a user: every problem
with a file is a `WorkloadError` whose message names the task and the field.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from cache.gpu import PRODUCT_LABEL
from cache.pod import GANG_LABEL, MIN_MEMBER_ANNOTATION
from cache.podgroup_topology import read_topology
from cache.quantity import QuantityError, to_milli, to_units
from cache.resources import MILLI_PER_GPU
from cache.topology_requirement import TopologyRequirement
from scheduler.cycle.core import DEFAULT_SCHEDULER_NAME
from scheduler.process.yamltext import YamlSyntaxError, load_yaml

NAMESPACE = "sim"
# Gangs are 1 to 64 pods (issue 3); the report's gang-size buckets end there.
MAX_PODS_PER_TASK = 64
# Pods are created at their task's arrival, counted from this instant.
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

# Task names become the gang label (a label value) and part of pod names.
_TASK_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_ROLE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
_TASK_FIELDS = (
    "name",
    "arrival",
    "duration",
    "priority",
    "min_member",
    "namespace",
    "topology",
    "podgroup",
    "roles",
)
# Which PodGroup API carries a task's topology: this project's CRD, or Kubernetes' own
# (1.36 alpha, `scheduling.k8s.io/v1alpha2`: one required level, no preferred levels
# or slices).
PODGROUP_APIS = ("crd", "native")
# The PodGroup a task with a topology comes with: this project's CRD
# (deploy/crd-podgroup.yaml), as a user writes it.
PODGROUP_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
NATIVE_PODGROUP_API_VERSION = "scheduling.k8s.io/v1alpha2"
# A namespace is a DNS label (RFC 1123), as Kubernetes requires.
_NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ROLE_FIELDS = ("name", "replicas", "cpu", "memory", "gpus", "gpu_milli", "gpu_type")


class WorkloadError(ValueError):
    """A workload file that cannot be read; the message names the file, task and field."""


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    replicas: int
    cpu_milli: int
    memory_bytes: int
    # Whole GPUs per replica; 0 for a CPU-only role (a parameter server).
    gpus: int = 0
    # A share of ONE GPU per replica (1..999 milli); 0 when the role asks whole GPUs.
    gpu_milli: int = 0
    # GPU models allowed (exact `nvidia.com/gpu.product` values); () allows any.
    gpu_types: tuple[str, ...] = ()

    @property
    def milli_per_replica(self) -> int:
        """GPU milli one replica holds while it runs."""
        return self.gpus * MILLI_PER_GPU if self.gpus else self.gpu_milli


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    arrival: float
    duration: float
    roles: tuple[Role, ...]
    priority: int = 0
    # Pods that must be bound together for the task to start; None: all of them.
    min_member: int | None = None
    # The namespace its pods are created in: the team, whose ElasticQuota governs it.
    namespace: str = NAMESPACE
    # Where the gang may run (the PodGroup's spec.topology, as read by the core's own
    # reader); None: anywhere.
    topology: TopologyRequirement | None = None
    # The PodGroup API stating it (PODGROUP_APIS).
    podgroup: str = "crd"

    @property
    def key(self) -> str:
        """The gang's key in the scheduler (namespace/gang label)."""
        return f"{self.namespace}/{self.name}"

    @property
    def pods(self) -> int:
        return sum(role.replicas for role in self.roles)

    @property
    def gang_min(self) -> int:
        return self.min_member if self.min_member is not None else self.pods

    @property
    def gpu_milli(self) -> int:
        """GPU milli the whole task holds while every pod runs."""
        return sum(role.replicas * role.milli_per_replica for role in self.roles)


# --- the file ---------------------------------------------------------------------------------
def load_workload(path: Path) -> list[Task]:
    """Tasks from a workload file; OSError when it cannot be read, WorkloadError when its
    content is not a workload."""
    return parse_workload(path.read_text(encoding="utf-8"), str(path))


def parse_workload(text: str, source: str = "<workload>") -> list[Task]:
    """Tasks from the YAML text: a list of tasks, or a mapping whose `tasks` is one."""
    try:
        data = load_yaml(text)
    except YamlSyntaxError as error:
        raise WorkloadError(f"{source}: {error}") from None
    if isinstance(data, dict):
        unknown = sorted(str(key) for key in data if key != "tasks")
        if unknown:
            raise WorkloadError(f"{source}: unknown top-level field {unknown[0]!r}; known: tasks")
        data = data.get("tasks")
    if not isinstance(data, list):
        raise WorkloadError(f"{source}: expected a list of tasks (or a mapping with 'tasks')")
    if not data:
        raise WorkloadError(f"{source}: the workload has no task")
    tasks: list[Task] = []
    seen: set[str] = set()
    for position, raw in enumerate(data, start=1):
        task = _parse_task(raw, f"{source}: task #{position}")
        if task.name in seen:
            raise WorkloadError(f"{source}: task {task.name!r} (#{position}): name is repeated")
        seen.add(task.name)
        tasks.append(task)
    return tasks


def _parse_task(raw: object, where: str) -> Task:
    if not isinstance(raw, dict):
        raise WorkloadError(f"{where}: expected a mapping with fields {', '.join(_TASK_FIELDS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _TASK_NAME.match(name):
        raise WorkloadError(
            f"{where}: field 'name' must be 1-63 letters, digits, '-', '_' or '.', starting "
            f"and ending with a letter or digit, got {name!r}"
        )
    where = f"{where.rsplit(': ', 1)[0]}: task {name!r}"
    refuse_unknown(raw, _TASK_FIELDS, where)
    arrival = _number(raw, "arrival", where, minimum=0.0)
    duration = _number(raw, "duration", where, minimum=0.0, strict=True)
    priority = _integer(raw, "priority", where, default=0, minimum=-(2**31))
    raw_roles = raw.get("roles")
    if not isinstance(raw_roles, list) or not raw_roles:
        raise WorkloadError(f"{where}: field 'roles' must be a non-empty list of roles")
    roles: list[Role] = []
    for raw_role in raw_roles:
        role = _parse_role(raw_role, where)
        if any(other.name == role.name for other in roles):
            raise WorkloadError(f"{where}: role {role.name!r} is repeated")
        roles.append(role)
    pods = sum(role.replicas for role in roles)
    if pods > MAX_PODS_PER_TASK:
        raise WorkloadError(
            f"{where}: {pods} pods in all; a task has at most {MAX_PODS_PER_TASK} "
            "(the simulator's gangs are 1 to 64 pods)"
        )
    min_member = None
    if raw.get("min_member") is not None:
        min_member = _integer(raw, "min_member", where, minimum=1)
        if min_member > pods:
            raise WorkloadError(
                f"{where}: field 'min_member' is {min_member} but the task has {pods} pods"
            )
    namespace = raw.get("namespace", NAMESPACE)
    if not isinstance(namespace, str) or not _NAMESPACE_NAME.match(namespace):
        raise WorkloadError(
            f"{where}: field 'namespace' must be a DNS label (1-63 lower-case letters, "
            f"digits or '-'), got {namespace!r}"
        )
    topology = _parse_topology(raw.get("topology"), min_member or pods, where)
    api = raw.get("podgroup", "crd")
    if api not in PODGROUP_APIS:
        raise WorkloadError(
            f"{where}: field 'podgroup' must be one of {', '.join(PODGROUP_APIS)}, got {api!r}"
        )
    if api == "native":
        if topology is None:
            raise WorkloadError(f"{where}: field 'podgroup' needs 'topology'")
        if topology.preferred_keys or topology.slice_key is not None:
            raise WorkloadError(
                f"{where}: a native PodGroup states one required level only "
                "(spec.schedulingConstraints.topology[0].key): no preferredKeys or slices"
            )
    return Task(
        name, arrival, duration, tuple(roles), priority, min_member, namespace, topology, api
    )


def _parse_topology(value: object, gang_size: int, where: str) -> TopologyRequirement | None:
    """The task's `topology`, read by the reader the core reads PodGroups with
    (cache/podgroup_topology.py): what it would refuse on a PodGroup is refused here,
    naming the task, rather than replayed as a gang that can never start."""
    if value is None:
        return None
    requirement, refusals = read_topology({"topology": value}, gang_size, "task")
    if refusals:
        text = "; ".join(refusals).replace("spec.topology", "topology")
        raise WorkloadError(f"{where}: {text}")
    return requirement


def topology_fields(requirement: TopologyRequirement) -> dict[str, Any]:
    """The PodGroup `spec.topology` object stating `requirement`."""
    fields: dict[str, Any] = {}
    if requirement.required_key is not None:
        fields["requiredKey"] = requirement.required_key
    if requirement.preferred_keys:
        fields["preferredKeys"] = list(requirement.preferred_keys)
    if requirement.slice_size is not None:
        fields["sliceSize"] = requirement.slice_size
    if requirement.slice_key is not None:
        fields["sliceKey"] = requirement.slice_key
    return fields


def _parse_role(raw: object, task_where: str) -> Role:
    if not isinstance(raw, dict):
        raise WorkloadError(f"{task_where}: each role must be a mapping, got {raw!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not _ROLE_NAME.match(name):
        raise WorkloadError(
            f"{task_where}: a role's field 'name' must be 1-32 lower-case letters, digits or "
            f"'-', starting and ending with a letter or digit, got {name!r}"
        )
    where = f"{task_where}, role {name!r}"
    refuse_unknown(raw, _ROLE_FIELDS, where)
    replicas = _integer(raw, "replicas", where, minimum=1)
    cpu_milli = _quantity(raw, "cpu", where, milli=True)
    memory = _quantity(raw, "memory", where, milli=False)
    gpus = _integer(raw, "gpus", where, default=0, minimum=0)
    gpu_milli = _integer(raw, "gpu_milli", where, default=0, minimum=0)
    if gpus and gpu_milli:
        raise WorkloadError(
            f"{where}: give either 'gpus' (whole GPUs) or 'gpu_milli' (a share of one GPU)"
        )
    if gpu_milli >= MILLI_PER_GPU:
        raise WorkloadError(
            f"{where}: field 'gpu_milli' must be 1..{MILLI_PER_GPU - 1} (a share of one GPU), "
            f"got {gpu_milli}; use 'gpus' for whole GPUs"
        )
    gpu_types: tuple[str, ...] = ()
    if raw.get("gpu_type") is not None:
        text = raw["gpu_type"]
        models = [part.strip() for part in str(text).split("|")] if isinstance(text, str) else []
        if not models or not all(models):
            raise WorkloadError(
                f"{where}: field 'gpu_type' must be GPU models separated by '|' "
                f"(e.g. A100|V100), got {text!r}"
            )
        if not (gpus or gpu_milli):
            raise WorkloadError(f"{where}: field 'gpu_type' needs 'gpus' or 'gpu_milli'")
        gpu_types = tuple(dict.fromkeys(models))
    return Role(name, replicas, cpu_milli, memory, gpus, gpu_milli, gpu_types)


def refuse_unknown(
    raw: Mapping[Any, Any],
    known: Sequence[str],
    where: str,
    error: type[ValueError] = WorkloadError,
) -> None:
    """`error` naming the first field of `raw` not in `known` (workload and team files)."""
    for key in raw:
        if key not in known:
            raise error(f"{where}: unknown field {key!r}; known: {', '.join(known)}")


def _present(raw: Mapping[Any, Any], field: str, where: str) -> object:
    if raw.get(field) is None:
        raise WorkloadError(f"{where}: field {field!r} is missing")
    return raw[field]


def _number(
    raw: Mapping[Any, Any], field: str, where: str, *, minimum: float, strict: bool = False
) -> float:
    value = _present(raw, field, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise WorkloadError(f"{where}: field {field!r} must be a number of seconds, got {value!r}")
    if value < minimum or (strict and value == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise WorkloadError(f"{where}: field {field!r} must be {bound}, got {value!r}")
    return float(value)


def _integer(
    raw: Mapping[Any, Any], field: str, where: str, *, minimum: int, default: int | None = None
) -> int:
    if raw.get(field) is None and default is not None:
        return default
    value = _present(raw, field, where)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadError(
            f"{where}: field {field!r} must be a whole number >= {minimum}, got {value!r}"
        )
    return value


def _quantity(raw: Mapping[Any, Any], field: str, where: str, *, milli: bool) -> int:
    value = _present(raw, field, where)
    example = "8 or 500m" if milli else "32Gi"
    try:
        amount = to_milli(value) if milli else to_units(value)
    except (QuantityError, ValueError, TypeError):
        amount = -1
    if amount <= 0:
        raise WorkloadError(
            f"{where}: field {field!r} must be a positive Kubernetes quantity "
            f"(e.g. {example}), got {value!r}"
        )
    return amount


# --- pods ------------------------------------------------------------------------------------
def creation_timestamp(seconds: float) -> str:
    """RFC 3339 time `seconds` after the replay's epoch (microseconds kept, so that the
    queue's oldest-first order is arrival order)."""
    moment = _EPOCH + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_uid(task: Task, role: Role, index: int, restart: int = 0) -> str:
    again = f"-r{restart}" if restart else ""
    return f"{task.namespace}-{task.name}-{role.name}-{index}{again}"


def task_pods(
    task: Task,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    namespace: str | None = None,
    *,
    restart: int = 0,
    created_at: float | None = None,
) -> list[dict[str, Any]]:
    """The task's pods as the API server would hand them to this scheduler: every pod
    carries the gang label (the task's name) and the min-member annotation, so even a
    task of one pod is a named gang. `restart` > 0 gives the pods a controller makes
    again after the task's gang was preempted (new names and uids, created at
    `created_at`), so the same gang is queued anew."""
    namespace = namespace or task.namespace
    created = creation_timestamp(task.arrival if created_at is None else created_at)
    again = f"-r{restart}" if restart else ""
    # With a PodGroup (a task with a topology) the gang's size is the PodGroup's.
    annotations = {} if task.topology else {MIN_MEMBER_ANNOTATION: str(task.gang_min)}
    native = task.topology is not None and task.podgroup == "native"
    labels = {"sim/role": ""} if native else {GANG_LABEL: task.name, "sim/role": ""}
    pods: list[dict[str, Any]] = []
    for role in task.roles:
        requests: dict[str, str] = {"cpu": f"{role.cpu_milli}m", "memory": str(role.memory_bytes)}
        if role.gpus:
            requests["nvidia.com/gpu"] = str(role.gpus)
        elif role.gpu_milli:
            requests["nvidia.com/vgpu"] = str(role.gpu_milli)
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name,
            "priority": task.priority,
            "containers": [{"name": role.name, "resources": {"requests": requests}}],
        }
        if role.gpu_types:
            spec["affinity"] = _product_affinity(role.gpu_types)
        if native:  # Kubernetes' own gang field names the PodGroup
            spec["schedulingGroup"] = {"podGroupName": task.name}
        for index in range(role.replicas):
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{task.name}-{role.name}-{index}{again}",
                        "namespace": namespace,
                        "uid": pod_uid(task, role, index, restart),
                        "resourceVersion": "1",
                        "creationTimestamp": created,
                        "labels": {**labels, "sim/role": role.name},
                        "annotations": annotations,
                    },
                    "spec": spec,
                    "status": {"phase": "Pending"},
                }
            )
    return pods


def task_podgroup(task: Task, namespace: str | None = None) -> dict[str, Any] | None:
    """The PodGroup a user would create beside the task's pods when the task requires a
    topology (None otherwise): this project's CRD, `spec.minMember` the gang's size and
    `spec.topology` the requirement, created at the task's arrival."""
    if task.topology is None:
        return None
    if task.podgroup == "native":
        return _native_podgroup(task, task.topology, namespace)
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": task.name,
            "namespace": namespace or task.namespace,
            "uid": f"{task.namespace}-{task.name}-podgroup",
            "resourceVersion": "1",
            "creationTimestamp": creation_timestamp(task.arrival),
        },
        "spec": {"minMember": task.gang_min, "topology": topology_fields(task.topology)},
    }


def _native_podgroup(
    task: Task, topology: TopologyRequirement, namespace: str | None
) -> dict[str, Any]:
    """Kubernetes' own PodGroup (1.36 alpha) stating the task's gang and required level."""
    return {
        "apiVersion": NATIVE_PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": task.name,
            "namespace": namespace or task.namespace,
            "uid": f"{task.namespace}-{task.name}-podgroup",
            "resourceVersion": "1",
            "creationTimestamp": creation_timestamp(task.arrival),
        },
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": task.gang_min}},
            "schedulingConstraints": {"topology": [{"key": topology.required_key}]},
        },
    }


def _product_affinity(models: Sequence[str]) -> dict[str, Any]:
    requirement = {"key": PRODUCT_LABEL, "operator": "In", "values": list(models)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [requirement]}]
            }
        }
    }


# --- the generator -----------------------------------------------------------------------------
# Figures used, with their sources (docs/simulator.md has the full table and what could
# not be verified).
#
# Helios (SenseTime; Hu et al., SC'21), all four public clusters, GPU jobs, from the
# authors' artifact (S-Lab-System-Group/HeliosArtifact, "1_compare with Philly trace/
# helios_cluster_summary.csv", row "total"): 1,580,464 GPU jobs; median GPUs per job 1,
# mean 3.716; median GPU job duration 206 s, mean 6,651.7 s.
HELIOS_MEDIAN_SECONDS = 206.0
HELIOS_MEAN_SECONDS = 6651.681
HELIOS_MEAN_GPUS = 3.716
# GPUs per task (whole GPUs, before shares): 1 for 60%, then a heavy tail to 64. The
# exact shares per size could not be verified (neither Philly's nor Helios' per-bucket
# figures were readable here); they are chosen so that the median is 1 and the mean
# about 3.7, the Helios figures above.
TASK_GPUS: tuple[tuple[int, float], ...] = (
    (1, 0.60),
    (2, 0.12),
    (4, 0.12),
    (8, 0.10),
    (16, 0.035),
    (32, 0.015),
    (64, 0.01),
)
# Alibaba PAI GPU-sharing cluster (cluster-trace-gpu-v2023, the openb trace bundled in
# scheduler/sim/data/openb, from Weng et al.'s ATC'23 follow-up to "MLaaS in the Wild"),
# counted in openb_pod_list_default.csv: of 7,064 GPU pods, 3,078 (43.6%) ask a share of
# one GPU; the shares asked, milli -> pods:
FRACTIONAL_SHARE = 3078 / 7064
SHARE_MILLI: tuple[tuple[int, int], ...] = (
    (50, 7),
    (110, 24),
    (140, 1),
    (160, 74),
    (220, 62),
    (230, 140),
    (270, 4),
    (290, 1),
    (320, 328),
    (330, 7),
    (350, 6),
    (370, 47),
    (440, 2),
    (460, 128),
    (470, 750),
    (480, 19),
    (550, 72),
    (590, 75),
    (650, 253),
    (810, 1078),
)
# Parameter-server jobs exist in PAI (alibaba/clusterdata cluster-trace-gpu-v2020 README:
# jobs are tasks of roles such as `ps` and `worker`; its example is 1 PS with no GPU and
# 2 workers of 50% GPU each), but the share of PS jobs could not be verified: 25% of
# multi-worker tasks get PS pods here (one per 8 workers, at least one).
PS_SHARE = 0.25
PS_PER_WORKERS = 8
# Share of tasks pinned to GPU models: not verified for PAI ("MLaaS in the Wild" reports
# tasks demanding high-end GPUs, without a share we could read); 10% here. The openb
# gpuspec33 variant (33%) is a stress case made by the FGD authors, not a measurement.
GPU_TYPE_SHARE = 0.10
# A task's GPUs on one node when it fits there, half of the time; otherwise spread over
# workers of 1, 2, 4 or 8 GPUs (our choice: no source gives the split).
SINGLE_NODE_SHARE = 0.5
WORKER_GPUS = (1, 2, 4, 8)
# Pod requests (our choice, near the openb trace's median GPU pod: 11.3 CPU, 30.5 GiB).
CPU_PER_GPU = 8
MEMORY_GIB_PER_GPU = 32
SHARE_CPU, SHARE_MEMORY_GIB = 4, 16
PS_CPU, PS_MEMORY_GIB = 8, 32
# Durations: log-normal with Helios' median and mean, cut to [1 s, 7 days].
MAX_SECONDS = 7 * 24 * 3600
GIB = 2**30


@dataclass(frozen=True, slots=True)
class GpuPool:
    """What the generator needs to know of the GPUs of one model in the cluster."""

    model: str
    gpus: int  # in all
    per_node: int  # on the largest node of this model


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    """A level a generated gang may require: its node label and the GPUs of its largest
    domain (a gang larger than that is never made to require it: it could never run)."""

    key: str
    largest_gpus: int


def duration_sigma() -> float:
    """The log-normal sigma whose mean / median ratio is Helios' (mean = median x
    exp(sigma^2 / 2))."""
    return math.sqrt(2.0 * math.log(HELIOS_MEAN_SECONDS / HELIOS_MEDIAN_SECONDS))


def generate_workload(
    seed: int,
    tasks: int,
    cluster_gpus: int,
    load: float = 0.9,
    *,
    pools: Sequence[GpuPool] = (),
    gpu_type_share: float = GPU_TYPE_SHARE,
    max_pods: int = MAX_PODS_PER_TASK,
    required_share: float = 0.0,
    levels: Sequence[TopologyLevel] = (),
) -> list[Task]:
    """`tasks` synthetic learning tasks drawn with `random.Random(seed)`.

    Shapes follow the figures above. Arrivals are a Poisson process: given their number,
    the arrival times are uniform over [0, span], sorted; span is set (`arrival_span`)
    so that the GPU-seconds the tasks would run inside the window, each from its
    arrival, are `load` x `cluster_gpus` x span: the offered load while tasks arrive.
    `pools` (GPU models of the cluster) bound the GPUs per pod and give the models a
    task may be pinned to; without them a pod takes at most 8 GPUs and no task is pinned.

    `required_share` of the gangs of several pods with GPUs require one domain of one
    of `levels` (`require_topology`), drawn from a stream of their own: the tasks are
    the same whatever the share.
    """
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    if cluster_gpus < 1:
        raise ValueError(f"the cluster has no GPU ({cluster_gpus})")
    if not (load > 0 and math.isfinite(load)):
        raise ValueError(f"load must be a number > 0, got {load!r}")
    rng = random.Random(seed)
    per_node = max((pool.per_node for pool in pools), default=8)
    sigma = duration_sigma()
    shapes: list[tuple[tuple[Role, ...], float]] = []
    for _ in range(tasks):
        roles = _draw_roles(rng, cluster_gpus, per_node, max_pods)
        roles = _pin_models(rng, roles, pools, gpu_type_share)
        seconds = HELIOS_MEDIAN_SECONDS * math.exp(rng.gauss(0.0, sigma))
        shapes.append((roles, float(min(MAX_SECONDS, max(1, round(seconds))))))
    positions = sorted(rng.random() for _ in range(tasks))
    gpus = [
        sum(r.replicas * r.milli_per_replica for r in roles) / MILLI_PER_GPU for roles, _ in shapes
    ]
    durations = [duration for _, duration in shapes]
    span = arrival_span(positions, gpus, durations, load * cluster_gpus)
    arrivals = [position * span for position in positions]
    width = len(str(tasks - 1))
    drawn = [
        Task(f"task-{i:0{width}d}", round(arrival, 3), duration, roles)
        for i, (arrival, (roles, duration)) in enumerate(zip(arrivals, shapes, strict=True))
    ]
    if not required_share or not levels:
        return drawn
    return require_topology(drawn, random.Random(f"topology-{seed}"), required_share, levels)


def require_topology(
    tasks: Sequence[Task], rng: random.Random, share: float, levels: Sequence[TopologyLevel]
) -> list[Task]:
    """Each gang of several pods with GPUs, with probability `share`, requires one
    domain of a level drawn uniformly among `levels` whose largest domain holds its
    GPUs. Two draws per task whatever happens, so that the choices for one task do not
    depend on another's. A one-pod task is in one domain anyway: it never requires one."""
    out: list[Task] = []
    for task in tasks:
        chosen, pick = rng.random(), rng.random()
        gpus = -(-task.gpu_milli // MILLI_PER_GPU)
        fitting = [level for level in levels if gpus <= level.largest_gpus]
        if task.pods < 2 or not gpus or chosen >= share or not fitting:
            out.append(task)
            continue
        level = fitting[min(int(pick * len(fitting)), len(fitting) - 1)]
        requirement = TopologyRequirement(required_key=level.key, source="task spec.topology")
        out.append(
            Task(
                task.name,
                task.arrival,
                task.duration,
                task.roles,
                task.priority,
                task.min_member,
                task.namespace,
                requirement,
                task.podgroup,
            )
        )
    return out


def arrival_span(
    positions: Sequence[float], gpus: Sequence[float], durations: Sequence[float], target: float
) -> float:
    """The length of the arrival window such that, with task i arriving at
    positions[i] x span and running from then, the GPU-seconds that fall inside the
    window average `target` GPUs over it.

    The usual rate (load x GPUs / mean GPU-seconds of a task) assumes the window is long
    against the tasks; with durations as heavy-tailed as Helios' (mean 32x the median)
    one week-long task would hold a quarter of a sample's GPU-seconds, nearly all after
    the window, and the cluster would sit idle during it. Counting only what runs inside
    the window makes `load` the load the cluster sees while tasks arrive. The GPUs busy
    per second inside a window of length s, sum(g x min(d, s x (1 - p))) / s, only falls
    as s grows, so bisection finds s. When even arrivals all at once cannot reach the
    target, the window is the usual one: total GPU-seconds / target.
    """

    def busy(span: float) -> float:
        inside = sum(
            g * min(d, span * (1.0 - p)) for g, d, p in zip(gpus, durations, positions, strict=True)
        )
        return inside / span

    total = sum(g * d for g, d in zip(gpus, durations, strict=True))
    if total <= 0 or target <= 0:
        return 0.0
    high = total / target  # busy(high) <= target: inside <= total
    low = high
    while busy(low) <= target:
        low /= 2.0
        if low < 1e-9 * high:
            return high
    for _ in range(100):
        middle = (low + high) / 2.0
        if busy(middle) > target:
            low = middle
        else:
            high = middle
        if high - low <= 1e-9 * high:
            break
    return high


def offered_load(tasks: Sequence[Task], cluster_gpus: int) -> float | None:
    """GPUs the tasks keep busy on average while they arrive (each running from its
    arrival, cut at the last arrival), as a fraction of `cluster_gpus`; None when they
    all arrive at once. `generate_workload` aims this at its `load`; a sample too small
    for the cluster falls short of it."""
    if not tasks or cluster_gpus <= 0:
        return None
    first = min(task.arrival for task in tasks)
    last = max(task.arrival for task in tasks)
    if last <= first:
        return None
    inside = sum(
        task.gpu_milli / MILLI_PER_GPU * min(task.duration, last - task.arrival) for task in tasks
    )
    return inside / (last - first) / cluster_gpus


def _weighted(rng: random.Random, table: Sequence[tuple[int, float]]) -> int:
    values = [value for value, _ in table]
    weights = [weight for _, weight in table]
    return rng.choices(values, weights=weights)[0]


def _draw_roles(
    rng: random.Random,
    cluster_gpus: int,
    per_node: int,
    max_pods: int,
    sizes: Sequence[tuple[int, float]] = TASK_GPUS,
) -> tuple[Role, ...]:
    """A task's roles: `sizes` weighs its GPUs in all (whole GPUs before shares)."""
    allowed = [(g, w) for g, w in sizes if g <= cluster_gpus and g <= per_node * max_pods]
    total = _weighted(rng, allowed or [(1, 1.0)])
    ps_wanted = rng.random() < PS_SHARE
    if total <= per_node and rng.random() < SINGLE_NODE_SHARE:
        per_worker = total
    else:
        options = [w for w in WORKER_GPUS if w <= min(total, per_node) and total // w <= max_pods]
        per_worker = rng.choice(options or [min(total, per_node)])
    workers = max(1, total // per_worker)
    ps = max(1, workers // PS_PER_WORKERS) if ps_wanted and workers > 1 else 0
    if workers + ps > max_pods:
        ps = 0
    share = 0
    if per_worker == 1 and (workers == 1 or ps) and rng.random() < FRACTIONAL_SHARE:
        share = _weighted(rng, [(milli, float(count)) for milli, count in SHARE_MILLI])
    if share:
        worker = Role("worker", workers, SHARE_CPU * 1000, SHARE_MEMORY_GIB * GIB, gpu_milli=share)
    else:
        worker = Role(
            "worker",
            workers,
            CPU_PER_GPU * per_worker * 1000,
            MEMORY_GIB_PER_GPU * per_worker * GIB,
            gpus=per_worker,
        )
    if not ps:
        return (worker,)
    return (Role("ps", ps, PS_CPU * 1000, PS_MEMORY_GIB * GIB), worker)


def _pin_models(
    rng: random.Random,
    roles: tuple[Role, ...],
    pools: Sequence[GpuPool],
    share: float,
) -> tuple[Role, ...]:
    """With probability `share`, pin the GPU role to one model (or two, "A|B") whose
    nodes can hold a pod and which has room for the task twice over, so that a pinned
    task can always run once the cluster drains."""
    if not pools or rng.random() >= share:
        return roles
    gpu_role = roles[-1]
    pod_gpus = max(1, gpu_role.gpus)
    task_gpus = gpu_role.replicas * pod_gpus
    fitting = sorted(
        pool.model
        for pool in pools
        if pool.per_node >= pod_gpus and pool.gpus >= 2 * task_gpus and pool.model
    )
    if not fitting:
        return roles
    count = 2 if len(fitting) > 1 and rng.random() < 0.3 else 1
    models = tuple(sorted(rng.sample(fitting, count)))
    pinned = Role(
        gpu_role.name,
        gpu_role.replicas,
        gpu_role.cpu_milli,
        gpu_role.memory_bytes,
        gpu_role.gpus,
        gpu_role.gpu_milli,
        models,
    )
    return (*roles[:-1], pinned)


def _memory_text(amount: int) -> str:
    for suffix, unit in (("Gi", 2**30), ("Mi", 2**20)):
        if amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)


def workload_yaml(tasks: Sequence[Task]) -> str:
    """The tasks in the workload file format (so a generated workload can be saved,
    edited and replayed with --workload)."""
    out: list[dict[str, Any]] = []
    for task in tasks:
        entry: dict[str, Any] = {
            "name": task.name,
            "arrival": task.arrival,
            "duration": task.duration,
        }
        if task.priority:
            entry["priority"] = task.priority
        if task.min_member is not None:
            entry["min_member"] = task.min_member
        if task.namespace != NAMESPACE:
            entry["namespace"] = task.namespace
        if task.topology is not None:
            entry["topology"] = topology_fields(task.topology)
        if task.podgroup != "crd":
            entry["podgroup"] = task.podgroup
        roles = []
        for role in task.roles:
            item: dict[str, Any] = {
                "name": role.name,
                "replicas": role.replicas,
                "cpu": f"{role.cpu_milli}m",
                "memory": _memory_text(role.memory_bytes),
            }
            if role.gpus:
                item["gpus"] = role.gpus
            if role.gpu_milli:
                item["gpu_milli"] = role.gpu_milli
            if role.gpu_types:
                item["gpu_type"] = "|".join(role.gpu_types)
            roles.append(item)
        entry["roles"] = roles
        out.append(entry)
    return yaml.safe_dump(out, sort_keys=False)
