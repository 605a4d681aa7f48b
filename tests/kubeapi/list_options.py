"""The list and watch options the API server refuses before reading anything.

From apimachinery's `ValidateListOptions` (pkg/apis/meta/internalversion/validation):
the errors are gathered and answered as one 422 Invalid of `ListOptions.meta.k8s.io`.

- a list (no `watch`): `sendInitialEvents` is forbidden (whatever its value: present is
  enough); `resourceVersionMatch` needs a `resourceVersion`, is forbidden with
  `continue`, must be `Exact` or `NotOlderThan`, and `Exact` is forbidden at "0";
- a watch: `sendInitialEvents` (true or false) needs `resourceVersionMatch=NotOlderThan`
  and the WatchList feature gate; `resourceVersionMatch` is forbidden without
  `sendInitialEvents` and supports only `NotOlderThan`.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.kubeapi.errors import ApiError

NOT_OLDER_THAN = "NotOlderThan"
EXACT = "Exact"
MATCH = "resourceVersionMatch"
SEND_INITIAL = "sendInitialEvents"


def _forbidden(field: str, detail: str) -> str:
    return f"{field}: Forbidden: {detail}"


def _unsupported(field: str, value: str, supported: list[str]) -> str:
    values = ", ".join(f'"{s}"' for s in supported)
    return f'{field}: Unsupported value: "{value}": supported values: {values}'


def list_errors(query: Mapping[str, str]) -> list[str]:
    errors: list[str] = []
    match = query.get(MATCH, "")
    version = query.get("resourceVersion", "")
    if match:
        if not version:
            errors.append(
                _forbidden(
                    MATCH, "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if query.get("continue"):
            errors.append(
                _forbidden(MATCH, "resourceVersionMatch is forbidden when continue is provided")
            )
        if match not in (EXACT, NOT_OLDER_THAN):
            errors.append(_unsupported(MATCH, match, [EXACT, NOT_OLDER_THAN, ""]))
        if match == EXACT and version == "0":
            errors.append(
                _forbidden(
                    MATCH, 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                )
            )
    if SEND_INITIAL in query:
        errors.append(_forbidden(SEND_INITIAL, "sendInitialEvents is forbidden for list"))
    return errors


def watch_errors(query: Mapping[str, str], watch_list: bool) -> list[str]:
    """`watch_list`: the WatchList feature gate of the server."""
    errors: list[str] = []
    match = query.get(MATCH, "")
    if SEND_INITIAL in query:
        if match != NOT_OLDER_THAN:
            errors.append(
                _forbidden(
                    MATCH,
                    f"sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}",
                )
            )
        if not watch_list:
            errors.append(
                _forbidden(
                    SEND_INITIAL,
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate "
                    "is enabled",
                )
            )
    if match:
        if SEND_INITIAL not in query:
            errors.append(
                _forbidden(
                    MATCH,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                    "provided",
                )
            )
        if match != NOT_OLDER_THAN:
            errors.append(_unsupported(MATCH, match, [NOT_OLDER_THAN]))
    return errors


def refuse(errors: list[str]) -> None:
    """Raise the 422 the API server answers for `errors`, if any."""
    if not errors:
        return
    shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    raise ApiError(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {shown}',
        {"group": "meta.k8s.io", "kind": "ListOptions", "name": ""},
    )
