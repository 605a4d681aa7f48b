"""`Status` error bodies, shaped and worded as k8s.io/apimachinery/pkg/api/errors makes them.

The wording matters only to humans, but clients branch on `code` and `reason`
(kubernetes_asyncio raises ApiException(status=code); a watch ERROR event carries the
same Status object).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.kubeapi.resources import ResourceType

if TYPE_CHECKING:
    from tests.kubeapi.store import StoredObject

OPTIMISTIC_LOCK_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def success_body(code: int, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    body["status"] = "Success"
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class ApiError(Exception):
    """An error the handlers turn into an HTTP response with a Status body."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.body = status_body(code, reason, message, details)


def _details(rtype: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rtype.group:
        details["group"] = rtype.group
    details["kind"] = rtype.plural
    return details


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rtype.qualified} "{name}" not found', _details(rtype, name))


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{rtype.qualified} "{name}" already exists', _details(rtype, name)
    )


def conflict(rtype: ResourceType, name: str, why: str, *, qualified: str | None = None) -> ApiError:
    target = qualified or rtype.qualified
    details = _details(rtype, name)
    if qualified:
        details["kind"] = qualified
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {target} "{name}": {why}', details
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(rtype: ResourceType, name: str, why: str) -> ApiError:
    group = f".{rtype.group}" if rtype.group else ""
    return ApiError(
        422,
        "Invalid",
        f'{rtype.kind}{group} "{name}" is invalid: {why}',
        {"name": name, "group": rtype.group, "kind": rtype.kind},
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def internal(message: str) -> ApiError:
    # Errors that are not a StatusError reach the client as 500 with reason "" (Unknown)
    # via apiserver's ErrorToAPIStatus; keep that shape.
    return ApiError(500, "", message)


def injected(code: int, message: str) -> ApiError:
    """A fault the test asked for (fail_next_binds), shaped like a real failure."""
    return ApiError(code, REASONS.get(code, "InternalError"), message)


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def check_preconditions(
    rtype: ResourceType, current: StoredObject, uid: str | None, resource_version: str | None
) -> None:
    """storage.Preconditions: a mismatch is a 409 Conflict naming both values."""
    meta = current.obj["metadata"]
    if uid and uid != meta.get("uid"):
        raise conflict(
            rtype,
            current.name,
            f"Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {meta.get('uid')}",
        )
    if resource_version and resource_version != meta.get("resourceVersion"):
        raise conflict(
            rtype,
            current.name,
            f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
        )
