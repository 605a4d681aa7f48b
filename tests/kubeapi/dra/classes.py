"""DeviceClass and ResourceClaimTemplate validation (validateDeviceClassSpec,
ValidateResourceClaimTemplate{,Update} in pkg/apis/resource/validation, 1.36).

A class: at most 32 selectors and 32 config entries; selectors and config that are
unchanged on update are "stored" (not compiled again, no size limit on parameters);
extendedResourceName, when set, must be an extended resource name (a domain other than
kubernetes.io, a name, and `requests.<it>` a qualified name). metadata.generation is 1
on create and grows with each spec change.
A template: its `spec.metadata` labels, then its `spec.spec` as a claim's spec; the whole
spec is immutable after creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.kubeapi import validation
from tests.kubeapi.dra import cel, claims
from tests.kubeapi.dra.claims import each
from tests.kubeapi.dra.fields import Errors, invalid

_EXTENDED_NAME_MESSAGE = "must be a valid extended resource name"


def _extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return validation._label_key_problem("requests." + name) is None


def validate_class(spec: Mapping[str, Any], old: Mapping[str, Any] | None) -> Errors:
    selectors = spec.get("selectors") or []
    stored = old is not None and selectors == (old.get("selectors") or [])
    errors = each(
        selectors,
        cel.SELECTORS_MAX,
        lambda s, p: cel.selector(s, p, stored=stored),
        "spec.selectors",
    )
    config = spec.get("config") or []
    stored = old is not None and config == (old.get("config") or [])
    errors += each(
        config,
        claims.CONFIG_MAX,
        lambda c, p: claims.configuration(c, p, stored=stored),
        "spec.config",
    )
    name = spec.get("extendedResourceName")
    if name is not None and not _extended_resource_name(name):
        errors.append(invalid("spec.extendedResourceName", name, _EXTENDED_NAME_MESSAGE))
    return errors


def validate_template(spec: Mapping[str, Any]) -> Errors:
    """ValidateTemplateObjectMeta's label and annotation keys and label values, then the
    claim spec."""
    errors: Errors = []
    meta = spec.get("metadata") or {}
    for key, value in (meta.get("labels") or {}).items():
        problem = validation._label_key_problem(key)
        if problem:
            errors.append(invalid("spec.metadata.labels", key, problem))
        problem = validation._label_value_problem(value)
        if problem:
            errors.append(invalid("spec.metadata.labels", value, problem))
    for key in meta.get("annotations") or {}:
        problem = validation._label_key_problem(key.lower())
        if problem:
            errors.append(invalid("spec.metadata.annotations", key, problem))
    return errors + claims.validate_spec(spec.get("spec") or {}, "spec.spec")
