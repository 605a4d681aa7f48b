"""Which waiting gangs a pod leaving could help through inter-pod terms.

A deleted pod frees room on its node; SchedulingCore._helped_by_leaving retries the
gangs that room could take by resources. Inter-pod terms reach further: a pod counted
by a gang's required anti-affinity or hard spread constraint kept the gang out of its
whole topology domain (a zone), not only its node, and so did a pod whose own required
anti-affinity selected the gang's members (symmetry). When it leaves, exactly those
gangs may fit anywhere in that domain; a gang whose terms never selected it gains
nothing there (its terms still see the same pods), so it is not retried for it.

Required pod affinity is not here: a pod leaving only removes what an affinity term
asks for (kube-scheduler's InterPodAffinity queueing hint skips a deletion for it as
well). Preferred terms and ScheduleAnyway spread change scores, never whether a gang
fits. The tests are those kube-scheduler's filters use: namespace (or namespace
selector) and label selector against the leaving pod's labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cache.pod import PodInfo


def lifts_a_term(
    gone: PodInfo, member: PodInfo, namespaces: Mapping[str, Mapping[str, str]]
) -> bool:
    """Whether `gone` leaving could lift a required anti-affinity or hard spread
    constraint that kept `member` out of gone's topology domains."""
    terms = member.pod_affinity
    if terms is not None and terms.required_anti:
        labels = namespaces.get(gone.namespace, {})
        if any(t.matches(gone.namespace, gone.labels, labels) for t in terms.required_anti):
            return True
    # A spread constraint counts the pods of the incoming pod's own namespace.
    if gone.namespace == member.namespace and any(
        c.hard and c.selector.matches(gone.labels) for c in member.spread
    ):
        return True
    own = gone.pod_affinity
    if own is not None and own.required_anti:
        labels = namespaces.get(member.namespace, {})
        return any(t.matches(member.namespace, member.labels, labels) for t in own.required_anti)
    return False


def lifts_a_term_of_any(
    gone: PodInfo, members: Iterable[PodInfo], namespaces: Mapping[str, Mapping[str, str]]
) -> bool:
    """`lifts_a_term` for some member of a gang."""
    return any(lifts_a_term(gone, member, namespaces) for member in members)


def has_required_anti_affinity(pod: PodInfo) -> bool:
    """Whether a pod's own required anti-affinity keeps other pods out of its domains."""
    return pod.pod_affinity is not None and bool(pod.pod_affinity.required_anti)
