"""The name formats of resource.k8s.io (pkg/apis/resource/validation/validation.go and the
helpers it calls in k8s.io/apimachinery/pkg/util/validation): each returns the field
errors of one value, worded as the real ones."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from tests.kubeapi import validation
from tests.kubeapi.dra.fields import Errors, forbidden, invalid, required, size, too_long

# resource.DriverNameMaxLength, DeviceMaxDomainLength, DeviceMaxIDLength, PoolNameMaxLength.
DRIVER_NAME_MAX = 63
DOMAIN_MAX = 63
ID_MAX = 32
POOL_NAME_MAX = 253

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_LABEL_MAX = 63
_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_C_IDENTIFIER_MESSAGE = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string "
    "of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex "
    "used for validation is '[A-Za-z_][A-Za-z0-9_]*')"
)
# semver.org 2.0.0, as validateDeviceAttributeVersionValue's expression.
_NUMERIC = r"(0|[1-9]\d*)"
_PRERELEASE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
SEMVER = re.compile(
    rf"{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}(-{_PRERELEASE}(\.{_PRERELEASE})*)?"
    rf"(\+{_BUILD}(\.{_BUILD})*)?"
)


def dns_label(value: str, path: str) -> Errors:
    """ValidateDNS1123Label (device, request and counter names)."""
    errors = []
    if size(value) > _DNS_LABEL_MAX:
        errors.append(invalid(path, value, f"must be no more than {_DNS_LABEL_MAX} characters"))
    if not _DNS_LABEL.fullmatch(value):
        errors.append(invalid(path, value, _DNS_LABEL_MESSAGE))
    return errors


def dns_subdomain(value: str, path: str) -> Errors:
    """ValidateDNS1123Subdomain (device class names, node names, pool name parts)."""
    problem = validation._subdomain_problem(value)
    return [invalid(path, value, problem)] if problem else []


def driver_name(value: str, path: str) -> Errors:
    """ValidateCSIDriverName: required, at most 63 bytes, a DNS subdomain once lowercased."""
    if not value:
        return [required(path)]
    errors = []
    if size(value) > DRIVER_NAME_MAX:
        errors.append(too_long(path, DRIVER_NAME_MAX))
    problem = validation._subdomain_problem(value.lower())
    if problem:
        errors.append(invalid(path, value, problem))
    return errors


def pool_name(value: str, path: str) -> Errors:
    """validatePoolName: required, at most 253 bytes, DNS subdomains joined by '/'."""
    if not value:
        return [required(path)]
    errors = [too_long(path, POOL_NAME_MAX)] if size(value) > POOL_NAME_MAX else []
    for part in value.split("/"):
        errors += dns_subdomain(part, path)
    return errors


def node_name(value: str, path: str) -> Errors:
    return dns_subdomain(value, path)


def c_identifier(value: str, path: str) -> Errors:
    errors = [too_long(path, ID_MAX)] if size(value) > ID_MAX else []
    if not _C_IDENTIFIER.fullmatch(value):
        errors.append(invalid(path, value, _C_IDENTIFIER_MESSAGE))
    return errors


def qualified_name(value: str, path: str) -> Errors:
    """validateQualifiedName: an attribute or capacity name, `<C identifier>` or
    `<driver-style domain>/<C identifier>`. As the real code (a TODO there), a name with
    more than one slash is not checked at all."""
    parts = value.split("/")
    if len(parts) == 1:
        return c_identifier(parts[0], path)
    if len(parts) != 2:
        return []
    domain, name = parts
    errors = (
        driver_name(domain, path) if domain else [invalid(path, "", "the domain must not be empty")]
    )
    errors += (
        c_identifier(name, path) if name else [invalid(path, "", "the name must not be empty")]
    )
    return errors


def fully_qualified_name(value: str, path: str) -> Errors:
    """validateFullyQualifiedName (constraints' matchAttribute): a domain is required."""
    errors = qualified_name(value, path)
    if "/" not in value:
        errors.append(
            invalid(
                path,
                value,
                "a fully qualified name must be a domain and a name separated by a slash",
            )
        )
    return errors


def label_name(value: str, path: str) -> Errors:
    """metav1validation.ValidateLabelName (taint and toleration keys, binding conditions)."""
    problem = validation._label_key_problem(value)
    return [invalid(path, value, problem)] if problem else []


def label_value(value: str, path: str) -> Errors:
    problem = validation._label_value_problem(value)
    return [invalid(path, value, problem)] if problem else []


def uid(value: str, path: str) -> Errors:
    """validateUID (shareID): an RFC 4122 UUID in its lowercase normalized form."""
    try:
        uuid.UUID(value)
    except ValueError:
        return [invalid(path, value, "error validating uid: invalid UUID format")]
    if len(value) != 36 or value != value.lower():
        return [
            invalid(
                path,
                value,
                "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` "
                "with lowercase hexadecimal characters",
            )
        ]
    return []


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def node_selector(selector: Mapping[str, Any], path: str) -> Errors:
    """corevalidation.ValidateNodeSelector (label values checked)."""
    terms = selector.get("nodeSelectorTerms") or []
    terms_path = f"{path}.nodeSelectorTerms"
    if not terms:
        return [required(terms_path, "must have at least one node selector term")]
    errors: Errors = []
    for i, term in enumerate(terms):
        for j, req in enumerate(term.get("matchExpressions") or []):
            errors += _label_requirement(req, f"{terms_path}[{i}].matchExpressions[{j}]")
        for j, req in enumerate(term.get("matchFields") or []):
            errors += _field_requirement(req, f"{terms_path}[{i}].matchFields[{j}]")
    return errors


def _label_requirement(req: Mapping[str, Any], path: str) -> Errors:
    operator, values = req.get("operator", ""), req.get("values") or []
    errors: Errors = []
    if operator in ("In", "NotIn") and not values:
        errors.append(
            required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
        )
    elif operator in ("Exists", "DoesNotExist") and values:
        errors.append(
            forbidden(
                f"{path}.values",
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )
        )
    elif operator in ("Gt", "Lt") and len(values) != 1:
        errors.append(
            required(
                f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"
            )
        )
    elif operator not in _SELECTOR_OPERATORS:
        errors.append(invalid(f"{path}.operator", operator, "not a valid selector operator"))
    errors += label_name(req.get("key", ""), f"{path}.key")
    for k, value in enumerate(values):
        errors += label_value(value, f"{path}.values[{k}]")
    return errors


def _field_requirement(req: Mapping[str, Any], path: str) -> Errors:
    operator, values = req.get("operator", ""), req.get("values") or []
    errors: Errors = []
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            errors.append(
                required(
                    f"{path}.values",
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field "
                    "selector",
                )
            )
    else:
        errors.append(invalid(f"{path}.operator", operator, "not a valid selector operator"))
    if req.get("key", "") != "metadata.name":
        errors.append(invalid(f"{path}.key", req.get("key", ""), "not a valid field selector key"))
    else:
        for k, value in enumerate(values):
            errors += node_name(value, f"{path}.values[{k}]")
    return errors
