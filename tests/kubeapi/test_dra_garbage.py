"""Random garbage inside resource.k8s.io/v1 objects, sent to the emulator over HTTP: every
body is answered 201/200 (valid after all), 400 (does not decode) or 422 (invalid), never
a server error, and the emulator keeps serving."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.dra_objects import claim_obj, device_class_obj, slice_obj, template_obj
from tests.kubeapi import RESOURCE_CLAIMS, KubeApiEmulator
from tests.kubeapi.dra import schema

Json = dict[str, Any]
GROUP = "/apis/resource.k8s.io/v1"

_FIELD_NAMES = sorted(
    {
        "spec", "status", "devices", "requests", "exactly", "firstAvailable", "name", "count",
        "allocationMode", "deviceClassName", "selectors", "cel", "expression", "tolerations",
        "constraints", "matchAttribute", "config", "opaque", "driver", "parameters", "pool",
        "generation", "resourceSliceCount", "nodeName", "nodeSelector", "nodeSelectorTerms",
        "matchFields", "matchExpressions", "allNodes", "perDeviceNodeSelection", "attributes",
        "capacity", "value", "int", "bool", "string", "version", "taints", "effect",
        "sharedCounters", "counters", "consumesCounters", "counterSet", "allocation",
        "results", "reservedFor", "uid", "resource", "shareID", "requestPolicy", "validRange",
        "bindingConditions", "extendedResourceName", "metadata", "labels",
    }
)  # fmt: skip
_JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "All", "ExactCount", "Exists", "NoSchedule", "1Gi", "In"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(_FIELD_NAMES) | st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=16,
)
_BASES = {
    "resourceslices": slice_obj(),
    "deviceclasses": device_class_obj(),
    "namespaces/ml/resourceclaims": claim_obj(),
    "namespaces/ml/resourceclaimtemplates": template_obj(),
}


@st.composite
def _corrupted(draw: st.DrawFn) -> tuple[str, Json]:
    """A valid object of some kind with one node inside its spec replaced by junk."""
    path = draw(st.sampled_from(sorted(_BASES)))
    obj = copy.deepcopy(_BASES[path])
    obj["metadata"] = {"generateName": "fuzz-"}
    parent: Any = obj
    key: Any = "spec"
    while isinstance(parent[key], dict | list) and parent[key] and draw(st.booleans()):
        parent = parent[key]
        key = draw(
            st.sampled_from(sorted(parent) if isinstance(parent, dict) else range(len(parent)))
        )
    parent[key] = draw(_JUNK)
    return path, obj


async def _send(session: aiohttp.ClientSession, base: str, path: str, body: Any) -> int:
    data = json.dumps(body)  # NaN and Infinity go out as Python writes them
    headers = {"Content-Type": "application/json"}
    async with session.post(f"{base}{GROUP}/{path}", data=data, headers=headers) as answer:
        await answer.read()
        return answer.status


async def _status_garbage(session: aiohttp.ClientSession, base: str, junk: Any) -> int:
    url = f"{base}{GROUP}/namespaces/ml/resourceclaims/train-0/status"
    headers = {"Content-Type": "application/merge-patch+json"}
    async with session.patch(url, data=json.dumps({"status": junk}), headers=headers) as answer:
        await answer.read()
        return answer.status


async def _fuzz(bodies: list[tuple[str, Json]], statuses: list[Any]) -> list[int]:
    async with KubeApiEmulator() as api, aiohttp.ClientSession() as session:
        api.put(RESOURCE_CLAIMS, claim_obj())
        codes = [await _send(session, api.base_url, path, body) for path, body in bodies]
        codes += [await _status_garbage(session, api.base_url, junk) for junk in statuses]
        async with session.get(f"{api.base_url}{GROUP}/resourceslices") as answer:
            assert answer.status == 200  # the emulator still serves
        return codes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_corrupted(), min_size=1, max_size=6), st.lists(_JUNK, max_size=3))
def test_garbage_in_dra_objects_is_refused_never_a_server_error(
    bodies: list[tuple[str, Json]], statuses: list[Any]
) -> None:
    codes = asyncio.run(_fuzz(bodies, statuses))
    assert set(codes) <= {200, 201, 400, 422}, codes


# Objects of the right JSON types but random content reach every validator (garbage of the
# wrong types mostly stops at decoding).
_WORDS = st.sampled_from(
    [
        *("", "a", "gpu", "gpu-0", "GPU_0", "gpu.example.com", "n1", "a/b", "a/b/c", "x" * 70),
        *("All", "ExactCount", "Equal", "Exists", "NoSchedule", "In", "metadata.name", "1.2.3"),
    ]
)


def _from_shape(shape: schema.Shape, depth: int = 0) -> st.SearchStrategy[Any]:
    if isinstance(shape, schema.Struct):
        fields = {k: _from_shape(v, depth + 1) for k, v in shape.fields.items()}
        return st.fixed_dictionaries({}, optional=fields) if depth < 8 else st.just({})
    if isinstance(shape, schema.ListOf):
        return st.lists(_from_shape(shape.item, depth + 1), max_size=3)
    if isinstance(shape, schema.MapOf):
        return st.dictionaries(_WORDS, _from_shape(shape.item, depth + 1), max_size=3)
    if shape is schema.STRING:
        return _WORDS | st.text(max_size=8)
    if shape is schema.INT64:
        return st.integers(min_value=-3, max_value=300)
    if shape is schema.BOOL:
        return st.booleans()
    if shape is schema.QUANTITY_SHAPE:
        return st.sampled_from(["0", "1", "1Gi", "80Gi", "500m", "-1", "1e3"])
    if shape is schema.TIME:
        return st.just("2026-01-01T00:00:00Z")
    return st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)


_SHAPED = st.sampled_from(
    [
        ("resourceslices", "spec", schema.SLICE_SPEC),
        ("deviceclasses", "spec", schema.CLASS_SPEC),
        ("namespaces/ml/resourceclaims", "spec", schema.CLAIM_SPEC),
        ("namespaces/ml/resourceclaimtemplates", "spec", schema.TEMPLATE_SPEC),
    ]
).flatmap(lambda k: st.tuples(st.just(k[0]), _from_shape(k[2]).map(lambda v: {k[1]: v})))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_SHAPED, min_size=1, max_size=6),
    st.lists(_from_shape(schema.CLAIM_STATUS), max_size=3),
)
def test_well_typed_random_dra_objects_are_validated_never_a_server_error(
    specs: list[tuple[str, Json]], statuses: list[Any]
) -> None:
    bodies = [(path, {"metadata": {"generateName": "fuzz-"}, **spec}) for path, spec in specs]
    codes = asyncio.run(_fuzz(bodies, statuses))
    assert set(codes) <= {200, 201, 400, 422}, codes
