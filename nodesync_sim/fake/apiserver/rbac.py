"""Role-based access control for the test API server, from real RBAC objects.

`RBACAuthorizer` is an `Authorizer` built from ClusterRoles, Roles, ClusterRoleBindings and
RoleBindings as Kubernetes serves them (e.g. nodesync's deploy/ manifests), and answers like the
real RBAC authorizer does:

- a ClusterRoleBinding grants its ClusterRole everywhere (cluster-scoped objects, every
  namespace, and requests across all namespaces); a RoleBinding grants its Role, or a
  ClusterRole, in the binding's namespace only;
- subjects: a ServiceAccount is the user ``system:serviceaccount:<namespace>:<name>``, a User is
  its name, a Group matches the groups of the user (service accounts are in
  ``system:serviceaccounts``, ``system:serviceaccounts:<namespace>`` and
  ``system:authenticated``; every other user in ``system:authenticated``);
- a rule allows a request when its apiGroups, resources and verbs contain the request's (or
  ``*``); a subresource is ``resource/subresource`` (``pods/eviction``, ``nodes/status``), also
  matched by ``*/subresource``; resourceNames, when set, must contain the request's name (so
  they never allow create, list or watch, whose requests carry no name here).

Users in ``superusers`` (the server's default token) may do anything, as system:masters may.
Every decision about any other user is recorded: ``allowed`` and ``denied`` hold the requests,
``used`` the permissions that allowed at least one request, so a test can tell which granted
permission a run never needed. ``without`` gives a copy with one permission taken away.

The server hands the authorizer the resource's plural but not its API group; the group is looked
up among the resource types this server serves (their plurals are unique). Aggregated
ClusterRoles and non-resource URLs are not supported (loading them is an error).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from nodesync_sim.fake.apiserver.resources import BY_PLURAL

RBAC_GROUP = "rbac.authorization.k8s.io"
ROLE_KINDS = frozenset({"Role", "ClusterRole"})
BINDING_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class RBACError(ValueError):
    """An RBAC object this authorizer cannot represent faithfully."""


@dataclass(frozen=True, slots=True, order=True)
class RoleRef:
    kind: str  # Role or ClusterRole
    namespace: str  # "" for a ClusterRole
    name: str

    def __str__(self) -> str:
        return (
            f"{self.kind} {self.namespace}/{self.name}"
            if self.namespace
            else (f"{self.kind} {self.name}")
        )


@dataclass(frozen=True, slots=True, order=True)
class Permission:
    """One verb on one resource of one API group, from one rule of one role."""

    role: RoleRef
    rule: int  # the rule's index in the role
    group: str
    resource: str  # "pods", "pods/eviction", "*", "*/status"
    verb: str
    resource_names: tuple[str, ...] = ()

    def __str__(self) -> str:
        group = f" in API group {self.group!r}"
        names = f" named {', '.join(self.resource_names)}" if self.resource_names else ""
        return f"{self.verb} {self.resource}{names}{group} ({self.role}, rule {self.rule})"

    def matches(self, request: Request) -> bool:
        if self.verb not in ("*", request.verb):
            return False
        if self.group not in ("*", request.group):
            return False
        if not _resource_matches(self.resource, request.resource, request.subresource):
            return False
        return not self.resource_names or request.name in self.resource_names


def _resource_matches(rule: str, resource: str, subresource: str) -> bool:
    """Kubernetes' ResourceMatches."""
    combined = f"{resource}/{subresource}" if subresource else resource
    if rule in ("*", combined):
        return True
    return bool(subresource) and rule == f"*/{subresource}"


@dataclass(frozen=True, slots=True)
class Subject:
    kind: str  # ServiceAccount, User or Group
    name: str
    namespace: str = ""

    def matches(self, user: str) -> bool:
        if self.kind == "ServiceAccount":
            return user == f"{SERVICE_ACCOUNT_PREFIX}{self.namespace}:{self.name}"
        if self.kind == "User":
            return user == self.name
        return self.name in groups_of(user)


def groups_of(user: str) -> frozenset[str]:
    if user.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace = user.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")[0]
        return frozenset(
            {
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            }
        )
    return frozenset({"system:authenticated"})


def service_account(namespace: str, name: str) -> str:
    """The user name Kubernetes authenticates a service account's token as."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


@dataclass(frozen=True, slots=True)
class Binding:
    kind: str
    namespace: str  # "" for a ClusterRoleBinding
    name: str
    role: RoleRef
    subjects: tuple[Subject, ...]

    def applies(self, user: str, namespace: str) -> bool:
        if self.namespace and namespace != self.namespace:
            return False
        return any(s.matches(user) for s in self.subjects)


@dataclass(frozen=True, slots=True)
class Request:
    user: str
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str

    @property
    def kind(self) -> tuple[str, str, str, str]:
        """(verb, group, resource, subresource): what the request was, whatever its object."""
        return (self.verb, self.group, self.resource, self.subresource)


# ---------------------------------------------------------------- loading


def _strings(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = obj.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RBACError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def _role(obj: Mapping[str, Any]) -> tuple[RoleRef, tuple[Permission, ...]]:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    ref = RoleRef(kind, str(meta.get("namespace") or "") if kind == "Role" else "", meta["name"])
    if obj.get("aggregationRule"):
        raise RBACError(f"{ref}: aggregated ClusterRoles are not supported")
    if kind == "Role" and not ref.namespace:
        raise RBACError(f"{ref}: a Role needs a namespace")
    permissions: list[Permission] = []
    for index, rule in enumerate(obj.get("rules") or []):
        where = f"{ref} rule {index}"
        if rule.get("nonResourceURLs"):
            raise RBACError(f"{where}: nonResourceURLs are not supported")
        names = _strings(rule, "resourceNames", where)
        for group in _strings(rule, "apiGroups", where):
            for resource in _strings(rule, "resources", where):
                for verb in _strings(rule, "verbs", where):
                    permissions.append(Permission(ref, index, group, resource, verb, names))
    return ref, tuple(permissions)


def _binding(obj: Mapping[str, Any]) -> Binding:
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    namespace = str(meta.get("namespace") or "") if kind == "RoleBinding" else ""
    where = f"{kind} {meta.get('name')}"
    if kind == "RoleBinding" and not namespace:
        raise RBACError(f"{where}: a RoleBinding needs a namespace")
    ref = obj.get("roleRef") or {}
    if ref.get("apiGroup") != RBAC_GROUP or ref.get("kind") not in ROLE_KINDS:
        raise RBACError(f"{where}: roleRef must be a Role or ClusterRole of {RBAC_GROUP}")
    if kind == "ClusterRoleBinding" and ref["kind"] == "Role":
        raise RBACError(f"{where}: a ClusterRoleBinding cannot refer to a Role")
    role = RoleRef(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])
    subjects = []
    for subject in obj.get("subjects") or []:
        subject_kind = subject.get("kind")
        if subject_kind not in ("ServiceAccount", "User", "Group"):
            raise RBACError(f"{where}: subject kind {subject_kind!r}")
        subject_namespace = str(subject.get("namespace") or "")
        if subject_kind == "ServiceAccount" and not subject_namespace:
            if not namespace:
                raise RBACError(f"{where}: a ServiceAccount subject needs a namespace")
            subject_namespace = namespace
        subjects.append(Subject(subject_kind, subject["name"], subject_namespace))
    return Binding(kind, namespace, str(meta["name"]), role, tuple(subjects))


# ---------------------------------------------------------------- the authorizer


@dataclass
class RBACAuthorizer:
    roles: dict[RoleRef, tuple[Permission, ...]]
    bindings: tuple[Binding, ...]
    superusers: frozenset[str] = frozenset({"admin"})
    allowed: list[Request] = field(default_factory=list)
    denied: list[Request] = field(default_factory=list)
    used: set[Permission] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def from_objects(
        cls, objects: Iterable[Mapping[str, Any]], *, superusers: Iterable[str] = ("admin",)
    ) -> RBACAuthorizer:
        """From RBAC objects (other kinds are ignored): e.g. a kustomize build's output."""
        roles: dict[RoleRef, tuple[Permission, ...]] = {}
        bindings: list[Binding] = []
        for obj in objects:
            kind = obj.get("kind")
            if kind in ROLE_KINDS:
                ref, permissions = _role(obj)
                if ref in roles:
                    raise RBACError(f"{ref} is defined twice")
                roles[ref] = permissions
            elif kind in BINDING_KINDS:
                bindings.append(_binding(obj))
        return cls(roles, tuple(bindings), frozenset(superusers))

    def __call__(
        self, user: str, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> bool:
        if user in self.superusers:
            return True
        served = BY_PLURAL.get(resource)
        group = served.group if served is not None else ""
        request = Request(user, verb, group, resource, subresource, namespace, name)
        granted = self.granting(request)
        with self._lock:
            if granted:
                self.allowed.append(request)
                self.used.update(granted)
            else:
                self.denied.append(request)
        return bool(granted)

    def granting(self, request: Request) -> list[Permission]:
        """The permissions that allow ``request`` (none: forbidden)."""
        found: list[Permission] = []
        for binding in self.bindings:
            if not binding.applies(request.user, request.namespace):
                continue
            found += [p for p in self.roles.get(binding.role, ()) if p.matches(request)]
        return found

    # ---------------------------------------------------------------- for tests

    def permissions(self, user: str | None = None) -> list[Permission]:
        """Every granted permission (of roles bound to ``user``, when given), in order."""
        refs = {
            b.role
            for b in self.bindings
            if user is None or any(s.matches(user) for s in b.subjects)
        }
        return sorted(p for ref in refs for p in self.roles.get(ref, ()))

    def unused(self, user: str | None = None) -> list[Permission]:
        """Granted permissions that allowed no request so far."""
        with self._lock:
            return [p for p in self.permissions(user) if p not in self.used]

    def requests(self, user: str) -> set[tuple[str, str, str, str]]:
        """(verb, group, resource, subresource) of every allowed request of ``user``."""
        with self._lock:
            return {r.kind for r in self.allowed if r.user == user}

    def denials(self, user: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.denied if user is None or r.user == user]

    def without(self, permission: Permission) -> RBACAuthorizer:
        """A fresh copy (nothing recorded) that lacks ``permission``."""
        if permission not in self.roles.get(permission.role, ()):
            raise KeyError(f"not granted: {permission}")
        roles = dict(self.roles)
        roles[permission.role] = tuple(p for p in roles[permission.role] if p != permission)
        return RBACAuthorizer(roles, self.bindings, self.superusers)

    def fresh(self) -> RBACAuthorizer:
        """A copy with the same rules and nothing recorded."""
        return replace(self, allowed=[], denied=[], used=set(), _lock=threading.Lock())
