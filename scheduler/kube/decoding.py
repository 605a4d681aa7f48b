"""Decoding the API's JSON: the pods' fields the cache reads, and nothing else.

Why: at cluster scale the cold start is decoding. A running pod of a real cluster is
3-4 KB of JSON (managedFields, env, probes, container statuses) of which
`cache.pod.pod_from_api` reads a few hundred bytes; `json.loads` builds every one of its
~200 objects. msgspec decodes a pod into `TypedDict`s that name only the fields the
cache reads: the rest is skipped while scanning, never built. The result is still plain
dicts and lists, so the parsers (which treat every field as hostile) read it unchanged.
Measured by bench/decode.py (docs/decisions.md, "Talking to the API server"): 7 ms of
CPU per 1,000 such pods instead of 35 ms, 6 MiB of objects instead of 16.

The hostile-input guarantee is kept object by object: a typed decoder refuses a whole
document when one value has the wrong type (`metadata: "x"`), so a page that the typed
decoder refuses is decoded again item by item, and an item it refuses is decoded by the
standard library as before (it keeps what msgspec refuses and json accepts: NaN,
1e999, lone surrogates), so the parser sees exactly the object json.loads would give and
reports its problem on that pod. A page msgspec cannot even split into items is decoded
whole by the standard library, as before this module.

`SLIM_POD` must name every field that `pod_from_api` and what it calls read (metadata,
spec, containers, status); tests/kube/test_decoding.py checks that the records built
from slim and from full decoding are equal, hostile pods included.
"""

from __future__ import annotations

import gc
import json
import logging
from typing import Any, TypedDict

import msgspec

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]


# --- the fields the cache reads of a pod -----------------------------------------------
# `Any` keeps a value whole, whatever its type: the parsers check types themselves. Only
# the levels whose siblings are bulky are typed (metadata: managedFields; a container:
# env, probes, image, args; status: conditions and container statuses).
class _PodMetadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: Any
    annotations: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    ownerReferences: Any  # a gang inferred from the pod's Job, JobSet... (cache/workloads.py)


class _Container(TypedDict, total=False):
    name: Any
    resources: Any  # requests, limits, claims
    ports: Any  # host ports
    restartPolicy: Any  # an init container with Always is a sidecar


class _PodSpec(TypedDict, total=False):
    nodeName: Any
    schedulerName: Any
    priority: Any
    preemptionPolicy: Any
    affinity: Any
    tolerations: Any
    topologySpreadConstraints: Any
    nodeSelector: Any
    volumes: Any
    schedulingGates: Any
    schedulingGroup: Any
    workloadRef: Any  # cache/unsupported.py's NATIVE_GANG_FIELDS
    resourceClaims: Any
    overhead: Any
    resources: Any  # pod-level resources
    hostNetwork: Any
    containers: list[_Container]
    initContainers: list[_Container]


class _PodStatus(TypedDict, total=False):
    phase: Any
    nominatedNodeName: Any
    resourceClaimStatuses: Any  # DRA: the claims made from the pod's templates


class SlimPod(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: _PodMetadata
    spec: _PodSpec
    status: _PodStatus


class _SlimPodPage(msgspec.Struct):
    items: list[SlimPod] | None = None
    metadata: dict[str, Any] | None = None


_NULL = msgspec.Raw(b"null")


class _RawPage(msgspec.Struct):
    items: msgspec.Raw = _NULL  # undecoded: a list is split into its items
    metadata: Any = None


class _SlimPodEvent(msgspec.Struct):
    type: Any = None
    object: SlimPod | None = None


# What msgspec raises on a document it will not decode (DecodeError, of which
# ValidationError is one) or nests too deep to follow.
_REFUSED = (msgspec.DecodeError, RecursionError)


def paused_gc_loads(raw: bytes) -> Any:
    """`json.loads` with the cyclic garbage collector paused. Decoding builds only
    dicts, lists, strings and numbers, none of them in a cycle, so a collection during
    it finds nothing to free; yet a list page of 500 pods allocates ~100,000 objects, and
    with a cache of 150,000 pods in the heap the collections that these allocations
    trigger cost more than the decoding itself (bench/kube.py, docs/benchmarks.md)."""
    return _paused(json.loads, raw)


def _paused(decode: Any, raw: Any) -> Any:
    if not gc.isenabled():
        return decode(raw)
    gc.disable()
    try:
        return decode(raw)
    finally:
        gc.enable()


class Decoder:
    """How a collection's answers are decoded: a list page and a watch event.

    The standard library's, for every kind but pods (`SLIM_POD`)."""

    def page(self, raw: bytes) -> Any:
        return paused_gc_loads(raw)

    def event(self, line: bytes) -> Any:
        return json.loads(line)


class SlimPodDecoder(Decoder):
    """Pods: only what the cache reads (the module's docstring says why and how)."""

    def __init__(self) -> None:
        self._page = msgspec.json.Decoder(_SlimPodPage)
        self._raw_page = msgspec.json.Decoder(_RawPage)
        self._raw_items = msgspec.json.Decoder(list[msgspec.Raw])
        self._any = msgspec.json.Decoder()
        self._pod = msgspec.json.Decoder(SlimPod)
        self._event = msgspec.json.Decoder(_SlimPodEvent)
        self.fallbacks = 0  # objects the standard library decoded (tests read it)

    def page(self, raw: bytes) -> Any:
        try:
            decoded = _paused(self._page.decode, raw)
        except _REFUSED:
            return self._page_by_item(raw)
        return {"items": decoded.items, "metadata": decoded.metadata}

    def _page_by_item(self, raw: bytes) -> Any:
        """A page the typed decoder refused: each item on its own."""
        try:
            page = _paused(self._raw_page.decode, raw)
            try:
                items = self._raw_items.decode(page.items)
            except msgspec.ValidationError:  # not a list: kept as it is
                return {"items": self._any.decode(page.items), "metadata": page.metadata}
        except _REFUSED:
            # Not even splittable (NaN or a lone surrogate, say): the standard library
            # decides, exactly as before.
            self.fallbacks += 1
            return paused_gc_loads(raw)
        return {"items": [self.pod(item) for item in items], "metadata": page.metadata}

    def pod(self, raw: bytes | msgspec.Raw) -> Any:
        """One pod: slim, else as the standard library reads it; an object that neither
        can read is left out (None: not an object, the page's consumer skips it, as it
        skips a page item that is not an object)."""
        try:
            return _paused(self._pod.decode, raw)
        except _REFUSED:
            pass
        self.fallbacks += 1
        try:
            return paused_gc_loads(bytes(raw))
        except (ValueError, RecursionError) as err:
            log.warning("pods: a listed object could not be decoded (%s); skipped", err)
            return None

    def event(self, line: bytes) -> Any:
        try:
            decoded = self._event.decode(line)
        except _REFUSED:
            self.fallbacks += 1
            return json.loads(line)
        if decoded.type == "ERROR" or decoded.object is None:
            # An ERROR event carries a Status, whose fields a pod has not.
            return json.loads(line)
        return {"type": decoded.type, "object": decoded.object}


PLAIN = Decoder()
