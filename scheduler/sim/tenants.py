"""Tenants in the time-based replay: an ElasticQuota file, the sharing modes compared,
and the scheduling core each mode runs on (docs/simulator.md, "Tenants").

The quotas file is what users apply: a YAML list of `ElasticQuota` objects
(scheduling.x-k8s.io/v1alpha1). Each is fed to the core exactly as the informer feeds
a watch event (`SchedulingCore.apply_elasticquota`), so the replay enforces quotas with
the very code the scheduler runs (cache/quota.py, scheduler/sharing/quotas.py). Because a file
is not a live cluster, anything the scheduler would log and ignore (an unreadable
amount, a resource it does not enforce, two quotas in one namespace) is refused here
with a message naming the file, the quota and the field: a comparison run on a quota
other than the one written would mislead.

A mode is a way of sharing the cluster, given as the scheduler configuration keys a
user would write (the same `config_from_mapping`) and what is done to the quotas:

| mode | quotas | `preemption.reclaim` | `starvation.guardSeconds` |
|---|---|---|---|
| no-quotas | none applied | (no quota to reclaim) | 0 (off) |
| no-borrowing | every quota's max set to its min | false | 0 |
| borrowing | as written | false | 0 |
| reclaim | as written | true | 0 |
| reclaim-guard | as written | true | 300 |

Priority preemption is on in every mode (`preemption.enabled`, its default). Each
mode says every setting it depends on, so a changed default cannot change a mode.

A setting this build does not know yet (reclaim and the starvation guard are built on
another branch) is left out, and the run says so (`ModeRun.unsupported`): it then
behaves as that setting's "off", and the report marks the row for a rerun.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cache.cluster import EventType
from cache.quota import GPU, QUOTA_GROUP, QUOTA_VERSION, quota_from_api
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.planner import Planner
from scheduler.process.config import (
    ConfigError,
    SchedulerConfig,
    build_core_from,
    config_from_mapping,
)
from scheduler.process.yamltext import YamlSyntaxError, load_yaml
from scheduler.sim.timeline import (
    DEFAULT_PREEMPTION_GRACE,
    Progress,
    TimelineResult,
    replay_timeline,
)
from scheduler.sim.workload import Task

QUOTA_API_VERSION = f"{QUOTA_GROUP}/{QUOTA_VERSION}"
QUOTA_KIND = "ElasticQuota"
_QUOTA_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_SPEC_FIELDS = ("min", "max")

# How long a gang may wait before the starvation guard reserves room for it, in the
# mode that turns the guard on: the configuration's default (docs/configuration.md).
STARVATION_GUARD_SECONDS = 300.0

# Settings of the modes that another branch adds to the configuration; a build that
# does not know them runs the mode without (as "off").
OPTIONAL_SETTINGS = ("preemption.reclaim", "starvation.guardSeconds", "starvation")


class QuotaFileError(ValueError):
    """A quotas file that cannot be used: the message names the file, the quota and the
    field."""


@dataclass(frozen=True, slots=True)
class Quota:
    """One ElasticQuota of the file: the object as written, and its GPU amounts read
    the way the scheduler reads them."""

    namespace: str
    name: str
    obj: Mapping[str, Any]
    min_gpu_milli: int | None
    max_gpu_milli: int | None


def load_quotas(path: Path) -> list[Quota]:
    """The quotas of a file; OSError when it cannot be read, QuotaFileError when it is
    not a list of ElasticQuotas the scheduler reads as written."""
    return parse_quotas(path.read_text(encoding="utf-8"), str(path))


def parse_quotas(text: str, source: str = "<quotas>") -> list[Quota]:
    """ElasticQuotas from YAML: a list of objects, or a `kind: List` with `items`."""
    try:
        data = load_yaml(text)
    except YamlSyntaxError as error:
        raise QuotaFileError(f"{source}: {error}") from None
    if isinstance(data, dict) and data.get("kind") == "List":
        data = data.get("items")
    if not isinstance(data, list) or not data:
        raise QuotaFileError(
            f"{source}: expected a non-empty list of ElasticQuota objects "
            f"(apiVersion {QUOTA_API_VERSION})"
        )
    quotas: list[Quota] = []
    governed: dict[str, str] = {}
    for position, raw in enumerate(data, start=1):
        quota = _parse_quota(raw, f"{source}: item #{position}")
        if quota.namespace in governed:
            raise QuotaFileError(
                f"{source}: ElasticQuota {quota.namespace}/{quota.name}: namespace "
                f"{quota.namespace!r} already has ElasticQuota {governed[quota.namespace]!r} "
                "(one quota per namespace)"
            )
        governed[quota.namespace] = quota.name
        quotas.append(quota)
    return quotas


def _parse_quota(raw: object, where: str) -> Quota:
    if not isinstance(raw, dict):
        raise QuotaFileError(f"{where}: expected an ElasticQuota object, got {_brief(raw)}")
    if raw.get("apiVersion") != QUOTA_API_VERSION or raw.get("kind") != QUOTA_KIND:
        raise QuotaFileError(
            f"{where}: expected apiVersion {QUOTA_API_VERSION} and kind {QUOTA_KIND}, got "
            f"{_brief(raw.get('apiVersion'))} and {_brief(raw.get('kind'))}"
        )
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        raise QuotaFileError(f"{where}: field 'metadata' must be a mapping with name, namespace")
    for field in ("name", "namespace"):
        value = meta.get(field)
        if not isinstance(value, str) or not value:
            raise QuotaFileError(
                f"{where}: field 'metadata.{field}' is missing (a team is a namespace: "
                "the quota governs the tasks of that namespace)"
            )
    name, namespace = meta["name"], meta["namespace"]
    where = f"{where.split(': ')[0]}: ElasticQuota {namespace}/{name}"
    for key in raw:
        if key not in _QUOTA_FIELDS:
            raise QuotaFileError(
                f"{where}: unknown field {key!r}; known: {', '.join(_QUOTA_FIELDS)}"
            )
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        raise QuotaFileError(f"{where}: field 'spec' must be a mapping with min and/or max")
    for key in spec:
        if key not in _SPEC_FIELDS:
            raise QuotaFileError(
                f"{where}: unknown field 'spec.{key}'; known: {', '.join(_SPEC_FIELDS)}"
            )
    for key in _SPEC_FIELDS:
        if key in spec and not isinstance(spec[key], dict):
            raise QuotaFileError(
                f"{where}: field 'spec.{key}' must be a resource list (e.g. "
                f"{{nvidia.com/gpu: 8}}), got {_brief(spec[key])}"
            )
    info = quota_from_api(raw)
    if info.problems:
        raise QuotaFileError(f"{where}: {info.problems[0].removeprefix('ElasticQuota ')}")
    return Quota(namespace, name, raw, info.min.get(GPU), info.max.get(GPU))


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- modes ---------------------------------------------------------------------------------
NO_QUOTAS = "none"
MIN_IS_MAX = "min-is-max"
AS_WRITTEN = "as-written"


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    title: str
    quotas: str  # NO_QUOTAS, MIN_IS_MAX or AS_WRITTEN
    # Scheduler configuration, as the config file's keys (docs/configuration.md).
    settings: Mapping[str, Any]


_NO_GUARD = {"starvation": {"guardSeconds": 0}}
_OFF = {"preemption": {"reclaim": False}, **_NO_GUARD}
_RECLAIM = {"preemption": {"reclaim": True}}
MODES: tuple[Mode, ...] = (
    Mode("no-quotas", "no quotas", NO_QUOTAS, _NO_GUARD),
    Mode("no-borrowing", "quotas, no borrowing (max = min)", MIN_IS_MAX, _OFF),
    Mode("borrowing", "borrowing, no reclaim", AS_WRITTEN, _OFF),
    Mode("reclaim", "borrowing + reclaim", AS_WRITTEN, {**_RECLAIM, **_NO_GUARD}),
    Mode(
        "reclaim-guard",
        "borrowing + reclaim + starvation guard",
        AS_WRITTEN,
        {**_RECLAIM, "starvation": {"guardSeconds": STARVATION_GUARD_SECONDS}},
    ),
)
MODE_NAMES = tuple(mode.name for mode in MODES)


def mode_named(name: str) -> Mode:
    for mode in MODES:
        if mode.name == name:
            return mode
    raise ValueError(f"unknown mode {name!r}; known: {', '.join(MODE_NAMES)}")


def mode_quotas(mode: Mode, quotas: Sequence[Quota]) -> list[dict[str, Any]]:
    """The ElasticQuota objects the mode applies."""
    if mode.quotas == NO_QUOTAS:
        return []
    objects = [copy.deepcopy(dict(quota.obj)) for quota in quotas]
    if mode.quotas == MIN_IS_MAX:
        for obj in objects:
            spec = obj["spec"]
            # Every resource min names is limited to it: nothing beyond the guarantee.
            spec["max"] = {**(spec.get("max") or {}), **(spec.get("min") or {})}
    return objects


def mode_config(mode: Mode, policy: str) -> tuple[SchedulerConfig, tuple[str, ...]]:
    """The scheduler configuration of the mode with `policy`, and the settings it asks
    for (turned on) that this build does not know: those are left out."""
    settings: dict[str, Any] = {
        "policy": {"name": policy},
        # No Secret to read in a replay: the process's own key (binds are never re-read).
        "assignmentSigning": {"keyFile": ""},
        **copy.deepcopy(dict(mode.settings)),
    }
    unsupported: list[str] = []
    while True:
        try:
            return config_from_mapping(settings), tuple(unsupported)
        except ConfigError as error:
            if error.path not in OPTIONAL_SETTINGS:
                raise
            value = _pop_path(settings, error.path)
            if _turned_on(value):
                unsupported.append(error.path)


def _pop_path(settings: dict[str, Any], path: str) -> object:
    *parents, last = path.split(".")
    section = settings
    for key in parents:
        section = section[key]
    value = section.pop(last)
    if parents and not section:  # an emptied section is left out whole
        _pop_path(settings, ".".join(parents))
    return value


def _turned_on(value: object) -> bool:
    if isinstance(value, Mapping):
        return any(_turned_on(item) for item in value.values())
    return bool(value)


# Settings `gang-scheduler run` hands to the core's parts after building it
# (scheduler/kube/runner.py does the same): (config section, field, core part,
# attribute). Applied where both ends exist in this build: reclaim and the starvation
# guard come with the branch that adds them.
RUNTIME_SETTINGS = (
    ("preemption", "enabled", "preempter", "enabled"),
    ("preemption", "reclaim", "preempter", "reclaim"),
    ("starvation", "guard_seconds", "starvation", "guard_seconds"),
)


def build_core(config: SchedulerConfig, quotas: Sequence[Mapping[str, Any]]) -> SchedulingCore:
    """The core a mode runs on: built from the configuration as `gang-scheduler run`
    builds it, preemption enabled as the configuration says (the replay carries the
    decisions out), and the quotas applied as ElasticQuota watch events."""
    core = build_core_from(config)
    # Nobody reads why a gang waits in a replay: skip wording it (a pass over every node).
    core.planner = Planner(core.profile, explain=False)
    for section, name, part, attribute in RUNTIME_SETTINGS:
        value = getattr(getattr(config, section, None), name, None)
        target = getattr(core, part, None)
        if value is not None and target is not None and hasattr(target, attribute):
            setattr(target, attribute, value)
    for obj in quotas:
        core.apply_elasticquota(EventType.ADDED, obj, 0.0)
    return core


# --- one run -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ModeRun:
    """A replay of one workload under one mode."""

    mode: Mode
    policy: str
    seed: int | None
    result: TimelineResult
    # Settings the mode turns on that this build does not know (it ran without them).
    unsupported: tuple[str, ...]


def run_mode(
    nodes: Sequence[Mapping[str, Any]],
    tasks: Sequence[Task],
    quotas: Sequence[Quota],
    mode: Mode,
    *,
    policy: str = "binpack",
    seed: int | None = None,
    preemption_grace: float = DEFAULT_PREEMPTION_GRACE,
    progress: Progress | None = None,
) -> ModeRun:
    config, unsupported = mode_config(mode, policy)
    core = build_core(config, mode_quotas(mode, quotas))
    result = replay_timeline(
        nodes, tasks, core, progress=progress, preemption_grace=preemption_grace
    )
    return ModeRun(mode, policy, seed, result, unsupported)
