"""RBAC authorization for the API emulator: answer 403 to what a service account's roles
do not grant, and record which rule granted each request that passed.

Request attributes are those kube-apiserver's RequestInfo resolves (see routing.py's
`verb_of`): a GET of a collection is `list` (`watch` with `watch=true` or the legacy
`/watch/` prefix), a GET of a name is `get`, POST `create`, PUT `update`, PATCH `patch`,
DELETE `delete`; the resource of a subresource request is `pods/binding`,
`pods/status`, ...; the namespace is empty for a cluster-scoped object or a request
across all namespaces. Rules are matched as the RBAC authorizer matches them
(k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac, `RuleAllows`): the verb, API group
and resource each listed (or `*`), and, when the rule has resourceNames, the request's
name among them (so a `create` on a collection or a `list` never matches such a rule).
A ClusterRole bound by a ClusterRoleBinding applies everywhere; a Role (or a ClusterRole)
bound by a RoleBinding applies in the binding's namespace only.

Discovery (`/api`, `/apis`, ...) is not authorized here: every authenticated user may
read it through the default `system:discovery` ClusterRole. Aggregated ClusterRoles
(`aggregationRule`) are not expanded: the manifests under test do not use them.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.kubeapi.errors import ApiError
from tests.kubeapi.routing import Route


@dataclass(frozen=True)
class Attributes:
    """What is asked: the verb on a (group, resource[/subresource]) in a namespace."""

    verb: str
    group: str
    resource: str  # with its subresource: "pods/binding"
    namespace: str  # "" for cluster-scoped objects and requests across namespaces
    name: str  # "" for collections (list, watch, create)

    @staticmethod
    def of(verb: str, route: Route) -> Attributes:
        resource = route.rtype.plural
        if route.subresource:
            resource = f"{resource}/{route.subresource}"
        return Attributes(
            verb, route.rtype.group, resource, route.namespace or "", route.name or ""
        )


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a Role or ClusterRole."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    @staticmethod
    def from_dict(raw: Mapping[str, Any]) -> Rule:
        return Rule(
            tuple(raw.get("apiGroups") or ()),
            tuple(raw.get("resources") or ()),
            tuple(raw.get("verbs") or ()),
            tuple(raw.get("resourceNames") or ()),
        )

    def allows(self, asked: Attributes) -> bool:
        return (
            _listed(asked.verb, self.verbs)
            and _listed(asked.group, self.api_groups)
            and _listed(asked.resource, self.resources)
            and (not self.resource_names or asked.name in self.resource_names)
        )


def _listed(value: str, allowed: Sequence[str]) -> bool:
    return "*" in allowed or value in allowed


@dataclass(frozen=True)
class Grant:
    """One (verb, group, resource) a rule grants, and where: the role that holds the
    rule and the namespace the binding limits it to ("" = every namespace)."""

    role: str  # "ClusterRole/name" or "Role/namespace/name"
    scope: str
    verb: str
    group: str
    resource: str
    resource_names: tuple[str, ...]


@dataclass(frozen=True)
class _Bound:
    role: str
    scope: str
    rules: tuple[Rule, ...]

    def grants(self) -> Iterable[Grant]:
        for rule in self.rules:
            for verb in rule.verbs:
                for group in rule.api_groups:
                    for resource in rule.resources:
                        yield Grant(
                            self.role, self.scope, verb, group, resource, rule.resource_names
                        )

    def grant_for(self, asked: Attributes) -> Grant | None:
        if self.scope and asked.namespace != self.scope:
            return None
        for rule in self.rules:
            if rule.allows(asked):
                return Grant(
                    self.role,
                    self.scope,
                    asked.verb,
                    asked.group if asked.group in rule.api_groups else "*",
                    asked.resource if asked.resource in rule.resources else "*",
                    rule.resource_names,
                )
        return None


@dataclass(frozen=True)
class Policy:
    """Everything one user may do: the roles bound to it, with their scope."""

    user: str
    bound: tuple[_Bound, ...]

    @staticmethod
    def for_service_account(
        objects: Iterable[Mapping[str, Any]], namespace: str, name: str
    ) -> Policy:
        """The roles bound to ServiceAccount namespace/name among rendered `objects`
        (Roles, ClusterRoles and their bindings; other kinds are ignored)."""
        objects = list(objects)
        roles: dict[tuple[str, str, str], tuple[Rule, ...]] = {}
        for obj in objects:
            kind, meta = obj.get("kind"), obj.get("metadata") or {}
            if kind in ("Role", "ClusterRole"):
                key = (str(kind), str(meta.get("namespace") or ""), str(meta.get("name")))
                roles[key] = tuple(Rule.from_dict(r) for r in obj.get("rules") or ())
        bound: list[_Bound] = []
        for obj in objects:
            kind, meta = obj.get("kind"), obj.get("metadata") or {}
            if kind not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            if not any(_is_account(s, namespace, name) for s in obj.get("subjects") or ()):
                continue
            ref = obj.get("roleRef") or {}
            scope = str(meta.get("namespace") or "") if kind == "RoleBinding" else ""
            role_ns = scope if ref.get("kind") == "Role" else ""
            key = (str(ref.get("kind")), role_ns, str(ref.get("name")))
            if key not in roles:
                raise ValueError(f"{kind} {meta.get('name')} refers to a missing {key}")
            label = f"{key[0]}/{key[1]}/{key[2]}" if key[1] else f"{key[0]}/{key[2]}"
            bound.append(_Bound(label, scope, roles[key]))
        return Policy(f"system:serviceaccount:{namespace}:{name}", tuple(bound))

    def grants(self) -> set[Grant]:
        return {grant for b in self.bound for grant in b.grants()}

    def grant_for(self, asked: Attributes) -> Grant | None:
        for b in self.bound:
            grant = b.grant_for(asked)
            if grant is not None:
                return grant
        return None


def _is_account(subject: Mapping[str, Any], namespace: str, name: str) -> bool:
    return (
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == name
        and subject.get("namespace") == namespace
    )


@dataclass
class RbacAuthorizer:
    """Plug into `KubeApiEmulator.authorizer`: every request is authorized against
    `policy` (as its user); `used` collects the grant each allowed request took, and
    `denied` every refused request, so a test can insist on none."""

    policy: Policy
    used: set[Grant] = field(default_factory=set)
    allowed: list[Attributes] = field(default_factory=list)
    denied: list[Attributes] = field(default_factory=list)

    def authorize(self, verb: str, route: Route) -> ApiError | None:
        return self.check(Attributes.of(verb, route))

    def check(self, asked: Attributes) -> ApiError | None:
        """The 403 for `asked`, or None when a rule grants it."""
        grant = self.policy.grant_for(asked)
        if grant is not None:
            self.used.add(grant)
            self.allowed.append(asked)
            return None
        self.denied.append(asked)
        return forbidden(self.policy.user, asked)


def forbidden(user: str, asked: Attributes) -> ApiError:
    """403 worded as kube-apiserver's RBAC denial (apiserver's `errors.NewForbidden`
    around the authorizer's reason)."""
    resource, _, subresource = asked.resource.partition("/")
    qualified = f"{resource}.{asked.group}" if asked.group else resource
    target = f'{qualified} "{asked.name}"' if asked.name else qualified
    where = f'in the namespace "{asked.namespace}"' if asked.namespace else "at the cluster scope"
    message = (
        f'{target} is forbidden: User "{user}" cannot {asked.verb} resource '
        f'"{asked.resource}" in API group "{asked.group}" {where}'
    )
    details: dict[str, Any] = {"name": asked.name, "kind": resource}
    if asked.group:
        details["group"] = asked.group
    if subresource:
        details["kind"] = asked.resource
    return ApiError(403, "Forbidden", message, details)


@dataclass(frozen=True)
class Authorizing:
    """The request being served, for the authorization checks a registry strategy makes
    itself on synthetic subresources (a ResourceClaim status write asks for
    `resourceclaims/binding`, pkg/registry/resource/utils.go)."""

    verb: str
    check: Callable[[Attributes], ApiError | None]
    user: str = ""
    node_name: str = ""  # the node a service account's token is bound to, if any


# Set per request by the emulator where it authorizes; None: every check passes.
CURRENT: contextvars.ContextVar[Authorizing | None] = contextvars.ContextVar(
    "kubeapi_authorizing", default=None
)
