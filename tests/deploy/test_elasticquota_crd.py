"""The ElasticQuota CRD shipped in deploy/ is the API the scheduler reads and writes, and
holds scheduler-plugins' ElasticQuota (apis/scheduling/v1alpha1: spec.min, spec.max,
status.used, each a ResourceList), so a cluster with their CRD keeps every field."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from cache.quota import GPU, QUOTA_GROUP, QUOTA_PLURAL, QUOTA_VERSION, quota_from_api
from tests.deploy.render import one, rendered


def crd() -> dict[str, Any]:
    return one(rendered(), "CustomResourceDefinition", f"{QUOTA_PLURAL}.{QUOTA_GROUP}")


def quota(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = {
        "apiVersion": f"{QUOTA_GROUP}/{QUOTA_VERSION}",
        "kind": "ElasticQuota",
        "metadata": {"name": "team-a", "namespace": "team-a"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_the_crd_is_the_api_the_scheduler_reads() -> None:
    found = crd()
    assert found["spec"]["names"]["kind"] == "ElasticQuota"
    assert found["spec"]["scope"] == "Namespaced"
    assert {"eq", "eqs"} <= set(found["spec"]["names"]["shortNames"])
    (version,) = found["spec"]["versions"]
    assert version["name"] == QUOTA_VERSION and version["subresources"] == {"status": {}}


def test_a_quota_as_users_write_it_is_valid_and_read_as_written() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = quota(
        {"min": {"nvidia.com/gpu": 8, "cpu": "32"}, "max": {"nvidia.com/gpu": 16, "memory": "1Ti"}},
        {"used": {"nvidia.com/gpu": "3", "cpu": "1500m", "memory": "0"}},
    )
    jsonschema.validate(obj, schema)
    read = quota_from_api(obj)
    assert read.min == {GPU: 8000, "cpu": 32000} and read.max[GPU] == 16000


@pytest.mark.parametrize("value", ["lots", "1.5.2", [], {"a": 1}])
def test_a_value_that_is_not_a_quantity_is_refused(value: object) -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(quota({"max": {"nvidia.com/gpu": value}}), schema)
