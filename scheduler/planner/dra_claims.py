"""A gang's DRA claims resolved before the planner runs (docs/dra.md, "Whole-gang
allocation"), as volume_claims.py resolves its PersistentVolumeClaims:

1. Each member's `spec.resourceClaims` become claim keys: a `resourceClaimName` names
   the claim; a `resourceClaimTemplateName` names it through the pod's
   `status.resourceClaimStatuses` (the claim the resourceclaim controller made, which
   must be controlled by the pod). A member whose claim is not there yet, is being
   deleted, was not made for it, or asks for what this scheduler refuses (a request
   with consumable capacity, a claim that cannot be read, an extended resource a
   DeviceClass provides through DRA) carries the reason as a problem: the planner sets
   it aside and its pods say why.
2. A member whose one claim to allocate is a GPU demand (cache/dra/gpu_shares.py)
   gets that demand as its GPU request, so that GpuFit, the device chooser and the
   packing scores judge it on the node's shared GPUs (shown as its devices by the
   core) exactly as they judge an `nvidia.com/vgpu` or `nvidia.com/gpu` request; the
   member-choice kind then allocates the devices the chosen shares name.
3. Each member's `dra_reach`: the nodes where its claims can be allocated alone
   (against the devices others hold), which the DynamicResources filter reads, so that
   candidates, scores and kube-scheduler style counts see it as any other filter.
   A claim the pod lists exactly as its native PodGroup does (`spec.resourceClaims`,
   cache/group_claims.py) is the gang's: resolved through the PodGroup (a template's
   claim must be controlled by the PodGroup), allocated once for every member that
   uses it, and reserved for the PodGroup instead of the pods.
4. The DRA member-choice kind (dra_choice.py) for the members with claims, which
   allocates them across the gang.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence

from cache.dra.gpu_shares import gpu_demand, plain_shared_gpu, share_capacity
from cache.dra.store import DraCache
from cache.dra.view import DeviceView
from cache.gpu import NO_GPU, GpuRequest
from cache.group_claims import GroupClaims
from cache.pod import NodeScores, PodInfo
from cache.pod_claims import PodResourceClaim
from cache.snapshot import Snapshot
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import GangMember
from policies.dra.selection import SelectorError
from policies.dra.topology import allocation_score
from policies.filters.dynamic_resources import CANNOT_ALLOCATE, NOT_AVAILABLE
from scheduler.planner.dra_choice import DraChoiceKind
from scheduler.planner.dra_reach import ReachMemo, caught_up, judge
from scheduler.planner.extended_claims import ExtendedDemand, non_integer, readable

# Virtual claims (extended resources) kept between planning calls before they are made
# up afresh.
MAX_VIRTUAL_CLAIMS = 4_096


def claim_keys(
    pod: PodInfo,
    dra: DeviceView,
    group: GroupClaims | None = None,
    group_keys: set[str] | None = None,
) -> tuple[str, ...] | str:
    """The keys ("ns/name") of the ResourceClaims the pod uses, in its order, or why
    the pod waits (or is refused). `group`: the claims of the pod's whole gang (a
    native PodGroup's spec.resourceClaims); the keys of those the pod uses through it
    are added to `group_keys`."""
    keys: list[str] = []
    for ref in pod.resource_claims:
        shared = group.matching(ref) if group is not None else None
        if shared is not None and group is not None:
            found, why = _group_claim_key(pod, ref, dra, group)
            if why:
                return why
            if found is None:
                continue  # the controller decided no claim is needed
            key = found
            if group_keys is not None:
                group_keys.add(key)
        else:
            name = ref.claim_name
            if ref.template_name:
                made = pod.claim_statuses.get(ref.name)
                if made is None:
                    return (
                        f"waiting for the ResourceClaim of template {ref.template_name} to "
                        f"be created (pod claim {ref.name})"
                    )
                if not made:
                    continue  # the controller decided no claim is needed
                name = made
            key = f"{pod.namespace}/{name}"
            claim = dra.claims.get(key)
            if claim is None:
                if ref.template_name:
                    return f"waiting for ResourceClaim {key} of template {ref.template_name}"
                return f"waiting for ResourceClaim {key} to be created"
            if ref.template_name and claim.owner_uid != pod.uid:
                return f"ResourceClaim {key} was not created for pod {pod.key} (pod is not owner)"
        problem = _claim_problem(key, dra)
        if problem:
            return problem
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def _group_claim_key(
    pod: PodInfo, ref: PodResourceClaim, dra: DeviceView, group: GroupClaims
) -> tuple[str | None, str]:
    """The key of the gang's claim the pod's entry `ref` uses (None when no claim is
    needed) and "", or why the pod waits. The claim is in the PodGroup's
    namespace (the pod's: a pod names a PodGroup of its own namespace only)."""
    where = f"PodGroup {group.namespace}/{group.podgroup} claim {ref.name}"
    if group.namespace != pod.namespace:
        return None, f"{where} is not in the namespace of pod {pod.key}"
    name = ref.claim_name
    if ref.template_name:
        # kube-scheduler reads the name from the pod's status (resourceclaim.Name),
        # which the controller fills from the PodGroup's; either says it here.
        made = pod.claim_statuses.get(ref.name)
        if made is None:
            made = group.made_for(ref.name)
        if made is None:
            return None, (
                f"waiting for the ResourceClaim of template {ref.template_name} to be "
                f"created for {where}"
            )
        if not made:
            return None, ""
        name = made
    key = f"{group.namespace}/{name}"
    claim = dra.claims.get(key)
    if claim is None:
        return None, f"waiting for ResourceClaim {key} of {where} to be created"
    if ref.template_name and claim.owner_uid != group.uid:
        return None, (
            f"ResourceClaim {key} was not created for PodGroup {group.namespace}/"
            f"{group.podgroup} (PodGroup is not owner)"
        )
    return key, ""


def _claim_problem(key: str, dra: DeviceView) -> str:
    """Why the claim cannot be used as it stands ("" when it can)."""
    claim = dra.claims[key]
    if claim.deleting:
        return f"ResourceClaim {key} is being deleted"
    if dra.allocation_of(key) is None:
        if claim.problems:
            return f"cannot allocate all claims: {claim.problems[0]}"
        for request in claim.requests:
            for exact in (request.exactly, *request.first_available):
                if exact is not None and exact.refusal:
                    return f"cannot allocate all claims: claim {key}: {exact.refusal}"
    return ""


def extended_demand(
    pod: PodInfo, dra: DeviceView, provided: Mapping[str, str]
) -> ExtendedDemand | str | None:
    """The pod's DRA-backed extended resources (extended_claims.py): None when it asks
    for none a DeviceClass provides, else what it asks or why it waits or is refused."""
    wanted = frozenset(r for r, amount in pod.requests.items() if amount > 0 and r in provided)
    if not wanted:
        return None
    refusal = non_integer(pod, provided)
    if refusal:
        return refusal
    stale = dra.extended_claim_of(pod.uid)
    if stale is not None:
        # kube-scheduler deletes such a claim in PostFilter and tries anew; here the
        # binder deletes what it created when a gang breaks, so one left over is
        # someone else's business (or a crash's): the pod says so and waits.
        return (
            f"waiting for ResourceClaim {stale.key}, created for the pod's extended "
            "resources by an earlier attempt, to be deleted"
        )
    return ExtendedDemand(pod, tuple(sorted(wanted)), provided, dra)


def resolve_dra(
    pending: Sequence[PodInfo],
    dra: DeviceView,
    snapshot: Snapshot,
    namespace_labels: Mapping[str, Mapping[str, str]],
    memo: ReachMemo | None = None,
    group: GroupClaims | None = None,
) -> tuple[list[PodInfo], DraChoiceKind | None]:
    """The members with their DRA claims resolved (a problem, or `dra_reach`), and the
    kind that allocates them across the gang (None when no member has claims).
    `memo`: reaches kept between calls (dra_reach.py); None computes each afresh.
    `group`: the claims of the whole gang (its native PodGroup's), each allocated once
    and reserved for the PodGroup."""
    provided = dra.extended_resources() if dra.classes else {}
    if not provided and not any(pod.resource_claims for pod in pending):
        return list(pending), None
    if len(dra.virtual) > MAX_VIRTUAL_CLAIMS:
        dra.virtual.clear()  # made up again for each gang planned
    allocator = ClaimAllocator(dra, namespace_labels)
    members: list[PodInfo] = []
    claims: dict[str, tuple[str, ...]] = {}
    extended: dict[str, ExtendedDemand] = {}
    details: dict[str, Callable[[], str]] = {}
    group_keys: set[str] = set()
    gpu_members: set[str] = set()
    reaches: dict[
        Hashable, tuple[tuple[frozenset[str], str], Callable[[], str], NodeScores | None]
    ] = {}
    for pod in pending:
        if pod.problems:
            members.append(pod)
            continue
        demand = extended_demand(pod, dra, provided) if provided else None
        if isinstance(demand, str):
            members.append(dataclasses.replace(pod, problems=(demand,)))
            continue
        if demand is None and not pod.resource_claims:
            members.append(pod)
            continue
        keys: tuple[str, ...] | str = (
            claim_keys(pod, dra, group, group_keys) if pod.resource_claims else ()
        )
        if isinstance(keys, str):
            members.append(dataclasses.replace(pod, problems=(keys,)))
            continue
        if demand is None and not keys:
            members.append(pod)
            continue
        gpu = pod.gpu
        if demand is not None:
            pod = dataclasses.replace(pod, dra_extended=frozenset(demand.resources))
            demand.pod = pod
            extended[pod.uid] = demand
            # Which nodes leave which resources to DRA differs per node: no memo; members
            # made from one template ask alike, so the answer is shared among them.
            signature: Hashable = (
                "extended",
                _demand(pod, keys, dra),
                pod.extended_containers,
                demand.resources,
            )
            if signature not in reaches:
                reaches[signature] = _reach(pod, keys, allocator, snapshot, None, None, demand)
            found = reaches[signature]
        else:
            signature = _demand(pod, keys, dra)
            gpu = _gpu_request(pod, keys, dra)
            if signature not in reaches:
                plain = (
                    _plain_gpu_nodes(keys, allocator, snapshot, memo) if gpu != pod.gpu else None
                )
                reaches[signature] = _reach(
                    pod, keys, allocator, snapshot, memo, signature, plain=plain
                )
            found = reaches[signature]
        reach, detail, topology = found
        if gpu != pod.gpu:
            gpu_members.add(pod.uid)
        members.append(dataclasses.replace(pod, dra_reach=reach, dra_topology=topology, gpu=gpu))
        claims[pod.uid] = keys
        details[pod.uid] = detail
    if not claims:
        return members, None
    pods = {pod.uid: pod for pod in members if pod.uid in claims}
    shared = None if group is None else (group, frozenset(group_keys))
    kind = DraChoiceKind(allocator, claims, pods, details, extended, shared, frozenset(gpu_members))
    return members, kind


def _gpu_request(pod: PodInfo, keys: tuple[str, ...], dra: DeviceView) -> GpuRequest:
    """The GPU request the planner judges the member by: its own (a device-plugin
    request), else the GPU demand of its one claim when that claim is still to
    allocate and is one (cache/dra/gpu_shares.py), else none."""
    if pod.gpu != NO_GPU or len(keys) != 1 or dra.allocation_of(keys[0]) is not None:
        return pod.gpu
    if dra is not dra.reach_source:
        # A what-if (preemption, reclaim, the starvation guard) frees the devices of
        # the pods it takes away, which the GPUs shown on the nodes do not: the member
        # is judged by the allocator alone there.
        return pod.gpu
    demand = gpu_demand(dra.claims[keys[0]])
    return NO_GPU if demand is None else demand


def _demand(pod: PodInfo, keys: tuple[str, ...], dra: DeviceView) -> Hashable:
    """What decides where the pod's claims can go alone: the specs of the claims to
    allocate (members made from one template ask alike), the claims allocated already
    by identity."""
    parts: list[Hashable] = [pod.namespace]
    for key in keys:
        claim = dra.claims[key]
        if dra.allocation_of(key) is None:
            parts.append((claim.requests, claim.constraints))
        else:
            parts.append((key, pod.uid))
    return tuple(parts)


def _plain_gpu_nodes(
    keys: tuple[str, ...],
    allocator: ClaimAllocator,
    snapshot: Snapshot,
    memo: ReachMemo | None,
) -> frozenset[str] | None:
    """For a member judged by the GPU demand of its one claim: the nodes where the
    devices the claim's request can use are exactly the node's shown shared GPUs, all
    plain (dra_reach.PlainGpuNodes); None when they cannot be kept."""
    dra = allocator.cache
    source = dra.reach_source  # which devices there are: a what-if only frees some
    if memo is None or not source.reach_trackable():
        return None
    exact = dra.claims[keys[0]].requests[0].exactly
    assert exact is not None  # a GPU demand (gpu_demand) has one `exactly` request
    device_class = dra.classes.get(exact.device_class)
    if device_class is None or device_class.problems:
        return None
    class_who = f"class {device_class.name}"
    claim_who = f"claim {keys[0]} request {exact.name}"

    def plain_on(name: str, labels: Mapping[str, str]) -> bool:
        reached = source.node_devices(name, labels)
        if reached.unusable or not reached.candidates:
            return False
        selectors = allocator.selectors
        try:
            for candidate in reached.candidates:
                device, driver = candidate.device, candidate.device_id.driver
                usable = (
                    not device.refusal
                    and selectors.match(device_class.selectors, class_who, driver, device)
                    and selectors.match(exact.selectors, claim_who, driver, device)
                )
                shown = share_capacity(device) is not None
                if shown != usable or (shown and not plain_shared_gpu(device)):
                    return False
        except SelectorError:
            return False  # the allocator words it, node by node
        return True

    kind = (device_class, exact.selectors)
    return memo.plain_gpus.nodes(source, snapshot, kind, plain_on)


def _reach(
    pod: PodInfo,
    keys: tuple[str, ...],
    allocator: ClaimAllocator,
    snapshot: Snapshot,
    memo: ReachMemo | None = None,
    demand: Hashable = None,
    extended: ExtendedDemand | None = None,
    plain: frozenset[str] | None = None,
) -> tuple[tuple[frozenset[str], str], Callable[[], str], NodeScores | None]:
    """The nodes where the claims can be allocated (or used) alone, the filter's
    words for the others, the allocator's words on the first node refused (worded when
    asked: only a member that finds no node reads them), and how tight the devices each
    of those nodes gives are (None: no node tells).
    `extended`: the pod's DRA-backed extended resources, a claim of their own on each
    node that leaves some of them to DRA. `plain`: nodes where GpuFit on the shown GPUs
    decides for this member (PlainGpuNodes), counted in without an allocation: the
    reach is then the same frozenset from one call to the next while no other node
    fits, so the planner's kept rankings for the member's shape stay valid."""
    dra = allocator.cache
    allocating = extended is not None or any(dra.allocation_of(key) is None for key in keys)
    reusing = any(dra.allocation_of(key) is not None for key in keys)
    answers = None
    if memo is not None and extended is None and not reusing and dra.reach_trackable():
        # The namespace's labels decide admin access; the demand holds the rest.
        namespace = tuple(sorted(allocator.namespace_labels.get(pod.namespace, {}).items()))
        answers = memo.answers(dra, (demand, namespace))

    def attempt(name: str, labels: Mapping[str, str]) -> tuple[str, float | None]:
        """The allocator's words on the node ("" when the claims fit there) and the
        topology score of the allocation it found."""
        keys_here = keys if extended is None else extended.keys_on(keys, snapshot.nodes[name])
        if not keys_here:
            return "", None
        found = allocator.allocate(GangMember(pod.uid, pod.namespace, keys_here, name, labels))
        if isinstance(found, str):
            return found, None
        reached = dra.node_devices(name, labels)
        return "", allocation_score(reached, labels, found.taken(), dra.holder)

    def first_refused() -> str:
        """The first refused node's words (a node that reaches no device only if no
        other was refused)."""
        skipped = ""
        for name, node in snapshot.nodes.items():
            if name in nodes:
                continue
            if allocating and not dra.may_reach_devices(name):
                skipped = skipped or name
                continue
            if plain is not None and name in plain:
                continue
            return readable(f"on node {name}: {attempt(name, node.labels)[0]}")
        found = attempt(skipped, snapshot.nodes[skipped].labels)[0] if skipped else ""
        return readable(f"on node {skipped}: {found}" if found else "")

    reason = CANNOT_ALLOCATE if allocating else NOT_AVAILABLE
    if answers is not None and plain is None and isinstance(dra, DraCache):
        # The core's DraCache: the kept set, caught up with what changed since.
        nodes, topology = caught_up(answers, dra, snapshot, attempt)
        return (nodes, reason), _once(first_refused), topology
    fitting: list[str] = []
    scores: dict[str, float] = {}
    for name, node in snapshot.nodes.items():
        if extended is not None and not extended.keys_on(keys, node):
            fitting.append(name)  # the device plugin serves it here, and no claim is left
            continue
        if allocating and not dra.may_reach_devices(name):
            continue
        if plain is not None and name in plain:
            continue
        if answers is None:
            refusal, score = attempt(name, node.labels)
            fit = not refusal
        else:
            fit, score = judge(answers, dra, name, node.labels, attempt)
        if fit:
            fitting.append(name)
        if score is not None:
            scores[name] = score
    nodes = frozenset(fitting)
    topology = NodeScores(scores) if scores else None
    if extended is not None:
        # Virtual claims are made up per call: worded now, as they stand.
        words = first_refused()
        detail: Callable[[], str] = lambda: words  # noqa: E731
    else:
        detail = _once(first_refused)
    if plain is not None:
        return (plain.union(nodes) if nodes else plain, reason), detail, topology
    return (nodes, reason), detail, topology


def _once(word: Callable[[], str]) -> Callable[[], str]:
    """`word`, asked at most once."""
    said: list[str] = []

    def words() -> str:
        if not said:
            said.append(word())
        return said[0]

    return words
