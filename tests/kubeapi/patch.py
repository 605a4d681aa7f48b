"""The three patch formats the API accepts for JSON bodies.

- JSON merge patch (RFC 7386): maps merge recursively, `null` deletes, anything else
  (lists included) replaces.
- Strategic merge patch: as merge patch, except the lists Kubernetes tags with
  `patchStrategy:"merge"` merge element by element on their `patchMergeKey` (pod and node
  `status.conditions` by `type`, containers by `name`, ...). Only the lists named in
  `MERGE_KEYS` get that treatment; every other list is replaced, which is also what the
  API does for lists without a patch strategy (e.g. `spec.tolerations`). Directives
  understood: `$patch: replace|delete` on maps and list elements, and
  `$deleteFromPrimitiveList/<field>`. `$setElementOrder/<field>` and `$retainKeys` are
  accepted and ignored (EMULATOR GUESS: order and retain-keys bookkeeping matter to
  kubectl, not to a scheduler; new list elements are appended at the end).
- JSON patch (RFC 6902): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# (path of the list field, its patchMergeKey); a merge key of "" marks a list of
# primitives with patchStrategy merge (set union), like metadata.finalizers.
MERGE_KEYS: Mapping[tuple[str, ...], str] = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("status", "containerStatuses"): "name",
    ("status", "initContainerStatuses"): "name",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "containers", "env"): "name",
    ("spec", "containers", "ports"): "containerPort",
    ("spec", "volumes"): "name",
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): "",
}


class PatchError(ValueError):
    """A patch that cannot be applied (the API answers 422 for JSON patch, 400 else)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386. Returns a new value; `target` is not modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a strategic merge patch to an object; returns a new object."""
    merged = _merge_map(target, patch, ())
    assert isinstance(merged, dict)
    return merged


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _merge_map(target: Any, patch: dict[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return None
    if directive is not None:
        raise PatchError(f"unknown patch type: {directive!r}")
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.partition("/")[2]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys: ignored (see module doc)
        child_path = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, child_path)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and child_path in MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, child_path)
        else:
            result[key] = _strip_directives(copy.deepcopy(value))
    return result


def _merge_list(target: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    merge_key = MERGE_KEYS[path]
    current: list[Any] = list(target) if isinstance(target, list) else []
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            _strip_directives(item)
            for item in patch
            if not (isinstance(item, dict) and "$patch" in item)
        ]
    if merge_key == "":
        for item in patch:
            if item not in current:
                current.append(item)
        return current
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {merge_key}")
        position = next(
            (
                i
                for i, existing in enumerate(current)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del current[position]
            continue
        if position is None:
            current.append(_strip_directives(copy.deepcopy(item)))
        else:
            current[position] = _merge_map(current[position], item, path)
    return current


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path component {token!r} not found")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"path component {token!r} is not a container")
    return node


def _index(node: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(node)
    try:
        index = int(token)
    except ValueError as err:
        raise PatchError(f"invalid array index {token!r}") from err
    limit = len(node) if allow_end else len(node) - 1
    if index < 0 or index > limit:
        raise PatchError(f"array index {index} out of range")
    return index


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} not found")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise PatchError(f"path {path!r} not found")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"path {path!r} not found")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(f"path {path!r} not found")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"path {path!r} not found")
        parent[last] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, last, allow_end=False)] = value
        else:
            parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"path {path!r} not found")
    return doc


def json_patch(target: Any, operations: list[Any]) -> Any:
    """RFC 6902. Returns a new document; `target` is not modified."""
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind!r} needs a value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=False)
        elif kind == "replace":
            doc = _add(doc, path, copy.deepcopy(op["value"]), replace=True)
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "move":
            value = _remove(doc, op["from"])
            doc = _add(doc, path, value, replace=False)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])), replace=False)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed")
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc
