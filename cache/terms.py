"""Taints, tolerations and node selector terms as immutable records.

Field names follow the Kubernetes API (core/v1 Taint, Toleration,
NodeSelectorRequirement); parse functions take the API's JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cache.limits import small_int

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def describe(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        # An empty key with Exists tolerates everything.
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions entry (or matchFields on metadata.name when `field`)."""

    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False


# A node selector term is a tuple of requirements (ANDed); terms are ORed.
SelectorTerm = tuple[Requirement, ...]


def parse_taints(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in raw or ()
    )


def parse_tolerations(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Toleration, ...]:
    result = []
    for item in raw or ():
        operator = str(item.get("operator") or "Equal")
        if operator not in ("Equal", "Exists"):
            raise ValueError(f"toleration operator {operator!r} is neither Equal nor Exists")
        result.append(
            Toleration(
                str(item.get("key", "") or ""),
                operator,
                str(item.get("value", "") or ""),
                str(item.get("effect", "") or ""),
            )
        )
    return tuple(result)


def _parse_requirement(raw: Mapping[str, Any], field: bool) -> Requirement:
    operator = str(raw.get("operator", ""))
    if operator not in OPERATORS:
        raise ValueError(f"node selector operator {operator!r} is not one of {sorted(OPERATORS)}")
    values = tuple(str(v) for v in raw.get("values") or ())
    if operator in ("Gt", "Lt") and (len(values) != 1 or not _is_int(values[0])):
        raise ValueError(f"node selector operator {operator} needs exactly one integer value")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"node selector operator {operator} needs at least one value")
    return Requirement(str(raw.get("key", "")), operator, values, field)


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def parse_required_affinity(
    affinity: Mapping[str, Any] | None,
) -> tuple[SelectorTerm, ...] | None:
    """The pod's requiredDuringSchedulingIgnoredDuringExecution node selector terms.

    None when the pod has no required node affinity. As in Kubernetes, terms are ORed,
    and a term with no requirements matches no node.
    """
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        requirements = [_parse_requirement(r, False) for r in term.get("matchExpressions") or ()]
        requirements += [_parse_requirement(r, True) for r in term.get("matchFields") or ()]
        terms.append(tuple(requirements))
    return tuple(terms)


# --- pod affinity and topology spread ------------------------------------------------------
# Records of core/v1 PodAffinityTerm, WeightedPodAffinityTerm and TopologySpreadConstraint,
# resolved against the pod that carries them (its namespace, its labels for
# matchLabelKeys), so that a term means the same thing wherever it is read.

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector: matchLabels become `In` requirements, all ANDed. A null
    selector (`nothing`) matches no object; an empty one matches every object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """Matches everything (labels.Selector.Empty())."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for req in self.requirements:
            value = labels.get(req.key)
            operator = req.operator
            if operator == "In":
                if value is None or value not in req.values:
                    return False
            elif operator == "NotIn":
                if value is not None and value in req.values:
                    return False
            elif operator == "Exists":
                if value is None:
                    return False
            elif value is not None:  # DoesNotExist
                return False
        return True

    def with_requirements(self, extra: Sequence[Requirement]) -> LabelSelector:
        if self.nothing or not extra:
            return self
        return LabelSelector(self.requirements + tuple(extra))


NOTHING = LabelSelector(nothing=True)


def parse_label_selector(raw: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: None gives a selector matching nothing."""
    if raw is None:
        return NOTHING
    requirements = [
        Requirement(str(key), "In", (str(value),))
        for key, value in sorted((raw.get("matchLabels") or {}).items())
    ]
    for item in raw.get("matchExpressions") or ():
        operator = str(item.get("operator", ""))
        if operator not in LABEL_OPERATORS:
            raise ValueError(
                f"label selector operator {operator!r} is not one of {sorted(LABEL_OPERATORS)}"
            )
        values = tuple(sorted(str(v) for v in item.get("values") or ()))
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"label selector operator {operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"label selector operator {operator} takes no values")
        requirements.append(Requirement(str(item.get("key", "")), operator, values))
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """Pods this term selects: in one of `namespaces`, or in a namespace whose labels
    `namespace_selector` matches, and whose labels `selector` matches. `namespaces` is
    resolved at parse time: the owner's namespace when the term names none and has no
    namespace selector. `weight` is a preferred term's weight (0 for a required one)."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str
    weight: int = 0

    def matches(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]
    ) -> bool:
        if namespace not in self.namespaces and (
            self.namespace_selector is None or not self.namespace_selector.matches(namespace_labels)
        ):
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's podAffinity and podAntiAffinity, required and preferred."""

    required: tuple[PodAffinityTerm, ...] = ()
    required_anti: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[PodAffinityTerm, ...] = ()
    preferred_anti: tuple[PodAffinityTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required or self.required_anti or self.preferred or self.preferred_anti)


def _label_key_requirements(
    raw: Mapping[str, Any], labels: Mapping[str, str], field: str, operator: str
) -> list[Requirement]:
    """matchLabelKeys (`In`) or mismatchLabelKeys (`NotIn`): the pod's own value of each
    key joins the selector; a key the pod lacks is ignored (as the API server merges
    them; merging again what the server already merged changes nothing)."""
    keys = raw.get(field) or ()
    if keys and raw.get("labelSelector") is None:
        raise ValueError(f"{field} cannot be set when labelSelector isn't set")
    return [Requirement(str(k), operator, (labels[k],)) for k in keys if k in labels]


def _parse_affinity_term(
    raw: Mapping[str, Any], namespace: str, labels: Mapping[str, str], weight: int
) -> PodAffinityTerm:
    topology_key = str(raw.get("topologyKey") or "")
    if not topology_key:
        raise ValueError("pod affinity term: topologyKey can not be empty")
    selector = parse_label_selector(raw.get("labelSelector"))
    selector = selector.with_requirements(
        _label_key_requirements(raw, labels, "matchLabelKeys", "In")
        + _label_key_requirements(raw, labels, "mismatchLabelKeys", "NotIn")
    )
    names = frozenset(str(n) for n in raw.get("namespaces") or ())
    raw_ns_selector = raw.get("namespaceSelector")
    ns_selector = parse_label_selector(raw_ns_selector) if raw_ns_selector is not None else None
    if not names and ns_selector is None:
        names = frozenset({namespace})
    return PodAffinityTerm(selector, names, ns_selector, topology_key, weight)


def _parse_terms(
    section: Mapping[str, Any], namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[PodAffinityTerm, ...], tuple[PodAffinityTerm, ...]]:
    required = tuple(
        _parse_affinity_term(term, namespace, labels, 0)
        for term in section.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
    )
    preferred = []
    for item in section.get("preferredDuringSchedulingIgnoredDuringExecution") or ():
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise ValueError(f"preferred pod affinity term: weight must be 1..100, got {weight!r}")
        preferred.append(
            _parse_affinity_term(item.get("podAffinityTerm") or {}, namespace, labels, weight)
        )
    return required, tuple(preferred)


def parse_pod_affinity(
    affinity: Mapping[str, Any] | None, namespace: str, labels: Mapping[str, str]
) -> PodAffinity | None:
    """The pod's podAffinity and podAntiAffinity; None when it has no term at all."""
    affinity = affinity or {}
    if not affinity.get("podAffinity") and not affinity.get("podAntiAffinity"):
        return None  # most pods: no term to read (parsed on every pod event)
    required, preferred = _parse_terms(affinity.get("podAffinity") or {}, namespace, labels)
    required_anti, preferred_anti = _parse_terms(
        affinity.get("podAntiAffinity") or {}, namespace, labels
    )
    result = PodAffinity(required, required_anti, preferred, preferred_anti)
    return result if result else None


WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topologySpreadConstraint with kube-scheduler's defaults applied: minDomains
    1, nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore; matchLabelKeys merged."""

    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    selector: LabelSelector
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_taints: bool = False


def _policy(raw: Mapping[str, Any], field: str, default: str) -> bool:
    value = raw.get(field) or default
    if value not in INCLUSION_POLICIES:
        raise ValueError(f"topology spread constraint: {field} must be Honor or Ignore")
    return value == "Honor"


def parse_spread_constraints(
    raw: Sequence[Mapping[str, Any]] | None, labels: Mapping[str, str]
) -> tuple[SpreadConstraint, ...]:
    result = []
    seen: set[tuple[str, object]] = set()
    for item in raw or ():
        pair = (str(item.get("topologyKey") or ""), item.get("whenUnsatisfiable"))
        if pair in seen:
            # The API server's validation refuses it too; kube-scheduler keys its counts
            # by topology key, so two such constraints would share them.
            raise ValueError(
                f"topology spread constraint: duplicate {{{pair[0]}, {pair[1]}}} "
                "(topologyKey and whenUnsatisfiable)"
            )
        seen.add(pair)
        max_skew = item.get("maxSkew")
        if not isinstance(max_skew, int) or isinstance(max_skew, bool) or max_skew < 1:
            raise ValueError(f"topology spread constraint: maxSkew must be >= 1, got {max_skew!r}")
        topology_key = str(item.get("topologyKey") or "")
        if not topology_key:
            raise ValueError("topology spread constraint: topologyKey can not be empty")
        when = item.get("whenUnsatisfiable")
        if when not in WHEN_UNSATISFIABLE:
            raise ValueError(
                "topology spread constraint: whenUnsatisfiable must be DoNotSchedule or "
                f"ScheduleAnyway, got {when!r}"
            )
        min_domains = item.get("minDomains")
        if min_domains is None:
            min_domains = 1
        elif not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
            raise ValueError(
                f"topology spread constraint: minDomains must be >= 1, got {min_domains!r}"
            )
        elif when != "DoNotSchedule":
            raise ValueError(
                "topology spread constraint: minDomains can only be used with DoNotSchedule"
            )
        selector = parse_label_selector(item.get("labelSelector")).with_requirements(
            _label_key_requirements(item, labels, "matchLabelKeys", "In")
        )
        result.append(
            SpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                hard=when == "DoNotSchedule",
                selector=selector,
                min_domains=min_domains,
                honor_node_affinity=_policy(item, "nodeAffinityPolicy", "Honor"),
                honor_taints=_policy(item, "nodeTaintsPolicy", "Ignore"),
            )
        )
    return tuple(result)


# --- node selector requirements (component-helpers nodeaffinity) ---------------------
NODE_NAME_FIELD = "metadata.name"
# Go's strconv.ParseInt(s, 10, 64) range, which kube-scheduler uses for Gt/Lt.
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def parse_label_int(text: str) -> int | None:
    """The integer a label value spells (optional sign, ASCII digits, within int64), as
    Go's ParseInt reads it; None otherwise. Stricter than int(), which would accept
    spaces, underscores and non-ASCII digits."""
    digits = text[1:] if text.startswith(("+", "-")) else text
    # More than 19 digits is beyond int64 (and int() refuses 4,300+): no need to read it.
    magnitude = small_int(digits, 19)
    if magnitude is None:
        return None
    number = -magnitude if text.startswith("-") else magnitude
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def requirement_holds(req: Requirement, node_name: str, labels: Mapping[str, str]) -> bool:
    """Whether one matchExpressions (or matchFields) requirement holds on the node named
    `node_name` with `labels`: Gt and Lt compare integers (a label that is not one never
    satisfies them); matchFields support only `metadata.name`."""
    value: str | None
    if req.field:
        if req.key != NODE_NAME_FIELD:
            return False
        value = node_name
    else:
        value = labels.get(req.key)
    operator = req.operator
    # `None in values` is False and `None not in values` True: an absent label is
    # outside every In list and satisfies every NotIn, as in Kubernetes.
    if operator == "In":
        return value in req.values
    if operator == "NotIn":
        return value not in req.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        have = parse_label_int(value)
        bound = parse_label_int(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False
