"""A tenant's own `volume.kubernetes.io/selected-node` on its claim: honoured as
kube-scheduler honours it (the claim is provisioned there or nowhere), but only where
the claim's class may provision; it steers nothing the class forbids."""

from __future__ import annotations

from cache.volumes import SELECTED_NODE_ANNOTATION
from policies.filters.volume_binding import BIND_CONFLICT
from tests.factories import pod_obj
from tests.policies.test_volume_binding import LOCAL_WFFC, ZONAL, cluster, feasible
from tests.volume_objects import pv_obj, pvc_obj, with_claims


def _pinned(node: str, storage_class: str) -> dict[str, object]:
    return pvc_obj(
        "data", storage_class=storage_class, annotations={SELECTED_NODE_ANNOTATION: node}
    )


def test_a_selected_node_outside_the_classs_allowed_topologies_fits_nowhere() -> None:
    pod = with_claims(pod_obj("p"), "data")
    # ZONAL provisions in zone b only; the tenant names a1 (zone a).
    volumes = cluster(ZONAL, _pinned("a1", "zonal"))
    assert feasible(pod, volumes) == {"a1": BIND_CONFLICT, "a2": BIND_CONFLICT, "b1": BIND_CONFLICT}
    # Inside the allowed zone the selection is followed.
    volumes = cluster(ZONAL, _pinned("b1", "zonal"))
    assert feasible(pod, volumes) == {"a1": BIND_CONFLICT, "a2": BIND_CONFLICT, "b1": None}


def test_a_selected_node_on_a_claim_of_a_class_without_provisioner_fits_nowhere() -> None:
    """No provisioner will ever act on the annotation: binding the pod there would leave
    it in ContainerCreating for good (kube-scheduler refuses it the same way)."""
    pod = with_claims(pod_obj("p"), "data")
    volumes = cluster(LOCAL_WFFC, _pinned("a1", "local"), pv_obj("disk-a2", node="a2"))
    assert feasible(pod, volumes) == {"a1": BIND_CONFLICT, "a2": BIND_CONFLICT, "b1": BIND_CONFLICT}
