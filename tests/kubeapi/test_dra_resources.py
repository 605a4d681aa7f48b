"""The emulator's resource.k8s.io/v1 (ResourceSlice, DeviceClass, ResourceClaim with its
status, ResourceClaimTemplate) through the real kubernetes_asyncio client over HTTP: the
happy paths a DRA driver and a scheduler take, and each refusal of the 1.36 API server
(pkg/apis/resource/validation, pkg/registry/resource/*), with its code and message."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.dra_objects import (
    DRIVER,
    GPU_CLASS,
    allocation,
    claim_obj,
    device_class_obj,
    gpu_device,
    pod_reference,
    slice_obj,
    template_obj,
)
from tests.kubeapi import RESOURCE_CLAIMS, KubeApiEmulator, api_client
from tests.kubeapi.rbac import Policy, RbacAuthorizer

Json = dict[str, Any]
pytestmark = pytest.mark.asyncio
GROUP = "/apis/resource.k8s.io/v1"


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator() as emulator:
        yield emulator


@pytest_asyncio.fixture
async def dra(api: KubeApiEmulator) -> AsyncIterator[client.ResourceV1Api]:
    async with await api_client(api.base_url) as http:
        yield client.ResourceV1Api(http)


async def refusal(call: Awaitable[Any]) -> tuple[int, Json]:
    with pytest.raises(ApiException) as refused:
        await call
    return refused.value.status, json.loads(refused.value.body)


def edited(obj: Json, edit: Callable[[Json], None]) -> Json:
    copied = copy.deepcopy(obj)
    edit(copied)
    return copied


async def allocated_claim(dra: client.ResourceV1Api) -> Any:
    """A claim with its allocation and one reservation written through status."""
    created = await dra.create_namespaced_resource_claim("ml", claim_obj())
    status = {"allocation": allocation(), "reservedFor": [pod_reference()]}
    body = {"metadata": {"resourceVersion": created.metadata.resource_version}, "status": status}
    return await dra.patch_namespaced_resource_claim_status("train-0", "ml", body)


# ------------------------------------------------------------------------- happy paths
async def test_a_driver_publishes_a_class_and_a_slice_and_a_claim_is_allocated_and_reserved(
    api: KubeApiEmulator, dra: client.ResourceV1Api
) -> None:
    made = await dra.create_device_class(device_class_obj())
    assert made.metadata.generation == 1
    published = await dra.create_resource_slice(slice_obj("n1", gpus=2))
    assert [d.name for d in published.spec.devices] == ["gpu-0", "gpu-1"]
    assert published.metadata.generation == 1
    await dra.create_namespaced_resource_claim_template("ml", template_obj())
    created = await dra.create_namespaced_resource_claim("ml", claim_obj())
    # v1 defaulting: ExactCount.
    assert created.spec.devices.requests[0].exactly.allocation_mode == "ExactCount"
    assert created.status is None or created.status.allocation is None
    status = {"allocation": allocation(), "reservedFor": [pod_reference()]}
    body = {"metadata": {"resourceVersion": created.metadata.resource_version}, "status": status}
    written = await dra.patch_namespaced_resource_claim_status("train-0", "ml", body)
    assert written.status.allocation.devices.results[0].device == "gpu-0"
    assert written.status.reserved_for[0].name == "train-0-worker"
    assert int(written.metadata.resource_version) > int(created.metadata.resource_version)
    stored = api.get(RESOURCE_CLAIMS, "ml", "train-0")
    assert stored is not None and stored["status"]["allocation"] == allocation()
    # Deallocation: both removed in one status write.
    cleared = await dra.replace_namespaced_resource_claim_status(
        "train-0", "ml", {**claim_obj(), "metadata": written.metadata.to_dict(), "status": {}}
    )
    assert cleared.status is None or cleared.status.allocation is None


async def test_watch_from_a_list_sees_slices_and_claims_as_they_are_written(
    dra: client.ResourceV1Api,
) -> None:
    await dra.create_device_class(device_class_obj())  # lists then start after version 0
    slices = await dra.list_resource_slice()
    claims = await dra.list_resource_claim_for_all_namespaces()
    await dra.create_resource_slice(slice_obj("n1"))
    await dra.patch_resource_slice("n1-gpu.example.com", {"spec": {"devices": [gpu_device(0)]}})
    await allocated_claim(dra)
    seen_slices = await _first_events(
        dra.list_resource_slice, slices.metadata.resource_version, count=2
    )
    assert [(t, o.metadata.generation, len(o.spec.devices)) for t, o in seen_slices] == [
        ("ADDED", 1, 2),
        ("MODIFIED", 2, 1),  # a spec change bumps the generation
    ]
    seen_claims = await _first_events(
        dra.list_resource_claim_for_all_namespaces,
        claims.metadata.resource_version,
        count=2,
        # The client names this model ResourceV1ResourceClaim (core/v1 has its own
        # ResourceClaim), which its watch cannot guess from the list's type.
        return_type="ResourceV1ResourceClaim",
    )
    assert [t for t, _ in seen_claims] == ["ADDED", "MODIFIED"]
    assert seen_claims[1][1].status.allocation.devices.results[0].pool == "n1"


async def _first_events(
    lister: Callable[..., Any], version: str, count: int, return_type: str | None = None
) -> list[tuple[str, Any]]:
    stream = watch.Watch(return_type=return_type)
    events: list[tuple[str, Any]] = []
    # The limit only keeps a broken emulator from hanging the suite; the events that
    # end the loop are already in the watch history when it starts.
    async with asyncio.timeout(60), stream.stream(lister, resource_version=version) as events_in:
        async for event in events_in:
            events.append((event["type"], event["object"]))
            if len(events) == count:
                break
    return events


async def test_slices_select_by_node_name_and_driver(dra: client.ResourceV1Api) -> None:
    for node in ("n1", "n2"):
        await dra.create_resource_slice(slice_obj(node))
    mine = await dra.list_resource_slice(field_selector="spec.nodeName=n2")
    assert [s.spec.node_name for s in mine.items] == ["n2"]
    by_driver = await dra.list_resource_slice(field_selector=f"spec.driver={DRIVER}")
    assert len(by_driver.items) == 2


async def test_discovery_lists_the_group_with_the_claims_status_subresource(
    api: KubeApiEmulator,
) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{api.base_url}/apis") as answer:
            groups = [g["name"] for g in (await answer.json())["groups"]]
        async with session.get(f"{api.base_url}{GROUP}") as answer:
            listed = {r["name"]: r["namespaced"] for r in (await answer.json())["resources"]}
    assert "resource.k8s.io" in groups
    assert listed == {
        "resourceslices": False,
        "deviceclasses": False,
        "resourceclaims": True,
        "resourceclaims/status": True,
        "resourceclaimtemplates": True,
    }


# ------------------------------------------------------------ claim strategy rules
async def test_a_claims_spec_is_immutable(dra: client.ResourceV1Api) -> None:
    created = await dra.create_namespaced_resource_claim("ml", claim_obj())
    changed = edited(
        claim_obj(), lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(count=2)
    )
    changed["metadata"]["resourceVersion"] = created.metadata.resource_version
    code, body = await refusal(dra.replace_namespaced_resource_claim("train-0", "ml", changed))
    assert (code, body["reason"]) == (422, "Invalid")
    assert body["message"].startswith('ResourceClaim.resource.k8s.io "train-0" is invalid: spec:')
    assert body["message"].endswith("field is immutable")
    # Unchanged after defaulting (count 1 sent or left out): no error, no new version.
    same = await dra.patch_namespaced_resource_claim(
        "train-0", "ml", {"metadata": {"labels": {"team": "a"}}}
    )
    assert same.metadata.labels == {"team": "a"}
    # A template's spec is immutable too.
    await dra.create_namespaced_resource_claim_template("ml", template_obj())
    code, body = await refusal(
        dra.patch_namespaced_resource_claim_template(
            "one-gpu", "ml", {"spec": {"metadata": {"labels": {"x": "y"}}}}
        )
    )
    assert code == 422 and "field is immutable" in body["message"]


async def test_status_is_written_only_through_the_status_subresource(
    api: KubeApiEmulator, dra: client.ResourceV1Api
) -> None:
    # Status in a create is dropped.
    sent = {**claim_obj(), "status": {"allocation": allocation()}}
    created = await dra.create_namespaced_resource_claim("ml", sent)
    assert created.status is None or created.status.allocation is None
    # Status through the main resource is ignored.
    kept = await dra.patch_namespaced_resource_claim(
        "train-0", "ml", {"status": {"allocation": allocation()}}
    )
    assert kept.status is None or kept.status.allocation is None
    # Spec and labels through the status subresource are ignored.
    body = {
        "metadata": {"labels": {"sneaky": "yes"}},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": allocation()},
    }
    written = await dra.patch_namespaced_resource_claim_status("train-0", "ml", body)
    assert written.status.allocation is not None
    assert written.metadata.labels is None
    stored = api.get(RESOURCE_CLAIMS, "ml", "train-0")
    assert stored is not None and stored["spec"] == claim_obj()["spec"] | {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": GPU_CLASS,
                        "count": 1,
                        "allocationMode": "ExactCount",
                    },
                }
            ]
        }
    }


async def test_a_status_write_with_a_stale_resource_version_conflicts(
    dra: client.ResourceV1Api,
) -> None:
    created = await dra.create_namespaced_resource_claim("ml", claim_obj())
    stale = created.metadata.resource_version
    await dra.patch_namespaced_resource_claim("train-0", "ml", {"metadata": {"labels": {"a": "b"}}})
    body = {"metadata": {"resourceVersion": stale}, "status": {"allocation": allocation()}}
    code, answer = await refusal(dra.patch_namespaced_resource_claim_status("train-0", "ml", body))
    assert (code, answer["reason"]) == (409, "Conflict")
    assert "the object has been modified" in answer["message"]
    # The same through PUT.
    whole = {**claim_obj(), "status": {"allocation": allocation()}}
    whole["metadata"]["resourceVersion"] = stale
    code, _ = await refusal(dra.replace_namespaced_resource_claim_status("train-0", "ml", whole))
    assert code == 409


async def _status_refusal(dra: client.ResourceV1Api, status: Json) -> tuple[int, Json]:
    return await refusal(
        dra.patch_namespaced_resource_claim_status("train-0", "ml", {"status": status})
    )


async def test_reserved_for_holds_at_most_256_consumers(dra: client.ResourceV1Api) -> None:
    await dra.create_namespaced_resource_claim("ml", claim_obj())
    many = [pod_reference(f"p{i}", f"uid-{i}") for i in range(257)]
    code, body = await _status_refusal(dra, {"allocation": allocation(), "reservedFor": many})
    assert code == 422
    assert "status.reservedFor: Too many: 257: must have at most 256 items" in body["message"]
    assert body["details"]["causes"][0]["reason"] == "FieldValueTooMany"
    written = await dra.patch_namespaced_resource_claim_status(
        "train-0", "ml", {"status": {"allocation": allocation(), "reservedFor": many[:256]}}
    )
    assert len(written.status.reserved_for) == 256


async def test_reserved_for_needs_an_allocation_and_complete_unique_references(
    dra: client.ResourceV1Api,
) -> None:
    await dra.create_namespaced_resource_claim("ml", claim_obj())
    code, body = await _status_refusal(dra, {"reservedFor": [pod_reference()]})
    assert code == 422
    assert (
        "status.reservedFor: Forbidden: may not be specified when `allocated` is not set"
        in body["message"]
    )
    twice = [pod_reference("a", "same"), pod_reference("b", "same"), {"resource": "pods"}]
    code, body = await _status_refusal(dra, {"allocation": allocation(), "reservedFor": twice})
    assert code == 422
    assert 'status.reservedFor[1]: Duplicate value: "same"' in body["message"]
    assert "status.reservedFor[2].name: Required value" in body["message"]


async def test_an_allocation_cannot_change_once_set_but_can_be_removed(
    dra: client.ResourceV1Api,
) -> None:
    await allocated_claim(dra)
    code, body = await _status_refusal(
        dra, {"allocation": allocation(devices=("gpu-1",)), "reservedFor": [pod_reference()]}
    )
    assert (code, body["reason"]) == (422, "Invalid")
    assert "status.allocation: Invalid value:" in body["message"]
    assert body["message"].endswith("field is immutable")
    # Removing the reservation and the allocation together deallocates.
    merge = {"status": {"allocation": None, "reservedFor": None}}
    cleared = await dra.patch_namespaced_resource_claim_status("train-0", "ml", merge)
    assert cleared.status is None or cleared.status.allocation is None


async def test_an_allocation_names_requests_of_the_claim_and_real_devices(
    dra: client.ResourceV1Api,
) -> None:
    await dra.create_namespaced_resource_claim("ml", claim_obj())
    wrong = allocation()
    wrong["devices"]["results"][0].update(request="tpu", pool="", device="GPU_0")
    code, body = await _status_refusal(dra, {"allocation": wrong})
    assert code == 422
    message = body["message"]
    assert (
        'status.allocation.devices.results[0].request: Invalid value: "tpu": must be the name '
        "of a request in the claim" in message
    )
    assert "status.allocation.devices.results[0].pool: Required value" in message
    assert 'status.allocation.devices.results[0].device: Invalid value: "GPU_0"' in message
    too_many = allocation(devices=tuple(f"gpu-{i}" for i in range(33)))
    code, body = await _status_refusal(dra, {"allocation": too_many})
    assert (
        "status.allocation.devices.results: Too many: 33: must have at most 32 items"
        in (body["message"])
    )


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"nodeSelectorTerms": []}, "nodeSelectorTerms: Required value"),
        (
            {"nodeSelectorTerms": [{"matchFields": [{"key": "spec.nodeName", "operator": "In"}]}]},
            'matchFields[0].key: Invalid value: "spec.nodeName": not a valid field selector key',
        ),
        (
            {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}
                ]
            },
            'matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator',
        ),
    ],
    ids=["no-terms", "field-key", "operator"],
)
async def test_an_allocations_node_selector_has_the_shape_of_a_node_selector(
    dra: client.ResourceV1Api, selector: Json, expected: str
) -> None:
    await dra.create_namespaced_resource_claim("ml", claim_obj())
    code, body = await _status_refusal(
        dra, {"allocation": {**allocation(), "nodeSelector": selector}}
    )
    assert code == 422 and "status.allocation.nodeSelector." in body["message"]
    assert expected in body["message"]


# -------------------------------------------------------------- claim spec fields
def _request(**exactly: Any) -> Json:
    return {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, **exactly}}


def _claim_with(**devices: Any) -> Json:
    return edited(claim_obj(), lambda c: c["spec"]["devices"].update(devices))


REQ = "spec.devices.requests[0]"
CLAIM_REFUSALS: list[tuple[str, Json, str]] = [
    (
        "request-name",
        _claim_with(requests=[{**_request(), "name": "GPU_0"}]),
        f'{REQ}.name: Invalid value: "GPU_0": a lowercase RFC 1123 label',
    ),
    (
        "request-names-unique",
        _claim_with(requests=[_request(), _request()]),
        'spec.devices.requests[1]: Duplicate value: "gpu"',
    ),
    (
        "neither-exactly-nor-first-available",
        _claim_with(requests=[{"name": "gpu"}]),
        f"{REQ}: Required value: exactly one of `exactly` or `firstAvailable` is required",
    ),
    (
        "both-exactly-and-first-available",
        _claim_with(
            requests=[
                {**_request(), "firstAvailable": [{"name": "a", "deviceClassName": GPU_CLASS}]}
            ]
        ),
        f"{REQ}: Invalid value: null: exactly one of `exactly` or `firstAvailable` is required,"
        " but multiple fields are set",
    ),
    (
        "all-with-count",
        _claim_with(requests=[_request(allocationMode="All", count=2)]),
        f"{REQ}.exactly.count: Invalid value: 2: must not be specified when allocationMode is "
        "'All'",
    ),
    (
        "exact-count-negative",
        _claim_with(requests=[_request(count=-1)]),
        f"{REQ}.exactly.count: Invalid value: -1: must be greater than zero",
    ),
    (
        "allocation-mode-unknown",
        _claim_with(requests=[_request(allocationMode="Most")]),
        f'{REQ}.exactly.allocationMode: Unsupported value: "Most": supported values: "All", '
        '"ExactCount"',
    ),
    (
        "device-class-required",
        _claim_with(requests=[{"name": "gpu", "exactly": {}}]),
        f"{REQ}.exactly.deviceClassName: Required value",
    ),
    (
        "subrequest-device-class-required",
        _claim_with(requests=[{"name": "gpu", "firstAvailable": [{"name": "big"}]}]),
        f"{REQ}.firstAvailable[0].deviceClassName: Required value",
    ),
    (
        "cel-too-long",
        _claim_with(requests=[_request(selectors=[{"cel": {"expression": "1" * 10241}}])]),
        f"{REQ}.exactly.selectors[0].cel.expression: Too long: may not be more than 10240 bytes",
    ),
    (
        "cel-syntax",
        _claim_with(requests=[_request(selectors=[{"cel": {"expression": "device.driver =="}}])]),
        f'{REQ}.exactly.selectors[0].cel.expression: Invalid value: "device.driver ==": '
        "compilation failed:",
    ),
    (
        "cel-required",
        _claim_with(requests=[_request(selectors=[{}])]),
        f"{REQ}.exactly.selectors[0].cel: Required value",
    ),
    (
        "match-attribute-fully-qualified",
        _claim_with(requests=[_request()], constraints=[{"matchAttribute": "model"}]),
        'spec.devices.constraints[0].matchAttribute: Invalid value: "model": a fully '
        "qualified name must be a domain and a name separated by a slash",
    ),
    (
        "constraint-requests-exist",
        _claim_with(
            requests=[_request()],
            constraints=[{"requests": ["gpu", "nic"], "matchAttribute": f"{DRIVER}/numa"}],
        ),
        'spec.devices.constraints[0].requests[1]: Invalid value: "nic": must be the name of a '
        "request in the claim",
    ),
    (
        "toleration-operator",
        _claim_with(requests=[_request(tolerations=[{"key": "k", "operator": "Near"}])]),
        f'{REQ}.exactly.tolerations[0].operator: Unsupported value: "Near": supported values: '
        '"Equal", "Exists"',
    ),
    (
        "toleration-exists-with-value",
        _claim_with(
            requests=[_request(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}])]
        ),
        f'{REQ}.exactly.tolerations[0].value: Invalid value: "v": must be empty for operator '
        "`Exists`",
    ),
    (
        "toleration-effect",
        _claim_with(requests=[_request(tolerations=[{"key": "k", "effect": "Evict"}])]),
        f'{REQ}.exactly.tolerations[0].effect: Unsupported value: "Evict"',
    ),
    (
        "config-opaque-required",
        _claim_with(requests=[_request()], config=[{"requests": ["gpu"]}]),
        "spec.devices.config[0].opaque: Required value",
    ),
    (
        "config-parameters-object",
        _claim_with(
            requests=[_request()],
            config=[{"opaque": {"driver": DRIVER, "parameters": [1, 2]}}],
        ),
        'spec.devices.config[0].opaque.parameters: Invalid value: "<value omitted>": must be a '
        "valid JSON object",
    ),
    (
        "config-driver",
        _claim_with(
            requests=[_request()], config=[{"opaque": {"driver": "", "parameters": {"a": 1}}}]
        ),
        "spec.devices.config[0].opaque.driver: Required value",
    ),
    (
        "requests-at-most-32",
        _claim_with(requests=[{**_request(), "name": f"r{i}"} for i in range(33)]),
        "spec.devices.requests: Too many: 33: must have at most 32 items",
    ),
    (
        "subrequests-at-most-8",
        _claim_with(
            requests=[
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": f"s{i}", "deviceClassName": GPU_CLASS} for i in range(9)
                    ],
                }
            ]
        ),
        f"{REQ}.firstAvailable: Too many: 9: must have at most 8 items",
    ),
    (
        "selectors-at-most-32",
        _claim_with(requests=[_request(selectors=[{"cel": {"expression": "true"}}] * 33)]),
        f"{REQ}.exactly.selectors: Too many: 33: must have at most 32 items",
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in CLAIM_REFUSALS], ids=[c[0] for c in CLAIM_REFUSALS]
)
async def test_a_claim_with_an_invalid_field_is_refused(
    dra: client.ResourceV1Api, body: Json, expected: str
) -> None:
    code, answer = await refusal(dra.create_namespaced_resource_claim("ml", body))
    assert (code, answer["reason"]) == (422, "Invalid")
    assert answer["message"].startswith('ResourceClaim.resource.k8s.io "train-0" is invalid:')
    assert expected in answer["message"]
    # The same spec in a template is refused at spec.spec.
    template = {**template_obj(), "spec": {"spec": body["spec"]}}
    code, answer = await refusal(dra.create_namespaced_resource_claim_template("ml", template))
    assert code == 422
    assert expected.replace("spec.devices", "spec.spec.devices") in answer["message"]


async def test_a_claim_using_prioritized_lists_constraints_and_config_is_accepted(
    dra: client.ResourceV1Api,
) -> None:
    body = _claim_with(
        requests=[
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": GPU_CLASS, "count": 2},
                    {"name": "small", "deviceClassName": GPU_CLASS, "allocationMode": "All"},
                ],
            },
            _request(tolerations=[{"key": "maintenance", "operator": "Exists"}]),
        ]
    )
    body["spec"]["devices"]["requests"][1]["name"] = "nic"
    body["spec"]["devices"]["constraints"] = [
        {"requests": ["gpu/big", "nic"], "matchAttribute": f"{DRIVER}/numa"}
    ]
    body["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"sharing": "mps"}}}
    ]
    created = await dra.create_namespaced_resource_claim("ml", body)
    first = created.spec.devices.requests[0].first_available
    assert [(s.allocation_mode, s.count) for s in first] == [("ExactCount", 2), ("All", None)]
    toleration = created.spec.devices.requests[1].exactly.tolerations[0]
    assert toleration.operator == "Exists"


async def test_a_body_of_the_wrong_json_types_is_a_bad_request(dra: client.ResourceV1Api) -> None:
    body = _claim_with(requests=[_request(count="two")])
    code, answer = await refusal(dra.create_namespaced_resource_claim("ml", body))
    assert (code, answer["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal string into Go struct field" in answer["message"]
    assert "spec.devices.requests.exactly.count of type int64" in answer["message"]
    code, _ = await refusal(dra.create_resource_slice(edited(slice_obj(), _devices_not_a_list)))
    assert code == 400


def _devices_not_a_list(obj: Json) -> None:
    obj["spec"]["devices"] = {"gpu-0": {}}


# ---------------------------------------------------------------- ResourceSlice
def _slice_with(**spec: Any) -> Json:
    return edited(slice_obj(), lambda s: s["spec"].update(spec))


def _device_with(**fields: Any) -> Json:
    return _slice_with(devices=[{**gpu_device(0), **fields}])


SLICE_REFUSALS: list[tuple[str, Json, str]] = [
    ("driver-required", _slice_with(driver=""), "spec.driver: Required value"),
    (
        "driver-name",
        _slice_with(driver="gpu_example"),
        'spec.driver: Invalid value: "gpu_example": a lowercase RFC 1123 subdomain',
    ),
    (
        "pool-name",
        _slice_with(pool={"name": "", "generation": 0, "resourceSliceCount": 1}),
        "spec.pool.name: Required value",
    ),
    (
        "pool-slice-count",
        _slice_with(pool={"name": "n1", "generation": 0, "resourceSliceCount": 0}),
        "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
    ),
    (
        "pool-generation",
        _slice_with(pool={"name": "n1", "generation": -1, "resourceSliceCount": 1}),
        "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero",
    ),
    (
        "no-placement",
        edited(slice_obj(), lambda s: s["spec"].pop("nodeName")),
        "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
        "`perDeviceNodeSelection` is required",
    ),
    (
        "two-placements",
        _slice_with(allNodes=True),
        'spec: Invalid value: "{`nodeName`, `allNodes`}": exactly one of `nodeName`, '
        "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields "
        "are set",
    ),
    (
        "all-nodes-false",
        _slice_with(allNodes=False),
        "spec.allNodes: Invalid value: false: must be either unset or set to true",
    ),
    (
        "node-selector-one-term",
        edited(
            slice_obj(),
            lambda s: s["spec"].update(
                nodeName=None,
                nodeSelector={
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                        {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
                    ]
                },
            ),
        ),
        "spec.nodeSelector.nodeSelectorTerms: Invalid value:",
    ),
    (
        "device-names-unique",
        _slice_with(devices=[gpu_device(0), gpu_device(0)]),
        'spec.devices[1]: Duplicate value: "gpu-0"',
    ),
    (
        "device-name",
        _device_with(name="GPU 0"),
        'spec.devices[0].name: Invalid value: "GPU 0"',
    ),
    (
        "attribute-two-values",
        _device_with(attributes={"model": {"string": "H100", "int": 1}}),
        "spec.devices[0].attributes[model]: Invalid value: ",
    ),
    (
        "attribute-no-value",
        _device_with(attributes={"model": {}}),
        'spec.devices[0].attributes[model]: Invalid value: "": exactly one value must be specified',
    ),
    (
        "list-attributes-are-dropped-while-their-gate-is-off",
        _device_with(attributes={"cores": {"ints": [1, 2]}}),
        'spec.devices[0].attributes[cores]: Invalid value: "": exactly one value must be specified',
    ),
    (
        "attribute-name",
        _device_with(attributes={"gpu-model": {"string": "H100"}}),
        'spec.devices[0].attributes: Invalid value: "gpu-model": a valid C identifier',
    ),
    (
        "attribute-string-length",
        _device_with(attributes={"model": {"string": "x" * 65}}),
        "spec.devices[0].attributes[model].string: Too long: may not be more than 64 bytes",
    ),
    (
        "attribute-version-semver",
        _device_with(attributes={"driverVersion": {"version": "580.159"}}),
        'spec.devices[0].attributes[driverVersion].version: Invalid value: "580.159": must be a '
        "string compatible with semver.org spec 2.0.0",
    ),
    (
        "attributes-and-capacities-at-most-32",
        _device_with(
            attributes={f"a{i}": {"int": i} for i in range(20)},
            capacity={f"c{i}": {"value": "1"} for i in range(13)},
        ),
        "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must "
        "not exceed 32",
    ),
    (
        "devices-at-most-128",
        _slice_with(devices=[{"name": f"d{i}"} for i in range(129)]),
        "spec.devices: Too many: 129: must have at most 128 items",
    ),
    (
        "devices-at-most-64-with-taints",
        _slice_with(
            devices=[
                {"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]}
                for i in range(65)
            ]
        ),
        "spec.devices: Too many: 65: must have at most 64 items",
    ),
    (
        "taint-effect-required",
        _device_with(taints=[{"key": "broken"}]),
        "spec.devices[0].taints[0].effect: Required value",
    ),
    (
        "shared-counters-and-devices",
        _slice_with(sharedCounters=[{"name": "mem", "counters": {"memory": {"value": "80Gi"}}}]),
        'spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed',
    ),
    (
        "counter-set-needs-counters",
        edited(
            slice_obj(),
            lambda s: s["spec"].update(devices=None, sharedCounters=[{"name": "mem"}]),
        ),
        "spec.sharedCounters[0].counters: Required value",
    ),
    (
        "consumes-counters-at-most-2",
        _device_with(
            consumesCounters=[
                {"counterSet": f"s{i}", "counters": {"memory": {"value": "1Gi"}}} for i in range(3)
            ]
        ),
        "spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items",
    ),
    (
        "per-device-placement-needs-the-slice-flag",
        _device_with(nodeName="n1"),
        "spec.devices[0]: Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can "
        "only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
    ),
    (
        "request-policy-needs-multiple-allocations",
        _device_with(capacity={"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}}),
        "spec.devices[0].capacity[memory].requestPolicy: Forbidden: allowMultipleAllocations "
        "must be true",
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in SLICE_REFUSALS], ids=[c[0] for c in SLICE_REFUSALS]
)
async def test_a_slice_with_an_invalid_field_is_refused(
    dra: client.ResourceV1Api, body: Json, expected: str
) -> None:
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    code, answer = await refusal(dra.create_resource_slice(body))
    assert (code, answer["reason"]) == (422, "Invalid")
    assert answer["message"].startswith(
        'ResourceSlice.resource.k8s.io "n1-gpu.example.com" is invalid:'
    )
    assert expected in answer["message"]


async def test_a_slices_driver_pool_and_node_are_immutable(dra: client.ResourceV1Api) -> None:
    await dra.create_resource_slice(slice_obj())
    name = "n1-gpu.example.com"
    for change, field in (
        ({"driver": "other.example.com"}, "spec.driver"),
        ({"nodeName": "n2"}, "spec.nodeName"),
        ({"pool": {"name": "n2", "generation": 1, "resourceSliceCount": 1}}, "spec.pool.name"),
    ):
        code, answer = await refusal(dra.patch_resource_slice(name, {"spec": change}))
        assert code == 422
        assert field + ": Invalid value:" in answer["message"]
        assert "field is immutable" in answer["message"]
    bumped = await dra.patch_resource_slice(
        name, {"spec": {"pool": {"name": "n1", "generation": 2, "resourceSliceCount": 1}}}
    )
    assert bumped.metadata.generation == 2


async def test_a_class_is_validated_as_claims_selectors_and_config_are(
    dra: client.ResourceV1Api,
) -> None:
    broken = edited(
        device_class_obj(),
        lambda c: c["spec"].update(
            selectors=[{"cel": {"expression": "device.driver =="}}],
            config=[{"opaque": {"driver": DRIVER}}],
            extendedResourceName="gpu",
        ),
    )
    code, answer = await refusal(dra.create_device_class(broken))
    assert code == 422
    message = answer["message"]
    assert "spec.selectors[0].cel.expression: Invalid value:" in message
    assert "spec.config[0].opaque.parameters: Required value" in message
    assert (
        'spec.extendedResourceName: Invalid value: "gpu": must be a valid extended resource name'
        in message
    )


# ------------------------------------------------------------------------------ RBAC
def _policy(*rules: Json) -> Policy:
    role = {
        "kind": "ClusterRole",
        "metadata": {"name": "claims"},
        "rules": [{"apiGroups": ["resource.k8s.io"], **r} for r in rules],
    }
    binding = {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "claims"},
        "roleRef": {"kind": "ClusterRole", "name": "claims"},
        "subjects": [{"kind": "ServiceAccount", "namespace": "kube-system", "name": "sched"}],
    }
    return Policy.for_service_account([role, binding], "kube-system", "sched")


CLAIMS_RW = {"resources": ["resourceclaims"], "verbs": ["get", "list", "watch", "patch"]}
STATUS_RW = {"resources": ["resourceclaims/status"], "verbs": ["get", "patch", "update"]}
BIND = {"resources": ["resourceclaims/binding"], "verbs": ["patch", "update"]}


async def test_claim_status_needs_its_own_rbac_grant_and_the_binding_permission(
    api: KubeApiEmulator, dra: client.ResourceV1Api
) -> None:
    api.put(RESOURCE_CLAIMS, claim_obj())
    status = {"status": {"allocation": allocation(), "reservedFor": [pod_reference()]}}
    api.authorizer = RbacAuthorizer(_policy(CLAIMS_RW))
    code, answer = await refusal(
        dra.patch_namespaced_resource_claim_status("train-0", "ml", status)
    )
    assert (code, answer["reason"]) == (403, "Forbidden")
    assert 'cannot patch resource "resourceclaims/status"' in answer["message"]
    # With claims/status but not the synthetic claims/binding (1.36's
    # DRAResourceClaimGranularStatusAuthorization): 422 with a Forbidden cause.
    api.authorizer = RbacAuthorizer(_policy(CLAIMS_RW, STATUS_RW))
    code, answer = await refusal(
        dra.patch_namespaced_resource_claim_status("train-0", "ml", status)
    )
    assert code == 422
    assert answer["details"]["causes"][0]["reason"] == "FieldValueForbidden"
    assert (
        "status.allocation: Forbidden: changing status.allocation or status.reservedFor requires "
        'resource="resourceclaims/binding", verb="patch" permission' in answer["message"]
    )
    api.authorizer = RbacAuthorizer(_policy(CLAIMS_RW, STATUS_RW, BIND))
    written = await dra.patch_namespaced_resource_claim_status("train-0", "ml", status)
    assert written.status.allocation is not None
    # A driver's device status needs resourceclaims/driver for its driver name.
    conditions = [{"driver": DRIVER, "pool": "n1", "device": "gpu-0", "conditions": []}]
    devices = {"status": {"devices": conditions}}
    code, answer = await refusal(
        dra.patch_namespaced_resource_claim_status("train-0", "ml", devices)
    )
    assert code == 422
    assert (
        'requires resource="resourceclaims/driver", verb="[arbitrary-node:patch]"'
        in (answer["message"])
    )
    driver = {
        "resources": ["resourceclaims/driver"],
        "verbs": ["arbitrary-node:patch"],
        "resourceNames": [DRIVER],
    }
    api.authorizer = RbacAuthorizer(_policy(CLAIMS_RW, STATUS_RW, driver))
    reported = await dra.patch_namespaced_resource_claim_status("train-0", "ml", devices)
    assert reported.status.devices[0].device == "gpu-0"


async def test_a_device_status_must_name_an_allocated_device(dra: client.ResourceV1Api) -> None:
    await allocated_claim(dra)
    entry = {"driver": DRIVER, "pool": "n1", "device": "gpu-7", "conditions": []}
    code, answer = await _status_refusal(dra, {"devices": [entry]})
    assert code == 422
    assert (
        'status.devices[0]: Invalid value: "gpu.example.com/n1/gpu-7": must be an allocated '
        in (answer["message"])
    )
