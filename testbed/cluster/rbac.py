"""The fake cluster's one authorizer: RBAC as kube-apiserver evaluates it, plus the explicit
access rules a test adds (``FakeCluster.allow``/``deny``).

The same evaluation answers SubjectAccessReviews and authorizes the HTTP requests of the
identities a cluster puts under RBAC (autowrap's ServiceAccount, with the grants deploy/base
gives it), so a verb missing from the ClusterRole fails the call that needs it with the 403 a
real cluster answers. tests/deploy reads the grants through :meth:`Rbac.grants`.

Upstream (kubernetes/kubernetes, k8s.io/apiserver):

* rule matching: pkg/apis/rbac/v1/evaluation_helpers.go ``VerbMatches``, ``APIGroupMatches``,
  ``ResourceMatches`` (``resource/subresource`` and ``*/subresource``), ``ResourceNameMatches``
  (a rule with resourceNames never matches a request without a name: a create, a list),
  ``NonResourceURLMatches`` (a trailing ``*`` is a prefix);
* which rules apply: pkg/registry/rbac/validation/rule.go ``VisitRulesFor`` (every
  ClusterRoleBinding, and the RoleBindings of the request's namespace) and ``appliesToUser``
  (User by name, Group by membership, ServiceAccount as
  ``system:serviceaccount:<namespace>:<name>``);
* plugin/pkg/auth/authorizer/rbac/rbac.go ``Authorize``: allowed, or no opinion with an empty
  reason (so the 403 carries no reason);
* request attributes: k8s.io/apiserver pkg/endpoints/request/requestinfo.go
  ``NewRequestInfo`` (verb from the method, list/watch for a GET without a name,
  deletecollection for a DELETE without one; ``/api/v1/namespaces/<ns>`` is namespace <ns>);
* the 403: pkg/endpoints/handlers/responsewriters/errors.go ``Forbidden`` and
  ``forbiddenMessage``, wrapped by apimachinery pkg/api/errors ``NewForbidden``
  (``<resource>[.<group>] "<name>" is forbidden: User "<u>" cannot <verb> resource "<r>" in
  API group "<g>" in the namespace "<ns>"``);
* what every authenticated user may do whatever the manifests say: the bootstrap
  ClusterRoles system:basic-user and system:discovery
  (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go);
* where the roles and bindings come from: the objects stored in the API. kube-apiserver builds
  its RBAC authorizer over the shared informers' listers of the four kinds
  (pkg/kubeapiserver/authorizer/config.go ``Config.New``, case ModeRBAC:
  ``rbac.New(&rbac.RoleGetter{Lister: ...Rbac().V1().Roles().Lister()}, ...)``; rbac.go ``New``
  and its adapters ``RoleGetter``, ``RoleBindingLister``, ``ClusterRoleGetter``,
  ``ClusterRoleBindingLister``), so an edit of a stored ClusterRole is what the next request is
  judged by: :meth:`Rbac.stored` reads the fake store's objects the same way.

Aggregated ClusterRoles (``aggregationRule``) are not expanded here, nor are they upstream: the
authorizer reads a ClusterRole's ``rules``, which the clusterrole-aggregation controller
(pkg/controller/clusterroleaggregation) writes. Neither deploy/ nor the two bootstrap roles
above use one, so the fake runs no such controller.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.apiserver import JsonDict, UserInfo
from testbed.cluster.common import AccessRule
from testbed.cluster.resources import Resource
from testbed.cluster.store import ApiError, Store

REPO = Path(__file__).resolve().parents[2]
DEPLOY_BASE = REPO / "deploy" / "base"
OWNER_REFERENCES_COMPONENT = REPO / "deploy" / "components" / "owner-references-enforcement"
RBAC_GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
CLUSTER_ROLES = Resource(RBAC_GROUP, "v1", "clusterroles", "ClusterRole", namespaced=False,
                         singular="clusterrole")  # fmt: skip
ROLES = Resource(RBAC_GROUP, "v1", "roles", "Role", singular="role")
CLUSTER_ROLE_BINDINGS = Resource(RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding",
                                 namespaced=False, singular="clusterrolebinding")  # fmt: skip
ROLE_BINDINGS = Resource(RBAC_GROUP, "v1", "rolebindings", "RoleBinding", singular="rolebinding")
# The four kinds the RBAC authorizer reads.
RESOURCES = (CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS)
_KINDS = tuple(r.kind for r in RESOURCES)
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# bootstrappolicy/policy.go: system:basic-user and system:discovery, bound to
# system:authenticated (system:public-info-viewer's URLs are part of system:discovery's).
_BOOTSTRAP: tuple[JsonDict, ...] = (
    {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:basic-user"},
        "rules": [
            {"apiGroups": ["authorization.k8s.io"],
             "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
             "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
             "verbs": ["create"]},
        ],
    },
    {
        "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:discovery"},
        "rules": [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                                       "/livez", "/readyz", "/openapi", "/openapi/*",
                                       "/version", "/version/"],
                   "verbs": ["get"]}],
    },
    *(
        {
            "apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": AUTHENTICATED}],
        }
        for role in ("system:basic-user", "system:discovery")
    ),
)  # fmt: skip


@dataclass(frozen=True)
class Attributes:
    """What the authorizer is asked (authorizer.Attributes): a resource request, or with
    ``path`` a non-resource URL."""

    user: str
    groups: tuple[str, ...]
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str | None = None

    @property
    def resource_request(self) -> bool:
        return self.path is None

    def review_attributes(self) -> JsonDict:
        """As a SubjectAccessReview's resourceAttributes or nonResourceAttributes."""
        if self.path is not None:
            return {"verb": self.verb, "path": self.path}
        return {"verb": self.verb, "group": self.group, "resource": self.resource,
                "subresource": self.subresource, "namespace": self.namespace,
                "name": self.name}  # fmt: skip

    @classmethod
    def of_review(cls, user: str, groups: Sequence[str], attrs: Mapping[str, Any]) -> Attributes:
        def text(key: str) -> str:
            return str(attrs.get(key) or "")

        if "path" in attrs:
            return cls(user, tuple(groups), text("verb"), path=text("path"))
        return cls(user, tuple(groups), text("verb"), text("group"), text("resource"),
                   text("subresource"), text("namespace"), text("name"))  # fmt: skip


def request_attributes(
    user: UserInfo, method: str, path: str, query: Mapping[str, str]
) -> Attributes:
    """The attributes of an HTTP request, as ``NewRequestInfo`` derives them."""
    parts = [p for p in path.split("/") if p]
    groups = tuple(user.groups)
    verb = _VERBS.get(method.upper(), method.lower())
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return Attributes(user.username, groups, verb, path="/" + "/".join(parts))
    if not rest:  # /api/v1, /apis/<group>/<version>: discovery
        return Attributes(user.username, groups, verb, path="/" + "/".join(parts))
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if (query.get("watch") or "").lower() in ("true", "1") else "list"
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user.username, groups, verb, group, resource, subresource, namespace, name)


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    """The 403 kube-apiserver answers when no authorizer allows the request."""
    if attrs.path is not None:
        message = f'User "{attrs.user}" cannot {attrs.verb} path "{attrs.path}"'
        return ApiError(403, f"forbidden: {message}" + (f": {reason}" if reason else ""),
                        "Forbidden", {})  # fmt: skip
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    where = (f'in the namespace "{attrs.namespace}"' if attrs.namespace
             else "at the cluster scope")  # fmt: skip
    message = (f'User "{attrs.user}" cannot {attrs.verb} resource "{resource}" in API group '
               f'"{attrs.group}" {where}')  # fmt: skip
    if reason:
        message = f"{message}: {reason}"
    qualified = attrs.resource + (f".{attrs.group}" if attrs.group else "")
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    details: JsonDict = {"name": attrs.name, "kind": attrs.resource}
    if attrs.group:
        details["group"] = attrs.group
    return ApiError(403, f"{subject} is forbidden: {message}", "Forbidden", details)


def _rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if attrs.path is not None:
        return any(
            url == "*" or url == attrs.path or (url.endswith("*") and attrs.path.startswith(url[:-1]))
            for url in rule.get("nonResourceURLs") or []
        )  # fmt: skip
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    combined = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    resources = rule.get("resources") or []
    if not any(
        r in ("*", combined) or (attrs.subresource and r == f"*/{attrs.subresource}")
        for r in resources
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _applies_to(subject: Mapping[str, Any], user: str, groups: Sequence[str], ns: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user)
    if kind == "Group":
        return subject.get("name") in groups
    if kind == "ServiceAccount":
        account_ns = subject.get("namespace") or ns
        return user == f"system:serviceaccount:{account_ns}:{subject.get('name')}"
    return False


def _role_key(role: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = role.get("metadata") or {}
    namespace = str(meta.get("namespace") or "") if role.get("kind") == "Role" else ""
    return (str(role.get("kind")), namespace, str(meta.get("name")))


def role_without(role: Mapping[str, Any], verb: str, group: str, resource: str) -> JsonDict:
    """A ClusterRole or Role with ``verb`` on ``group``/``resource`` taken out of every rule
    that grants it, the rest of each rule kept: what an operator's ``kubectl edit`` leaves."""
    edited: JsonDict = yaml.safe_load(yaml.safe_dump(dict(role)))
    rules = []
    for rule in edited.get("rules") or []:
        if (
            group in (rule.get("apiGroups") or [])
            and resource in (rule.get("resources") or [])
            and verb in (rule.get("verbs") or [])
        ):
            others = [r for r in rule["resources"] if r != resource]
            if others:
                rules.append({**rule, "resources": others})
            verbs = [v for v in rule.get("verbs") or [] if v != verb]
            if verbs:
                rules.append({**rule, "resources": [resource], "verbs": verbs})
        else:
            rules.append(rule)
    edited["rules"] = rules
    return edited


class Rbac:
    """Roles and bindings, as the RBAC authorizer reads them from the cluster: ``objects``,
    and with ``bootstrap`` the bootstrap roles every authenticated user is bound to."""

    def __init__(self, objects: Iterable[Mapping[str, Any]], *, bootstrap: bool = True) -> None:
        self.objects: tuple[JsonDict, ...] = tuple(
            dict(o) for o in objects if o and o.get("kind") in _KINDS
        )
        self.bootstrap = bootstrap
        evaluated = (*(_BOOTSTRAP if bootstrap else ()), *self.objects)
        self._bindings_in_order = tuple(
            o for o in evaluated if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        )
        # RoleGetter / ClusterRoleGetter: one role per (kind, namespace, name), the first.
        self._roles: dict[tuple[str, str, str], JsonDict] = {}
        for obj in evaluated:
            if obj["kind"] in ("ClusterRole", "Role"):
                self._roles.setdefault(_role_key(obj), obj)

    @classmethod
    def stored(cls, store: Store) -> Rbac | None:
        """What the store holds of the four kinds, with the bootstrap roles, as the authorizer
        reads it through its listers (module docstring); None where the store does not serve
        RBAC (a cluster without the RBAC authorizer)."""
        if not all(store.served(res) for res in RESOURCES):
            return None
        return cls([obj for res in RESOURCES for obj in store.list(res)])

    @classmethod
    def from_manifests(cls, directory: Path = DEPLOY_BASE) -> Rbac:
        """The roles and bindings of a kustomization's resource files, read as kustomize reads
        them (deploy/base names every namespace itself, so nothing is rewritten)."""
        return _from_manifests(directory.resolve())

    def moved(self, source: str, target: str) -> Rbac:
        """The same roles and bindings installed into namespace ``target`` instead of
        ``source``, as kustomize's ``namespace:`` with deploy/install-namespace moves them
        (every object's namespace and every ServiceAccount subject's)."""
        docs: list[JsonDict] = []
        for obj in self.objects:
            moved = yaml.safe_load(yaml.safe_dump(obj))
            if (moved.get("metadata") or {}).get("namespace") == source:
                moved["metadata"]["namespace"] = target
            for subject in moved.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and subject.get("namespace") == source:
                    subject["namespace"] = target
            docs.append(moved)
        return Rbac(docs, bootstrap=self.bootstrap)

    def _role(self, ref: Mapping[str, Any], namespace: str) -> Mapping[str, Any] | None:
        kind = str(ref.get("kind") or "")
        return self._roles.get((kind, namespace if kind == "Role" else "", str(ref.get("name"))))

    def _bindings(self, namespace: str) -> Iterable[tuple[Mapping[str, Any], str | None]]:
        """(binding, the namespace its grants are confined to, None for cluster-wide)."""
        for obj in self._bindings_in_order:
            if obj["kind"] == "ClusterRoleBinding":
                yield obj, None
            else:
                bound = str((obj.get("metadata") or {}).get("namespace") or "")
                if namespace in ("", bound):
                    yield obj, bound

    def roles_of(self, user: str) -> list[Mapping[str, Any]]:
        """The roles (ClusterRoles and Roles, bootstrap ones left out) some binding grants
        ``user`` by name (a User or ServiceAccount subject), each once, in binding order."""
        out: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for binding, scope in self._bindings(""):
            binding_ns = scope or ""
            if not any(_applies_to(s, user, (), binding_ns)
                       for s in binding.get("subjects") or []):  # fmt: skip
                continue
            role = self._role(binding.get("roleRef") or {}, binding_ns)
            if role is not None and any(role is o for o in self.objects):
                out.setdefault(_role_key(role), role)
        return list(out.values())

    def allowed_by(self, attrs: Attributes) -> str | None:
        """The reason RBAC allows the request ("RBAC: allowed by ..."), or None."""
        for binding, scope in self._bindings(attrs.namespace if attrs.resource_request else ""):
            if scope is not None and (scope != attrs.namespace or not attrs.resource_request):
                continue
            binding_ns = scope or ""
            subjects = binding.get("subjects") or []
            subject = next((s for s in subjects
                            if _applies_to(s, attrs.user, attrs.groups, binding_ns)), None)  # fmt: skip
            if subject is None:
                continue
            role = self._role(binding.get("roleRef") or {}, binding_ns)
            if role is None:
                continue
            if any(_rule_allows(rule, attrs) for rule in role.get("rules") or []):
                name = binding["metadata"]["name"]
                ref = binding["roleRef"]
                return (f'RBAC: allowed by {binding["kind"]} "{name}" of {ref["kind"]} '
                        f'"{ref["name"]}" to {subject["kind"]} "{subject["name"]}"')  # fmt: skip
        return None

    def grants(self, namespace: str, account: str) -> set[tuple[Any, ...]]:
        """(group, resource, verb, resourceNames, namespace or None) granted to a
        ServiceAccount by the manifests' own bindings (the bootstrap ones left out)."""
        user = f"system:serviceaccount:{namespace}:{account}"
        out: set[tuple[Any, ...]] = set()
        for binding, scope in self._bindings(""):
            if str(binding["metadata"]["name"]).startswith("system:"):
                continue
            binding_ns = scope or ""
            if not any(_applies_to(s, user, (), binding_ns) for s in binding.get("subjects") or []):
                continue
            role = self._role(binding.get("roleRef") or {}, binding_ns)
            assert role is not None, f"{binding['kind']} {binding['metadata']['name']}: no role"
            for rule in role.get("rules") or []:
                names = tuple(sorted(rule.get("resourceNames") or []))
                for group in rule.get("apiGroups") or []:
                    for resource in rule.get("resources") or []:
                        for verb in rule.get("verbs") or []:
                            out.add((group, resource, verb, names, scope))
        return out


@functools.cache
def _from_manifests(directory: Path) -> Rbac:
    return Rbac(_documents(directory))


def _documents(directory: Path) -> list[JsonDict]:
    """The documents of a kustomization's resources and components, bases included (the RBAC
    objects of deploy/ are not patched by any overlay, so no patch needs applying)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    docs: list[JsonDict] = []
    for entry in [*(kustomization.get("resources") or []),
                  *(kustomization.get("components") or [])]:  # fmt: skip
        path = (directory / str(entry)).resolve()
        if path.is_dir():
            docs.extend(_documents(path))
        elif path.is_file():
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


@dataclass(frozen=True)
class Decision:
    allowed: bool
    denied: bool
    reason: str


def decide(
    attrs: Attributes,
    rules: Sequence[AccessRule],
    rbac: Rbac | None,
    *,
    otherwise: bool,
) -> Decision:
    """The authorizer chain: system:masters, then the explicit rules in order (first match
    decides, an explicit deny included, as a webhook authorizer can), then RBAC, then
    ``otherwise`` (a cluster without RBAC for this subject allows or denies everything)."""
    if MASTERS in attrs.groups:
        return Decision(True, False, "")
    review = attrs.review_attributes()
    for rule in rules:
        if rule.matches(attrs.user, list(attrs.groups), review):
            return Decision(rule.allowed, not rule.allowed, rule.reason)
    if rbac is not None:
        reason = rbac.allowed_by(attrs)
        if reason is not None:
            return Decision(True, False, reason)
    return Decision(otherwise, False, "")


__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "DEPLOY_BASE",
    "OWNER_REFERENCES_COMPONENT",
    "RESOURCES",
    "ROLES",
    "ROLE_BINDINGS",
    "Attributes",
    "Decision",
    "Rbac",
    "decide",
    "forbidden",
    "request_attributes",
    "role_without",
]
