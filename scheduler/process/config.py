"""The scheduler's configuration: a YAML file read once at start-up.

Every option has a default that works, so no file at all is a valid configuration.
The schema is written once, as the frozen dataclasses below: each field carries its
default, its YAML key and the check that reads it (`_leaf`), or for a nested section
its dataclass (`_nested`). The reader walks that schema, so an option cannot be
defaulted and checked in places that drift apart. docs/configuration.md lists
every option (a test compares it with `option_paths()`).

Anything invalid (an unknown key anywhere, a wrong type, a negative number, an unknown
policy or score, timings that contradict each other) raises `ConfigError`, whose
message is one line naming the field's path in the file, for example
`config: timeouts.assumeTTLSeconds: must be a number > 0, got -3`, so start-up stops
with a message an operator can act on.

One key is fixed by the cache for now, the fractional GPU resource's name
(`fractionalGPU.resourceName`): the cache counts it by that name. It is accepted only
with its one supported value; any other is refused as "not supported yet" rather than
silently ignored. The gang keys (`gang.*`) are configurable: the cache reads them
from `GangKeysConfig.keys()`.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

from cache.cluster import ClusterCache
from cache.pod import (
    GANG_LABEL,
    MIN_MEMBER_ANNOTATION,
    MIN_ROLE_MEMBERS_ANNOTATION,
    ROLE_LABEL,
    VOLCANO_GANG_ANNOTATION,
    GangKeys,
)
from cache.resources import MILLI_PER_GPU, SHARED_GPU
from cache.signing import SigningKeys
from cache.topology_requirement import label_key_problem
from cache.volcano_tiers import DEFAULT_VOLCANO_TIERS, VolcanoTiers, tiers_from_hierarchy
from policies.profile import (
    DEFAULT_CANDIDATE_LIMIT,
    DEFAULT_TOPOLOGY_KEYS,
    POLICIES,
    Profile,
    build_profile,
    score_plugin,
)
from policies.scores.fragmentation import OnlineWorkload
from scheduler.cycle.core import DEFAULT_SCHEDULER_NAME, SchedulingCore
from scheduler.gangs.queue import GangQueue
from scheduler.process.signing import load_key_file, process_key
from scheduler.process.yamltext import YamlSyntaxError, load_yaml

BindFailurePolicy = Literal["delete", "keep"]
BIND_FAILURE_POLICIES: tuple[BindFailurePolicy, ...] = ("delete", "keep")
ScheduledEvents = Literal["pod", "gang", "off"]
SCHEDULED_EVENTS: tuple[ScheduledEvents, ...] = ("pod", "gang", "off")
# How long a gang may stay partially bound before its bound members are deleted.
DEFAULT_PARTIAL_GRACE = 60.0

# kube-scheduler serves on 10259 (and formerly 10251), the controller manager on 10257,
# the kubelet on 10250, kube-proxy on 10249/10256. 10269 is free of all of them, so this
# scheduler can run beside kube-scheduler on a control-plane node's host network (or
# both can be scraped through one Service) without a port clash, and it is easy to
# remember as "kube-scheduler's port + 10".
DEFAULT_HTTP_PORT = 10269

_T = TypeVar("_T")
# A check reads one raw YAML value at a dotted path and returns the typed value.
Check = Callable[[object, str], Any]


class ConfigError(ValueError):
    """An invalid configuration. `str(error)` is one line: `config: <path>: <problem>`."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        where = f"{path}: " if path else ""
        super().__init__(f"config: {where}{problem}")


# --- how a raw value is shown in a message -------------------------------------------------
_SHOWN_MAX = 60


def shown(value: object) -> str:
    """A raw YAML value as a message shows it: scalars as written in YAML/JSON, a
    mapping or list by its kind, never more than one short line."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str | bool | int | float) or value is None:
        text = json.dumps(value) if not isinstance(value, float) else repr(value)
    else:
        text = type(value).__name__
    text = text.replace("\n", " ")
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


# --- checks ----------------------------------------------------------------------------------
def _is_number(value: object) -> bool:
    # YAML's true/false are not numbers here, though Python counts bool as int.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(minimum: float, inclusive: bool) -> Check:
    relation = ">=" if inclusive else ">"

    def check(value: object, path: str) -> float:
        ok = _is_number(value) and math.isfinite(cast(float, value))
        if ok:
            number = float(cast(float, value))
            ok = number >= minimum if inclusive else number > minimum
        if not ok:
            raise ConfigError(path, f"must be a number {relation} {minimum:g}, got {shown(value)}")
        return float(cast(float, value))

    return check


def _integer(minimum: int, maximum: int | None = None) -> Check:
    def check(value: object, path: str) -> int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        if ok and maximum is not None:
            ok = cast(int, value) <= maximum
        if not ok:
            bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise ConfigError(path, f"must be a whole number {bound}, got {shown(value)}")
        return cast(int, value)

    return check


positive_number = _number(0, inclusive=False)
non_negative_number = _number(0, inclusive=True)


def _boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false, got {shown(value)}")
    return value


def _text(value: object, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(path, f"must be a non-empty string, got {shown(value)}")
    return value


def _one_of(choices: tuple[str, ...]) -> Check:
    def check(value: object, path: str) -> str:
        if value not in choices:
            raise ConfigError(path, f"must be one of {', '.join(choices)}, got {shown(value)}")
        return str(value)

    return check


def _policy_name(value: object, path: str) -> str:
    if not isinstance(value, str) or value not in POLICIES:
        raise ConfigError(
            path, f"unknown policy {shown(value)}; known: {', '.join(sorted(POLICIES))}"
        )
    return value


def _score_weights(value: object, path: str) -> Mapping[str, float] | None:
    """Explicit score weights; null means the policy's own."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping of score name to weight, got {shown(value)}")
    weights: dict[str, float] = {}
    for name, weight in value.items():
        where = f"{path}.{name}"
        try:
            score_plugin(str(name), OnlineWorkload())
        except ValueError as error:
            raise ConfigError(where, str(error)) from None
        weights[str(name)] = non_negative_number(weight, where)
    return MappingProxyType(weights)


def _label_keys(value: object, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(path, f"must be a list of node label keys, got {shown(value)}")
    keys = tuple(_text(item, f"{path}[{i}]") for i, item in enumerate(value))
    for i, key in enumerate(keys):
        if key in keys[:i]:
            raise ConfigError(f"{path}[{i}]", f"{shown(key)} is listed twice")
    return keys


def _loopback(value: object, path: str) -> str:
    text = _text(value, path)
    try:
        loopback = text == "localhost" or ipaddress.ip_address(text).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            path,
            "must be a loopback address (127.0.0.1, ::1 or localhost): /debug/gangs names "
            f"every tenant's gangs; reach it with kubectl port-forward. Got {shown(value)}",
        )
    return text


def _divisor_of(whole: int) -> Check:
    def check(value: object, path: str) -> int:
        number = int(_integer(1, whole)(value, path))
        if whole % number:
            raise ConfigError(
                path,
                f"must divide {whole} (a unit is a whole number of milli of a GPU), got {number}",
            )
        return number

    return check


def _fixed(supported: object, why: str) -> Check:
    """A key the cache reads as a constant for now: only its one value is accepted."""

    def check(value: object, path: str) -> object:
        if value != supported or type(value) is not type(supported):
            raise ConfigError(
                path,
                f"values other than {shown(supported)} are not supported yet ({why}), "
                f"got {shown(value)}",
            )
        return value

    return check


CONFIG_API_VERSION = "gang-scheduler.io/v1alpha1"
CONFIG_KIND = "SchedulerConfiguration"


def _version(supported: str) -> Check:
    """apiVersion or kind: the one this scheduler reads, or a message saying which."""

    def check(value: object, path: str) -> object:
        if value != supported:
            raise ConfigError(path, f"this scheduler reads {supported} only, got {shown(value)}")
        return value

    return check


# --- the schema ------------------------------------------------------------------------------
# Each field carries its YAML key in its metadata: a leaf option also its check, a nested
# section nothing more (its dataclass is the field's default_factory).
def _leaf(key: str, check: Check) -> dict[str, object]:
    return {"yaml": key, "check": check}


def _nested(key: str) -> dict[str, object]:
    return {"yaml": key, "section": True}


@dataclass(frozen=True)
class GangKeysConfig:
    """Where gang membership and size are read from (docs/conventions.md)."""

    label: str = field(default=GANG_LABEL, metadata=_leaf("label", _text))
    volcano_annotation: str = field(
        default=VOLCANO_GANG_ANNOTATION, metadata=_leaf("volcanoAnnotation", _text)
    )
    min_member_annotation: str = field(
        default=MIN_MEMBER_ANNOTATION, metadata=_leaf("minMemberAnnotation", _text)
    )

    role_label: str = field(default=ROLE_LABEL, metadata=_leaf("roleLabel", _text))
    min_role_members_annotation: str = field(
        default=MIN_ROLE_MEMBERS_ANNOTATION, metadata=_leaf("minRoleMembersAnnotation", _text)
    )

    def keys(
        self,
        infer_namespaces: frozenset[str] = frozenset(),
        volcano_tiers: VolcanoTiers | None = None,
    ) -> GangKeys:
        return GangKeys(
            self.label,
            self.volcano_annotation,
            self.min_member_annotation,
            self.role_label,
            self.min_role_members_annotation,
            infer_namespaces=infer_namespaces,
            volcano_tiers=volcano_tiers if volcano_tiers is not None else DEFAULT_VOLCANO_TIERS,
        )


def _namespace_names(value: object, path: str) -> frozenset[str]:
    """Namespace names (DNS labels), or "*" for all."""
    if not isinstance(value, list):
        raise ConfigError(path, f"must be a list of namespace names, got {shown(value)}")
    names: list[str] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, str) or not (item == "*" or _NAMESPACE_NAME.fullmatch(item)):
            raise ConfigError(where, f"must be a namespace name or '*', got {shown(item)}")
        if item in names:
            raise ConfigError(where, f"{shown(item)} is listed twice")
        names.append(item)
    return frozenset(names)


_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class GangInferenceConfig:
    """Gangs inferred from the workloads' own labels and owners (docs/migration.md):
    only in the namespaces listed; none by default."""

    namespaces: frozenset[str] = field(
        default=frozenset(), metadata=_leaf("namespaces", _namespace_names)
    )


@dataclass(frozen=True)
class PolicyConfig:
    name: str = field(default="binpack", metadata=_leaf("name", _policy_name))
    # Explicit weights, laid over the named policy's (0 turns a score off).
    weights: Mapping[str, float] | None = field(
        default=None, metadata=_leaf("weights", _score_weights)
    )
    candidate_limit: int = field(
        default=DEFAULT_CANDIDATE_LIMIT, metadata=_leaf("candidateLimit", _integer(0))
    )
    # Weights of the inter-pod scores: preferred pod affinity/anti-affinity, and
    # ScheduleAnyway topology spread constraints (0 turns one off).
    pod_affinity_weight: float = field(
        default=2.0, metadata=_leaf("podAffinityWeight", non_negative_number)
    )
    topology_spread_weight: float = field(
        default=2.0, metadata=_leaf("topologySpreadWeight", non_negative_number)
    )

    @property
    def effective_weights(self) -> dict[str, float]:
        """The named policy's weights with the explicit ones laid over them."""
        weights = dict(POLICIES[self.name])
        weights.update(self.weights or {})
        return weights


_TIER_FIELDS = ("nodeLabel", "tierName")
_TIER_SHAPE = "{nodeLabel, tierName}"


def _volcano_tiers(value: object, path: str) -> VolcanoTiers | None:
    """Volcano's HyperNode tiers as node label keys, tier 1 first: a list of
    {nodeLabel, tierName}; null derives them from topology.keys (cache/volcano_tiers.py)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ConfigError(
            path, f"must be a list of {{nodeLabel, tierName}}, tier 1 first, got {shown(value)}"
        )
    keys: list[str] = []
    names: list[tuple[str, int]] = []
    for i, entry in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(where, f"must be a mapping {_TIER_SHAPE}, got {shown(entry)}")
        for key in entry:
            if key not in _TIER_FIELDS:
                raise ConfigError(f"{where}.{key}", _unknown_field(str(key), list(_TIER_FIELDS)))
        label = entry.get("nodeLabel")
        problem = label_key_problem(label, "nodeLabel")
        if problem is not None:
            raise ConfigError(f"{where}.nodeLabel", problem)
        if label in keys:
            raise ConfigError(f"{where}.nodeLabel", f"{shown(label)} is listed twice")
        keys.append(str(label))
        if "tierName" in entry:
            name = _text(entry["tierName"], f"{where}.tierName")
            if any(known == name for known, _ in names):
                raise ConfigError(f"{where}.tierName", f"{shown(name)} is listed twice")
            names.append((name, i + 1))
    return VolcanoTiers(keys=tuple(keys), names=tuple(names))


@dataclass(frozen=True)
class TopologyConfig:
    """The network hierarchy a gang is kept compact in, broadest level first."""

    keys: tuple[str, ...] = field(
        default=DEFAULT_TOPOLOGY_KEYS, metadata=_leaf("keys", _label_keys)
    )
    network_weight: float = field(default=1.0, metadata=_leaf("networkWeight", non_negative_number))
    # Volcano's networkTopology tiers as label keys, tier 1 (the narrowest) first;
    # None: derived from `keys` as Volcano's label discoverer would (docs/conventions.md).
    volcano_tiers: VolcanoTiers | None = field(
        default=None, metadata=_leaf("volcanoTiers", _volcano_tiers)
    )

    @property
    def effective_volcano_tiers(self) -> VolcanoTiers:
        if self.volcano_tiers is not None:
            return self.volcano_tiers
        return tiers_from_hierarchy(self.keys)


# Obsolete: reservations no longer expire on a clock (docs/kubernetes.md,
# "Reservations"). Still read and checked, so a config file that sets it keeps loading.
OBSOLETE_ASSUME_TTL = 30.0


@dataclass(frozen=True)
class Timeouts:
    assume_ttl_seconds: float = field(
        default=OBSOLETE_ASSUME_TTL, metadata=_leaf("assumeTTLSeconds", positive_number)
    )
    bind_timeout_seconds: float = field(
        default=10.0, metadata=_leaf("bindTimeoutSeconds", positive_number)
    )
    initial_backoff_seconds: float = field(
        default=1.0, metadata=_leaf("initialBackoffSeconds", positive_number)
    )
    max_backoff_seconds: float = field(
        default=60.0, metadata=_leaf("maxBackoffSeconds", positive_number)
    )
    max_unschedulable_seconds: float = field(
        default=300.0, metadata=_leaf("maxUnschedulableSeconds", positive_number)
    )


@dataclass(frozen=True)
class BindingConfig:
    on_bind_failure: BindFailurePolicy = field(
        default="delete", metadata=_leaf("onBindFailure", _one_of(BIND_FAILURE_POLICIES))
    )
    # Binding requests in flight at once, across all gangs.
    concurrency: int = field(default=64, metadata=_leaf("concurrency", _integer(1)))
    # A gang found with fewer members bound than its minMember (a crash between binds,
    # an undo that could not finish) is completed if its rest fits, else its bound
    # members are deleted once it has been partial this long (docs/kubernetes.md).
    partial_gang_grace_seconds: float = field(
        default=DEFAULT_PARTIAL_GRACE, metadata=_leaf("partialGangGraceSeconds", positive_number)
    )


@dataclass(frozen=True)
class FractionalGpuConfig:
    resource_name: str = field(
        default=SHARED_GPU,
        metadata=_leaf("resourceName", _fixed(SHARED_GPU, "the cache counts it by this name")),
    )
    # Units of the resource one GPU is advertised as: 1000 (a unit is a milli), or a
    # divisor of 1000 for a device plugin with a coarser unit (100: a unit is 10 milli).
    units_per_gpu: int = field(
        default=MILLI_PER_GPU, metadata=_leaf("unitsPerGPU", _divisor_of(MILLI_PER_GPU))
    )


@dataclass(frozen=True)
class ClientConfig:
    """Client-side rate limit on API requests (binds, lists and watches, the Lease), as
    client-go's QPS and burst. Feedback writes have their own budget (`events`)."""

    qps: float = field(default=1000.0, metadata=_leaf("qps", positive_number))
    burst: int = field(default=2000, metadata=_leaf("burst", _integer(1)))
    # Every API call's time limit and retries (scheduler/kube/call_policy.py,
    # docs/kubernetes.md "Timeouts and retries"): a request its caller gives no limit
    # of its own gets this one; a call that may be repeated safely is tried up to
    # `retryAttempts` times with jittered exponential backoff between the two bounds.
    request_timeout_seconds: float = field(
        default=10.0, metadata=_leaf("requestTimeoutSeconds", positive_number)
    )
    retry_attempts: int = field(default=3, metadata=_leaf("retryAttempts", _integer(1, 10)))
    retry_backoff_seconds: float = field(
        default=0.2, metadata=_leaf("retryBackoffSeconds", positive_number)
    )
    max_retry_backoff_seconds: float = field(
        default=2.0, metadata=_leaf("maxRetryBackoffSeconds", positive_number)
    )


@dataclass(frozen=True)
class LeaderElectionConfig:
    enabled: bool = field(default=True, metadata=_leaf("enabled", _boolean))
    lease_name: str = field(default="gang-scheduler", metadata=_leaf("leaseName", _text))
    lease_namespace: str = field(default="kube-system", metadata=_leaf("leaseNamespace", _text))
    lease_duration_seconds: float = field(
        default=15.0, metadata=_leaf("leaseDurationSeconds", positive_number)
    )
    renew_deadline_seconds: float = field(
        default=10.0, metadata=_leaf("renewDeadlineSeconds", positive_number)
    )
    retry_period_seconds: float = field(
        default=2.0, metadata=_leaf("retryPeriodSeconds", positive_number)
    )


@dataclass(frozen=True)
class HttpConfig:
    # All interfaces, so that Prometheus can scrape the pod through its Service.
    address: str = field(default="0.0.0.0", metadata=_leaf("address", _text))
    port: int = field(default=DEFAULT_HTTP_PORT, metadata=_leaf("port", _integer(1, 65535)))
    # /debug/gangs names every tenant's gangs: a loopback address only, reached with
    # `kubectl port-forward` (docs/security.md, "Endpoints"). Port 0: not served.
    debug_address: str = field(default="127.0.0.1", metadata=_leaf("debugAddress", _loopback))
    debug_port: int = field(default=0, metadata=_leaf("debugPort", _integer(0, 65535)))


@dataclass(frozen=True)
class EventsConfig:
    """How many Warning events a gang may write: a 1,000-pod gang must not write 1,000
    events per attempt."""

    aggregation_window_seconds: float = field(
        default=60.0, metadata=_leaf("aggregationWindowSeconds", positive_number)
    )
    max_per_gang_per_window: int = field(
        default=10, metadata=_leaf("maxPerGangPerWindow", _integer(1))
    )
    # How long a gang may wait for members (its controller still creating them) before
    # its members get a Warning `FailedScheduling`; their condition says why at once.
    waiting_grace_seconds: float = field(
        default=30.0, metadata=_leaf("waitingGraceSeconds", non_negative_number)
    )
    # The Normal `Scheduled` event of a bound gang: one per pod (as kube-scheduler), one
    # per gang, or none.
    scheduled: ScheduledEvents = field(
        default="pod", metadata=_leaf("scheduled", _one_of(SCHEDULED_EVENTS))
    )
    # Client-side rate limit of every feedback write (conditions, events, PodGroup
    # status), apart from `client`, so that they never delay a bind (kube-scheduler too
    # gives its events a client of their own).
    qps: float = field(default=50.0, metadata=_leaf("qps", positive_number))
    burst: int = field(default=100, metadata=_leaf("burst", _integer(1)))


def _optional_path(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a string (a file path, or empty), got {shown(value)}")
    return value


DEFAULT_ASSIGNMENT_KEY_SECRET = "gang-scheduler-assignment-key"
DEFAULT_NODE_AGENT_KEY_SECRET = "gang-scheduler-node-agent-key"


def _optional_name(value: object, path: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(
        r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)?", value
    ):
        raise ConfigError(path, f"must be a Kubernetes object name (or empty), got {shown(value)}")
    return value


@dataclass(frozen=True)
class AssignmentSigningConfig:
    """The keys that sign the GPU assignment of every bind (docs/security.md): only a
    signed `gang-scheduler.io/gpu-devices` is charged as written after a restart or a
    change of leader, so every replica must hold the same keys."""

    # The Secret holding the keys (entries key-1, key-2, ...: the highest signs, all
    # verify), read at start through the API and created with a random key-1 when it
    # does not exist (scheduler/kube/signing_secret.py). Empty: keyFile, else a key of
    # this process only.
    secret_name: str = field(
        default=DEFAULT_ASSIGNMENT_KEY_SECRET, metadata=_leaf("secretName", _optional_name)
    )
    namespace: str = field(default="kube-system", metadata=_leaf("namespace", _text))
    # The Secret the scheduler writes the node agents' keys into (derived, one-way, from
    # its own), for their device plugin's check; empty: not written.
    node_agent_secret_name: str = field(
        default=DEFAULT_NODE_AGENT_KEY_SECRET,
        metadata=_leaf("nodeAgentSecretName", _optional_name),
    )
    # Instead of the Secret: a file holding one key, or a directory of entries named as
    # above (a Secret the operator mounts). Unreadable, or no usable key: no start.
    key_file: str = field(default="", metadata=_leaf("keyFile", _optional_path))


@dataclass(frozen=True)
class PreemptionConfig:
    # Whether a gang may evict whole gangs of lower priority to fit (docs/quotas.md).
    enabled: bool = field(default=True, metadata=_leaf("enabled", _boolean))
    # Whether a gang within its quota's min may evict gangs borrowing beyond theirs,
    # whatever their priority (docs/quotas.md, "Reclaim"). Needs `enabled`.
    reclaim: bool = field(default=True, metadata=_leaf("reclaim", _boolean))


@dataclass(frozen=True)
class StarvationConfig:
    # A gang waiting longer than this gets a reservation: the nodes it would fit on
    # soonest take no other work it would wait for (docs/quotas.md, "No starvation").
    # 0 turns the guard off.
    guard_seconds: float = field(default=300.0, metadata=_leaf("guardSeconds", non_negative_number))


@dataclass(frozen=True)
class MetricsConfig:
    """What /metrics may say about tenants (docs/metrics.md, docs/security.md)."""

    # Off: no series names a namespace, since /metrics is served to anyone who reaches
    # the pod. On: pending pods and quota gauges per namespace too; turn the NetworkPolicy
    # component on with it.
    namespace_labels: bool = field(default=False, metadata=_leaf("namespaceLabels", _boolean))
    # The namespaces with the most pending pods get series of their own; the rest are
    # summed under namespace="_other", so the series stay bounded whatever the tenants do.
    max_namespaces: int = field(default=20, metadata=_leaf("maxNamespaces", _integer(1, 1000)))


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_name: str = field(
        default=DEFAULT_SCHEDULER_NAME, metadata=_leaf("schedulerName", _text)
    )
    gang: GangKeysConfig = field(default_factory=GangKeysConfig, metadata=_nested("gang"))
    policy: PolicyConfig = field(default_factory=PolicyConfig, metadata=_nested("policy"))
    topology: TopologyConfig = field(default_factory=TopologyConfig, metadata=_nested("topology"))
    timeouts: Timeouts = field(default_factory=Timeouts, metadata=_nested("timeouts"))
    binding: BindingConfig = field(default_factory=BindingConfig, metadata=_nested("binding"))
    fractional_gpu: FractionalGpuConfig = field(
        default_factory=FractionalGpuConfig, metadata=_nested("fractionalGPU")
    )
    client: ClientConfig = field(default_factory=ClientConfig, metadata=_nested("client"))
    leader_election: LeaderElectionConfig = field(
        default_factory=LeaderElectionConfig, metadata=_nested("leaderElection")
    )
    http: HttpConfig = field(default_factory=HttpConfig, metadata=_nested("http"))
    events: EventsConfig = field(default_factory=EventsConfig, metadata=_nested("events"))
    assignment_signing: AssignmentSigningConfig = field(
        default_factory=AssignmentSigningConfig, metadata=_nested("assignmentSigning")
    )
    # The format's version: a file without these is read as this version (the format
    # of every file written before it was versioned).
    api_version: str = field(
        default=CONFIG_API_VERSION, metadata=_leaf("apiVersion", _version(CONFIG_API_VERSION))
    )
    kind: str = field(default=CONFIG_KIND, metadata=_leaf("kind", _version(CONFIG_KIND)))
    preemption: PreemptionConfig = field(
        default_factory=PreemptionConfig, metadata=_nested("preemption")
    )
    starvation: StarvationConfig = field(
        default_factory=StarvationConfig, metadata=_nested("starvation")
    )
    metrics: MetricsConfig = field(default_factory=MetricsConfig, metadata=_nested("metrics"))
    gang_inference: GangInferenceConfig = field(
        default_factory=GangInferenceConfig, metadata=_nested("gangInference")
    )


# --- reading ---------------------------------------------------------------------------------
def load_config(path: str | Path | None) -> SchedulerConfig:
    """The configuration in the YAML file at `path`; None (no --config) gives the
    defaults. Raises ConfigError when the file cannot be read or is invalid."""
    if path is None:
        return SchedulerConfig()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError("", f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError("", f"cannot read {path}: not UTF-8 text") from None
    return parse_config(text)


def parse_config(text: str) -> SchedulerConfig:
    """The configuration in a YAML document; an empty document gives the defaults."""
    try:
        data = load_yaml(text)
    except YamlSyntaxError as error:
        raise ConfigError("", str(error)) from None
    return config_from_mapping(data)


def config_from_mapping(data: object) -> SchedulerConfig:
    """The configuration from already-parsed YAML (None gives the defaults)."""
    if data is None:
        return SchedulerConfig()
    config = _read_section(SchedulerConfig, data, "")
    _check_together(config)
    return config


def _read_section(cls: type[_T], raw: object, path: str) -> _T:
    if not isinstance(raw, Mapping):
        what = "must be a mapping" if path else "the top level must be a mapping"
        raise ConfigError(path, f"{what}, got {shown(raw)}")
    fields = {f.metadata["yaml"]: f for f in dataclasses.fields(cast(Any, cls))}
    for key in raw:
        if key not in fields:
            raise ConfigError(_join(path, str(key)), _unknown_field(str(key), list(fields)))
    values: dict[str, Any] = {}
    for key, spec in fields.items():
        if key not in raw:
            continue
        where = _join(path, key)
        if "section" in spec.metadata:
            if raw[key] is not None:
                values[spec.name] = _read_section(
                    cast(type[Any], spec.default_factory), raw[key], where
                )
        else:
            values[spec.name] = spec.metadata["check"](raw[key], where)
    return cls(**values)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unknown_field(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if not close:
        lowered = {name.lower(): name for name in known}
        close = [lowered[key.lower()]] if key.lower() in lowered else []
    if close:
        return f"unknown field; did you mean {close[0]}?"
    return f"unknown field; known: {', '.join(known)}"


def _check_together(config: SchedulerConfig) -> None:
    """Rules between options, each reported at the option that must change."""
    client = config.client
    if client.retry_backoff_seconds > client.max_retry_backoff_seconds:
        raise ConfigError(
            "client.retryBackoffSeconds",
            "must not exceed client.maxRetryBackoffSeconds "
            f"({client.max_retry_backoff_seconds:g}), got {client.retry_backoff_seconds:g}",
        )
    timeouts = config.timeouts
    if timeouts.initial_backoff_seconds > timeouts.max_backoff_seconds:
        raise ConfigError(
            "timeouts.initialBackoffSeconds",
            "must not exceed timeouts.maxBackoffSeconds "
            f"({timeouts.max_backoff_seconds:g}), got {timeouts.initial_backoff_seconds:g}",
        )
    election = config.leader_election
    if election.renew_deadline_seconds >= election.lease_duration_seconds:
        raise ConfigError(
            "leaderElection.renewDeadlineSeconds",
            "must be less than leaderElection.leaseDurationSeconds "
            f"({election.lease_duration_seconds:g}), got {election.renew_deadline_seconds:g}",
        )
    if election.retry_period_seconds >= election.renew_deadline_seconds:
        raise ConfigError(
            "leaderElection.retryPeriodSeconds",
            "must be less than leaderElection.renewDeadlineSeconds "
            f"({election.renew_deadline_seconds:g}), got {election.retry_period_seconds:g}",
        )
    http = config.http
    if http.debug_port and http.debug_port == http.port:
        # The public listener on all interfaces holds the port on loopback as well.
        raise ConfigError(
            "http.debugPort", f"must differ from http.port ({http.port}), got {http.debug_port}"
        )


def option_paths(cls: type[Any] = SchedulerConfig, prefix: str = "") -> list[str]:
    """Every option's dotted YAML path, in schema order (for the docs and their test)."""
    paths: list[str] = []
    for spec in dataclasses.fields(cls):
        path = _join(prefix, spec.metadata["yaml"])
        if "section" in spec.metadata:
            paths.extend(option_paths(cast(type[Any], spec.default_factory), path))
        else:
            paths.append(path)
    return paths


# --- building what the configuration describes ----------------------------------------------
def build_profile_from(config: SchedulerConfig) -> Profile:
    """The scheduling profile the configuration selects."""
    return build_profile(
        config.policy.name,
        weights=config.policy.effective_weights,
        topology_keys=config.topology.keys,
        network_weight=config.topology.network_weight,
        candidate_limit=config.policy.candidate_limit,
        pod_affinity_weight=config.policy.pod_affinity_weight,
        topology_spread_weight=config.policy.topology_spread_weight,
    )


def local_keys(config: SchedulerConfig) -> SigningKeys:
    """The signing keys without the API: `keyFile` when set (KeyProblem when unusable),
    else a key of this process only (the simulator, a demo, a test)."""
    key_file = config.assignment_signing.key_file
    return load_key_file(key_file) if key_file else process_key()


def build_core_from(config: SchedulerConfig, keys: SigningKeys | None = None) -> SchedulingCore:
    """A scheduling core with the configured profile, name and backoffs, signing with
    `keys` (local_keys when not given)."""
    timeouts = config.timeouts
    core = SchedulingCore(
        build_profile_from(config),
        scheduler_name=config.scheduler_name,
        cache=ClusterCache(
            share_milli=MILLI_PER_GPU // config.fractional_gpu.units_per_gpu,
            gang_keys=config.gang.keys(
                config.gang_inference.namespaces, config.topology.effective_volcano_tiers
            ),
            assignment_key=keys if keys is not None else local_keys(config),
        ),
        queue=GangQueue(
            initial_backoff_seconds=timeouts.initial_backoff_seconds,
            max_backoff_seconds=timeouts.max_backoff_seconds,
            max_unschedulable_seconds=timeouts.max_unschedulable_seconds,
        ),
    )
    core.starvation.guard_seconds = config.starvation.guard_seconds
    return core
