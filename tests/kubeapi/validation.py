"""Field validation the API server applies to every write, for what a scheduler touches.

From k8s.io/apimachinery/pkg/api/validation (ValidateObjectMeta) and pkg/apis/core/
validation (ValidatePod, ValidateObjectMetaUpdate):
- names: a lowercase RFC 1123 subdomain (NameIsDNSSubdomain) for pods, nodes, events,
  leases and custom resources;
- labels: qualified-name keys and label values (ValidateLabels);
- a pod may not be created with both `spec.nodeName` and `spec.schedulingGates`;
- no finalizer may be added to an object that is being deleted;
- a Secret's `data` keys are config keys (`[-._a-zA-Z0-9]+`, ValidateSecret) and its
  values base64 (the JSON decoding of []byte: 400 BadRequest otherwise).

Each check raises the 422 Invalid Status the API answers, its message worded as the
real one (`<Kind> "<name>" is invalid: <field>: Invalid value: ...`). EMULATOR GUESS:
where the real server reports several field errors in one message, the emulator
reports the first.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from tests.kubeapi import errors
from tests.kubeapi.resources import PODS, SECRETS, ResourceType

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_SUBDOMAIN_MAX = 253
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
    "[a-z0-9])?)*')"
)
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_QUALIFIED_NAME_MAX = 63
_QUALIFIED_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _subdomain_problem(value: str) -> str | None:
    if len(value) > _SUBDOMAIN_MAX:
        return f"must be no more than {_SUBDOMAIN_MAX} characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return _SUBDOMAIN_MESSAGE
    return None


def _label_key_problem(key: str) -> str | None:
    """IsQualifiedName: an optional DNS subdomain prefix and "/", then a name part."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        problem = _subdomain_problem(prefix)
        if problem is not None:
            return f"prefix part {problem}"
    if not name:
        return "name part must be non-empty"
    if len(name) > _QUALIFIED_NAME_MAX:
        return f"name part must be no more than {_QUALIFIED_NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return _QUALIFIED_NAME_MESSAGE
    return None


def _label_value_problem(value: str) -> str | None:
    if len(value) > _QUALIFIED_NAME_MAX:
        return f"must be no more than {_QUALIFIED_NAME_MAX} characters"
    if not _LABEL_VALUE.fullmatch(value):
        return _LABEL_VALUE_MESSAGE
    return None


# The checks other modules of the emulator apply to their own fields.
label_key_problem = _label_key_problem
subdomain_problem = _subdomain_problem


def check_name(rtype: ResourceType, name: str) -> None:
    problem = _subdomain_problem(name)
    if problem is not None:
        raise errors.invalid(rtype, name, f'metadata.name: Invalid value: "{name}": {problem}')


def check_labels(rtype: ResourceType, name: str, labels: Any) -> None:
    if labels is None:
        return
    if not isinstance(labels, dict):
        raise errors.bad_request("metadata.labels must be an object of strings")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise errors.bad_request(f"metadata.labels[{key!r}] must be a string")
        problem = _label_key_problem(str(key))
        if problem is not None:
            raise errors.invalid(rtype, name, f'metadata.labels: Invalid value: "{key}": {problem}')
        problem = _label_value_problem(value)
        if problem is not None:
            raise errors.invalid(
                rtype, name, f'metadata.labels: Invalid value: "{value}": {problem}'
            )


_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def check_secret_data(name: str, obj: dict[str, Any]) -> None:
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise errors.bad_request('Secret in version "v1" cannot be handled: data is not a map')
    for key, value in data.items():
        if not isinstance(value, str):
            raise errors.bad_request(f"Secret data[{key}]: expected a base64 string")
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise errors.bad_request(f"illegal base64 data in Secret data[{key}]") from None
        if len(key) > _SUBDOMAIN_MAX or not _CONFIG_KEY.fullmatch(key):
            raise errors.invalid(
                SECRETS,
                name,
                f'data[{key}]: Invalid value: "{key}": a valid config key must consist of '
                "alphanumeric characters, '-', '_' or '.'",
            )


def check_create(rtype: ResourceType, obj: dict[str, Any]) -> None:
    """ValidateObjectMeta and the type's create validation, on the object to store."""
    meta = obj["metadata"]
    name = str(meta["name"])
    check_name(rtype, name)
    check_labels(rtype, name, meta.get("labels"))
    if rtype is SECRETS:
        check_secret_data(name, obj)
    if rtype is PODS:
        spec = obj.get("spec") or {}
        if spec.get("nodeName") and spec.get("schedulingGates"):
            # validatePodSchedulingGates
            raise errors.invalid(
                rtype,
                name,
                "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been "
                "cleared",
            )


def check_update(rtype: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    """ValidateObjectMetaUpdate's checks that a scheduler's writes can meet."""
    meta = new["metadata"]
    name = str(meta.get("name") or "")
    check_labels(rtype, name, meta.get("labels"))
    if rtype is SECRETS:
        check_secret_data(name, new)
    if old["metadata"].get("deletionTimestamp"):
        before = set(old["metadata"].get("finalizers") or ())
        added = [f for f in meta.get("finalizers") or () if f not in before]
        if added:
            shown = ", ".join(f'"{f}"' for f in added)
            raise errors.invalid(
                rtype,
                name,
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object "
                f"is being deleted, found new finalizers []string{{{shown}}}",
            )
