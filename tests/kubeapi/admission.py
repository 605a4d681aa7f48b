"""Authentication by bearer token, RBAC per user, and ValidatingAdmissionPolicies whose
CEL is evaluated for real (cel-python), for the API emulator.

    api.access = AccessControl(
        {"tenant-token": Account(User("system:serviceaccount:team-a:alice"), authorizer)},
        admission_policies(rendered()),
    )

What kube-apiserver does and this module copies:
- Authentication: `Authorization: Bearer <token>`; an unknown or missing token is 401
  Unauthorized. The user carries its name, groups and `extra` (a token bound to a pod
  carries `authentication.kubernetes.io/node-name`, KEP-4193).
- Authorization: each account's RbacAuthorizer (tests/kubeapi/rbac.py); None lets the
  account do anything (a cluster admin).
- Validating admission (k8s.io/apiserver plugin/policy/validating): a policy applies to
  a request that matches one of its `matchConstraints.resourceRules` (apiGroups,
  apiVersions, operations, resources with `*` and `pods/*` forms) and all its
  `matchConditions`; its `variables` are evaluated in order and seen as
  `variables.<name>`; each validation that is not true denies the request, as does an
  expression that fails to evaluate (failurePolicy Fail). The first denial is answered
  422 Invalid (or the validation's `reason`), worded as kube-apiserver words it:
  `pods "p" is forbidden: ValidatingAdmissionPolicy 'x' with binding 'y' denied
  request: <message>`. PATCH and PUT are the UPDATE operation, `object` the object as
  it would be stored, `oldObject` the stored one (null on CREATE). A pods/binding is
  admitted as a CREATE of the Binding on subresource `binding`; the pod write it makes
  is not admitted again (BindingREST updates the pod in storage directly).
- `request` is an AdmissionRequest turned into JSON: empty strings (subResource of a
  plain pod request, the namespace of a cluster-scoped object) are left out.

EMULATOR GUESS / not emulated: bindings' `matchResources` and `paramRef`, policies'
`paramKind`, `messageExpression`, `auditAnnotations`, `namespaceObject` and
`authorizer` (refused at load, so that a manifest using them fails its test rather than
being half-enforced); CEL is evaluated without kube-apiserver's type check and its
Kubernetes extension libraries (only standard CEL, which is what deploy/ uses).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes

from tests.kubeapi.errors import ApiError
from tests.kubeapi.rbac import RbacAuthorizer
from tests.kubeapi.routing import Route

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ("system:authenticated",)
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    uid: str = ""


@dataclass
class Account:
    user: User
    authorizer: RbacAuthorizer | None = None  # None: allowed everything


@dataclass(frozen=True)
class Request:
    """What admission sees of the request being served (set per request)."""

    user: User
    verb: str
    route: Route


CURRENT: contextvars.ContextVar[Request | None] = contextvars.ContextVar(
    "kubeapi_request", default=None
)


# --- CEL --------------------------------------------------------------------------------------
_ENV = celpy.Environment()


class CelError(Exception):
    """An expression failed to evaluate."""


@dataclass(frozen=True)
class Expression:
    text: str
    program: celpy.Runner

    @staticmethod
    def compile(text: str) -> Expression:
        return Expression(text, _ENV.program(_ENV.compile(text)))

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        try:
            return self.program.evaluate(dict(activation))
        except celpy.CELEvalError as error:
            message = f"expression '{self.text}' resulted in error: {error.args[0]}"
            raise CelError(message) from error


@dataclass(frozen=True)
class Validation:
    expression: Expression
    message: str
    reason: str


@dataclass(frozen=True)
class ResourceRule:
    groups: tuple[str, ...]
    versions: tuple[str, ...]
    operations: tuple[str, ...]
    resources: tuple[str, ...]

    def matches(self, group: str, version: str, operation: str, resource: str, sub: str) -> bool:
        asked = f"{resource}/{sub}" if sub else resource
        return (
            _listed(group, self.groups)
            and _listed(version, self.versions)
            and _listed(operation, self.operations)
            and any(_resource_matches(pattern, resource, sub, asked) for pattern in self.resources)
        )


def _listed(value: str, allowed: Sequence[str]) -> bool:
    return "*" in allowed or value in allowed


def _resource_matches(pattern: str, resource: str, sub: str, asked: str) -> bool:
    # As the admission rule matcher: "*" every resource (no subresource), "*/*" all,
    # "pods/*" every subresource of pods, "*/status" that subresource of all.
    if pattern == asked or pattern == "*/*":
        return True
    head, _, tail = pattern.partition("/")
    if not tail:
        return head == "*" and not sub
    return (head in ("*", resource)) and bool(sub) and tail in ("*", sub)


@dataclass(frozen=True)
class AdmissionPolicy:
    name: str
    binding: str
    rules: tuple[ResourceRule, ...]
    conditions: tuple[tuple[str, Expression], ...]
    variables: tuple[tuple[str, Expression], ...]
    validations: tuple[Validation, ...]

    def applies(self, group: str, version: str, operation: str, resource: str, sub: str) -> bool:
        return any(rule.matches(group, version, operation, resource, sub) for rule in self.rules)

    def denial(self, activation: dict[str, Any]) -> tuple[str, str] | None:
        """(message, reason) of the first validation that denies, None when allowed."""
        try:
            for _, condition in self.conditions:
                matched = condition.evaluate(activation)
                if not (isinstance(matched, celtypes.BoolType) and bool(matched)):
                    return None
            variables: dict[celtypes.StringType, Any] = {}
            activation = {**activation, "variables": celtypes.MapType(variables)}
            for name, expression in self.variables:
                try:
                    value = expression.evaluate(activation)
                except CelError as error:
                    # Used only if a validation reads it (kube-apiserver is lazy too).
                    value = celpy.CELEvalError(str(error))
                variables[celtypes.StringType(name)] = value
                activation["variables"] = celtypes.MapType(variables)
        except CelError as error:
            return str(error), "Invalid"
        for validation in self.validations:
            try:
                allowed = validation.expression.evaluate(activation)
            except CelError as error:
                return str(error), validation.reason
            if not (isinstance(allowed, celtypes.BoolType) and bool(allowed)):
                message = validation.message or f"failed expression: {validation.expression.text}"
                return message, validation.reason
        return None


def admission_policies(objects: Iterable[Mapping[str, Any]]) -> tuple[AdmissionPolicy, ...]:
    """The bound ValidatingAdmissionPolicies among rendered manifests (a policy without
    a binding does nothing, as in kube-apiserver)."""
    objects = list(objects)
    policies = {
        str(o["metadata"]["name"]): o
        for o in objects
        if o.get("kind") == "ValidatingAdmissionPolicy"
    }
    loaded = []
    for obj in objects:
        if obj.get("kind") != "ValidatingAdmissionPolicyBinding":
            continue
        spec = obj["spec"]
        unsupported = {"matchResources", "paramRef"} & set(spec)
        if unsupported:
            raise NotImplementedError(f"binding {obj['metadata']['name']}: {unsupported}")
        if "Deny" not in spec.get("validationActions", ()):
            continue
        loaded.append(_load(policies[spec["policyName"]], str(obj["metadata"]["name"])))
    return tuple(loaded)


def _load(obj: Mapping[str, Any], binding: str) -> AdmissionPolicy:
    spec = obj["spec"]
    unsupported = {"paramKind", "auditAnnotations"} & set(spec)
    if unsupported or spec.get("failurePolicy", "Fail") != "Fail":
        raise NotImplementedError(f"policy {obj['metadata']['name']}: {unsupported}")
    rules = tuple(
        ResourceRule(
            tuple(rule.get("apiGroups", ())),
            tuple(rule.get("apiVersions", ())),
            tuple(rule.get("operations", ())),
            tuple(rule.get("resources", ())),
        )
        for rule in spec["matchConstraints"]["resourceRules"]
    )
    validations = []
    for raw in spec["validations"]:
        if "messageExpression" in raw:
            raise NotImplementedError("messageExpression")
        validations.append(
            Validation(
                Expression.compile(raw["expression"]),
                " ".join(str(raw.get("message", "")).split()),
                str(raw.get("reason", "Invalid")),
            )
        )
    return AdmissionPolicy(
        name=str(obj["metadata"]["name"]),
        binding=binding,
        rules=rules,
        conditions=tuple(
            (c["name"], Expression.compile(c["expression"]))
            for c in spec.get("matchConditions", ())
        ),
        variables=tuple(
            (v["name"], Expression.compile(v["expression"])) for v in spec.get("variables", ())
        ),
        validations=tuple(validations),
    )


# --- the request as CEL sees it ---------------------------------------------------------------
_CODES = {"Forbidden": 403, "Invalid": 422, "Unauthorized": 401, "RequestEntityTooLarge": 413}


def _request_json(
    request: Request, operation: str, kind: str, name: str, namespace: str
) -> dict[str, Any]:
    rtype = request.route.rtype
    user: dict[str, Any] = {"username": request.user.name, "groups": list(request.user.groups)}
    if request.user.uid:
        user["uid"] = request.user.uid
    if request.user.extra:
        user["extra"] = {key: list(values) for key, values in request.user.extra.items()}
    gvk = {"group": rtype.group, "version": rtype.version, "kind": kind}
    gvr = {"group": rtype.group, "version": rtype.version, "resource": rtype.plural}
    document: dict[str, Any] = {
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "subResource": request.route.subresource,
        "requestSubResource": request.route.subresource,
        "name": name,
        "namespace": namespace,
        "operation": operation,
        "userInfo": user,
        "dryRun": False,
    }
    # omitempty, as the AdmissionRequest's JSON
    return {key: value for key, value in document.items() if value != "" and value != {}}


def _cel(value: Any) -> Any:
    return celtypes.NullType() if value is None else celpy.json_to_cel(value)


def _forbidden(
    request: Request, name: str, policy: AdmissionPolicy, message: str, reason: str
) -> ApiError:
    rtype = request.route.rtype
    qualified = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
    cause = (
        f"ValidatingAdmissionPolicy '{policy.name}' with binding '{policy.binding}' "
        f"denied request: {message}"
    )
    details: dict[str, Any] = {"name": name, "kind": rtype.plural, "causes": [{"message": cause}]}
    if rtype.group:
        details["group"] = rtype.group
    return ApiError(
        _CODES.get(reason, 400), reason, f'{qualified} "{name}" is forbidden: {cause}', details
    )


# --- the emulator's hooks ---------------------------------------------------------------------
@dataclass
class AccessControl:
    """Plug into `KubeApiEmulator.access`: accounts by bearer token, and the admission
    policies in force. `refused` collects every denial, for tests to inspect."""

    accounts: Mapping[str, Account]
    policies: Sequence[AdmissionPolicy] = ()
    refused: list[str] = field(default_factory=list)

    def authenticate(self, header: str | None) -> Account:
        """The account of the request's bearer token; 401 for none or an unknown one."""
        scheme, _, token = (header or "").partition(" ")
        account = self.accounts.get(token.strip()) if scheme.lower() == "bearer" else None
        if account is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return account

    @staticmethod
    def authorize(account: Account, verb: str, route: Route) -> ApiError | None:
        if account.authorizer is None:
            return None
        return account.authorizer.authorize(verb, route)

    def admit(
        self,
        kind: str,
        operation: str,
        new: Mapping[str, Any] | None,
        old: Mapping[str, Any] | None,
    ) -> None:
        """Run the policies on the request being served; raises the first denial."""
        request = CURRENT.get()
        if request is None:
            return  # a test seeding the store directly: not an API request
        route = request.route
        rtype = route.rtype
        meta = (new or old or {}).get("metadata") or {}
        name = str(meta.get("name") or route.name or "")
        namespace = str(meta.get("namespace") or route.namespace or "")
        activation: dict[str, Any] | None = None
        for policy in self.policies:
            if not policy.applies(
                rtype.group, rtype.version, operation, rtype.plural, route.subresource
            ):
                continue
            if activation is None:
                activation = {
                    "object": _cel(new),
                    "oldObject": _cel(old),
                    "request": _cel(_request_json(request, operation, kind, name, namespace)),
                    "params": celtypes.NullType(),
                }
            denied = policy.denial(activation)
            if denied is not None:
                message, reason = denied
                self.refused.append(f"{policy.name}: {message}")
                raise _forbidden(request, name, policy, message, reason)

    def admit_write(self, kind: str, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        """The store's hook: admit a write made while serving a request (not the pod
        write of a pods/binding, admitted as the Binding before it)."""
        request = CURRENT.get()
        if request is None or request.route.subresource == "binding":
            return
        if request.route.rtype.kind != kind or request.verb == "delete":
            return  # a write on the side, or a graceful deletion (admitted as DELETE)
        self.admit(kind, "CREATE" if old is None else "UPDATE", new, old)
