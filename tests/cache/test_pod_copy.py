"""cache.pod_copy.copied against dataclasses.replace, the slow path it stands for."""

from __future__ import annotations

import dataclasses
from typing import Any

from cache.pod import PodInfo, pod_from_api
from cache.pod_copy import copied


def test_every_field_is_carried_to_its_own_field() -> None:
    """A distinct object in every field: a copy that swapped or dropped any field (a
    field added to PodInfo out of order, say) would not carry each to its place."""
    values: dict[str, Any] = {field.name: object() for field in dataclasses.fields(PodInfo)}
    pod = PodInfo(**values)
    copy = copied(pod)
    assert copy is not pod
    for name, value in values.items():
        assert getattr(copy, name) is value, name


def test_a_copy_equals_replace_and_is_its_own_record() -> None:
    obj = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}},
        "spec": {
            "schedulerName": "gang-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
    }
    pod = pod_from_api(obj)
    copy = copied(pod)
    assert copy == dataclasses.replace(pod) == pod
    copy.node_name, copy.phase = "node-a", "Running"
    assert (pod.node_name, pod.phase) == ("", "Pending")
    assert copy == dataclasses.replace(pod, node_name="node-a", phase="Running")
