"""ResourceSlices as slim records: a driver's devices in one pool, and where they reach.

Field names follow resource.k8s.io/v1. A slice that cannot be read keeps its identity
(name, driver, pool, generation where readable) and a problem; its pool is then invalid
(pools.py), so none of its devices is ever allocated or counted. A device that uses what
this scheduler does not support (binding conditions, bindsToNode, ...) or whose counters
do not add up stays in the slice with a `refusal` naming the field: it is counted,
never allocated. Consumable capacity (allowMultipleAllocations, requestPolicy) and
partitionable devices (sharedCounters, consumesCounters) are read for the allocator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from cache.dra import fields as f
from cache.jsonobj import MALFORMED, mapping, metadata, text_field
from cache.quantity import parse_quantity
from cache.terms import SelectorTerm


class DeviceId(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class PoolId(NamedTuple):
    driver: str
    pool: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}"


# Where a slice's devices are reachable from (exactly one of the four; "" when none was
# set, which the API refuses: such a slice's devices reach no node).
NODE_NAME = "nodeName"
NODE_SELECTOR = "nodeSelector"
ALL_NODES = "allNodes"
PER_DEVICE = "perDeviceNodeSelection"


@dataclass(frozen=True, slots=True)
class NodeBinding:
    """Where devices are reachable from: one node by name, the nodes a selector matches,
    or every node. `kind` "" reaches none."""

    kind: str = ""
    node_name: str = ""
    terms: tuple[SelectorTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice. `attributes` and `capacity` are keyed by fully qualified
    name ("gpu.example.com/model"). `binding`: the device's own node binding, set only
    in a slice with perDeviceNodeSelection. `refusal`: why this scheduler never
    allocates it ("" when it may)."""

    name: str
    attributes: Mapping[str, f.Attribute] = field(default_factory=dict)
    capacity: Mapping[str, Fraction] = field(default_factory=dict)
    allow_multiple_allocations: bool = False
    # The capacities keyed as the slice writes them (a bare name stays bare): consumable
    # capacity matches a claim's `capacity.requests` and writes `consumedCapacity` by
    # these keys, literally, as kube-scheduler does.
    written_capacity: Mapping[str, Fraction] = field(default_factory=dict)
    # Per capacity (keyed as written), its requestPolicy (only with allowMultipleAllocations).
    policies: Mapping[str, f.RequestPolicy] = field(default_factory=dict)
    # consumesCounters: the pool's counter sets this device draws on while allocated.
    consumes_counters: tuple[f.CounterSet, ...] = ()
    taints: tuple[f.DeviceTaint, ...] = ()
    binding: NodeBinding | None = None
    binds_to_node: bool = False
    refusal: str = ""
    # What the allocator derives once per device record (its CEL environment, selector
    # results): the record is replaced whenever its slice changes, and this with it.
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False, hash=False)


@dataclass(frozen=True, slots=True)
class Slice:
    name: str
    resource_version: str = ""
    driver: str = ""
    pool: str = ""
    generation: int = 0
    slice_count: int = 0  # spec.pool.resourceSliceCount
    binding: NodeBinding = NodeBinding()
    devices: tuple[Device, ...] = ()
    # spec.sharedCounters (partitionable devices): the pool's counter sets, which its
    # devices' consumesCounters draw on.
    counter_sets: tuple[f.CounterSet, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def pool_id(self) -> PoolId:
        return PoolId(self.driver, self.pool)


def slice_from_api(obj: Mapping[str, Any]) -> Slice:
    """Never raises."""
    meta = metadata(obj)
    name = text_field(meta, "name", f.MAX_NAME)
    version = text_field(meta, "resourceVersion", 64)
    try:
        return _slice(obj, name, version)
    except MALFORMED as error:
        spec = mapping(mapping(obj).get("spec"))
        pool = mapping(spec.get("pool"))
        driver, pool_name, generation = "", "", 0
        binding = NodeBinding()
        try:
            driver = f.text(spec.get("driver"), "driver")
            pool_name = f.text(pool.get("name"), "pool.name")
            generation = f.int64(pool.get("generation"), "pool.generation", low=0)
            # Where it reaches, when that much is readable: the nodes it names then
            # say why the pool is invalid, instead of not seeing the pool at all.
            binding = _slice_binding(spec)
        except MALFORMED:
            pass
        return Slice(
            name=name,
            resource_version=version,
            driver=driver,
            pool=pool_name,
            generation=generation,
            binding=binding,
            problems=(f"resourceslice {name!r}: {error}",),
        )


def _slice(obj: Mapping[str, Any], name: str, version: str) -> Slice:
    spec = mapping(mapping(obj).get("spec"))
    driver = f.text(spec.get("driver"), "spec.driver", limit=63, required=True)
    pool = mapping(spec.get("pool"))
    pool_name = f.text(pool.get("name"), "spec.pool.name", required=True)
    generation = f.int64(pool.get("generation", 0), "spec.pool.generation", low=0)
    slice_count = f.int64(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", low=1)
    binding = _slice_binding(spec)
    raw_devices = f.items(spec.get("devices"), "spec.devices", f.MAX_DEVICES_PER_SLICE)
    devices: list[Device] = []
    seen: set[str] = set()
    problems: list[str] = []
    for index, raw in enumerate(raw_devices):
        device = _device(raw, driver, binding.kind == PER_DEVICE, f"spec.devices[{index}]")
        if device.name in seen:
            # Never two records of one device: the pool is invalid (pools.py), as the
            # allocator's validateDeviceNames makes it.
            problems.append(f"resourceslice {name!r}: duplicate device name {device.name!r}")
            continue
        seen.add(device.name)
        devices.append(device)
    counter_sets = f.counter_sets(
        spec.get("sharedCounters"), "spec.sharedCounters", f.MAX_COUNTER_SETS
    )
    return Slice(
        name=name,
        resource_version=version,
        driver=driver,
        pool=pool_name,
        generation=generation,
        slice_count=slice_count,
        binding=binding,
        devices=tuple(devices),
        counter_sets=counter_sets,
        problems=tuple(problems),
    )


def _slice_binding(spec: Mapping[str, Any]) -> NodeBinding:
    node_name = f.text(spec.get("nodeName"), "spec.nodeName")
    selector = spec.get("nodeSelector")
    all_nodes = f.flag(spec.get("allNodes"), "spec.allNodes")
    per_device = f.flag(spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection")
    chosen = [
        kind
        for kind, present in (
            (NODE_NAME, bool(node_name)),
            (NODE_SELECTOR, selector is not None),
            (ALL_NODES, bool(all_nodes)),
            (PER_DEVICE, bool(per_device)),
        )
        if present
    ]
    if len(chosen) > 1:
        raise ValueError(f"spec sets {', '.join(chosen)}: exactly one of them is allowed")
    if not chosen:
        if spec.get("sharedCounters"):
            return NodeBinding()  # a slice of counter sets only: reaches no node itself
        raise ValueError(
            "spec sets none of nodeName, nodeSelector, allNodes, perDeviceNodeSelection"
        )
    kind = chosen[0]
    if kind == NODE_NAME:
        return NodeBinding(NODE_NAME, node_name=node_name)
    if kind == NODE_SELECTOR:
        terms = f.node_selector(selector, "spec.nodeSelector")
        if len(terms) != 1:
            # Validation requires exactly one term (the allocator merges it into the
            # claim's node selector).
            raise ValueError("spec.nodeSelector must have exactly one term")
        return NodeBinding(NODE_SELECTOR, terms=terms)
    return NodeBinding(kind)


def _device(raw: object, driver: str, per_device: bool, what: str) -> Device:
    body = mapping(raw)
    name = f.text(body.get("name"), f"{what}.name", required=True)
    raw_attributes = f.entries(
        body.get("attributes"), f"{what}.attributes", f.MAX_ATTRIBUTES_AND_CAPACITIES
    )
    raw_capacity = f.entries(
        body.get("capacity"), f"{what}.capacity", f.MAX_ATTRIBUTES_AND_CAPACITIES
    )
    if len(raw_attributes) + len(raw_capacity) > f.MAX_ATTRIBUTES_AND_CAPACITIES:
        raise ValueError(
            f"{what} has more than {f.MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities"
        )
    refusals: list[str] = []
    attributes: dict[str, f.Attribute] = {}
    for key, value in raw_attributes.items():
        full = f.qualified(key, driver, f"{what}.attributes key")
        try:
            parsed = f.attribute(value, f"{what}.attributes[{full}]")
        except MALFORMED as error:
            refusals.append(str(error))
            continue
        if full in attributes:
            raise ValueError(f"{what}.attributes names {full!r} twice")
        attributes[full] = parsed
    multiple = bool(
        f.flag(body.get("allowMultipleAllocations"), f"{what}.allowMultipleAllocations")
    )
    capacity: dict[str, Fraction] = {}
    written: dict[str, Fraction] = {}
    policies: dict[str, f.RequestPolicy] = {}
    for key, value in raw_capacity.items():
        full = f.qualified(key, driver, f"{what}.capacity key")
        amount = parse_quantity(mapping(value).get("value"))
        if full in capacity:
            raise ValueError(f"{what}.capacity names {full!r} twice")
        capacity[full] = amount
        written[key] = amount
        policy = f.request_policy(
            mapping(value).get("requestPolicy"), f"{what}.capacity[{key}].requestPolicy"
        )
        if policy is not None:
            if not multiple:
                # The API server forbids it: "allowMultipleAllocations must be true".
                raise ValueError(
                    f"{what}.capacity[{key}].requestPolicy needs allowMultipleAllocations"
                )
            policies[key] = policy
    consumes = f.counter_sets(
        body.get("consumesCounters"), f"{what}.consumesCounters", f.MAX_COUNTER_CONSUMPTIONS
    )
    for consumption in consumes:
        for counter, amount in consumption.counters.items():
            if amount < 0:
                # Validation accepts any quantity; a negative draw would give counters
                # back to the set, so the device is never allocated.
                refusals.append(
                    f"{what}.consumesCounters[{consumption.name}].counters[{counter}] is "
                    f"negative ({f.format_quantity(amount)}): counters that do not add up"
                )
    binds = bool(f.flag(body.get("bindsToNode"), f"{what}.bindsToNode"))
    # What this scheduler does not allocate: refused by the field's name.
    if body.get("bindingConditions") or body.get("bindingFailureConditions"):
        refusals.append(f"{what}.bindingConditions (device binding conditions) are not supported")
    if binds:
        refusals.append(f"{what}.bindsToNode is not supported")
    if body.get("nodeAllocatableResourceMappings"):
        refusals.append(f"{what}.nodeAllocatableResourceMappings (alpha) is not supported")
    return Device(
        name=name,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=multiple,
        written_capacity=written,
        policies=policies,
        consumes_counters=consumes,
        taints=f.taints(body.get("taints"), f"{what}.taints"),
        binding=_device_binding(body, what) if per_device else None,
        binds_to_node=binds,
        refusal="; ".join(refusals),
    )


def _device_binding(body: Mapping[str, Any], what: str) -> NodeBinding:
    node_name = f.text(body.get("nodeName"), f"{what}.nodeName")
    selector = body.get("nodeSelector")
    all_nodes = f.flag(body.get("allNodes"), f"{what}.allNodes")
    if sum((bool(node_name), selector is not None, bool(all_nodes))) != 1:
        raise ValueError(f"{what} must set exactly one of nodeName, nodeSelector, allNodes")
    if node_name:
        return NodeBinding(NODE_NAME, node_name=node_name)
    if all_nodes:
        return NodeBinding(ALL_NODES)
    terms = f.node_selector(selector, f"{what}.nodeSelector")
    if len(terms) != 1:
        raise ValueError(f"{what}.nodeSelector must have exactly one term")
    return NodeBinding(NODE_SELECTOR, terms=terms)
