"""Who the controllers are, as installed, against the controllers the cluster runs.

The usernames of the controllers autowrap leaves alone are one list, copied by
``deploy/controller-identities`` into the ValidatingAdmissionPolicy ``autowrap-wrapped-pods``
(its variable ``controllers``) and the two matchConditions of each ``*-always`` webhook entry
(docs/security.md, "Who the controllers are"). A controller that runs under a name missing from
it has the pods it makes for a Volcano Job or an AppWrapper refused by that policy, and in
``wrap: Always`` namespaces what it creates is sent to autowrap, which refuses it too: the jobs
wait, and nothing says why until someone reads the refusals. So the list is read as installed
(those objects are the authority, not the repository's file), and every Deployment and
StatefulSet whose pods' ServiceAccount RBAC lets create pods is looked up in it: the ones that
may in every namespace, or in an Always namespace besides their own (:func:`_judged` says why a
namespace's own workloads are left out). Listing a name exempts what it creates from wrapping,
so the fix says to list only a controller one trusts.

RBAC is evaluated as kube-apiserver's authorizer does (kubernetes pkg/registry/rbac/validation/
rule.go ``VisitRulesFor`` and ``appliesToUser``; pkg/apis/rbac/v1/evaluation_helpers.go
``VerbMatches``, ``APIGroupMatches``, ``ResourceMatches``, ``ResourceNameMatches``): every
ClusterRoleBinding, and each RoleBinding for its own namespace; a ServiceAccount is matched by
name and by its groups. Static pods (kube-controller-manager on most clusters) are no Deployment
and are not looked for: the list names them by default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from webhook.cli.doctor.facts import (
    MUTATING,
    VALIDATING,
    Facts,
    Obj,
    cannot_read,
    fix_read,
    hooks_of,
    unread_reason,
)
from webhook.cli.doctor.findings import OK, WARN, Finding
from webhook.model import names, objects
from webhook.model.objects import as_list, as_map

CHECK = "controller-identities"
WRAPPED_PODS = "autowrap-wrapped-pods"
CONTROLLERS_VARIABLE = "controllers"
# The matchConditions of the *-always entries that open with the list.
CONDITIONS = ("not-from-its-controller", "appwrapper-label-only-from-its-controller")
IDENTITIES_CONFIGMAP = "autowrap-controller-identities"
TRANSFORMER = "deploy/controller-identities"
# A CEL string literal, in single or double quotes.
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")


def listed_in(expression: str) -> list[str] | None:
    """The usernames of the CEL list literal ``expression`` opens with (``['a', 'b'].all(...``),
    or None when it opens with anything else (edited by hand into another shape)."""
    text = expression.lstrip()
    end = text.find("]")
    if not text.startswith("[") or end < 0:
        return None
    literal = text[1:end]
    if _QUOTED.sub("", literal).replace(",", "").strip():
        return None
    return [single or double for single, double in _QUOTED.findall(literal)]


def installed_lists(facts: Facts) -> dict[str, list[str] | None]:
    """Each place that reads the list, as installed: the policy's variable and the conditions of
    the webhook entries (None where the expression does not open with a list)."""
    places: dict[str, list[str] | None] = {}
    policy = facts.admission_policies.get(WRAPPED_PODS)
    for variable in as_list(as_map(as_map(policy).get("spec")).get("variables")):
        if as_map(variable).get("name") == CONTROLLERS_VARIABLE:
            places[f"ValidatingAdmissionPolicy {WRAPPED_PODS}"] = listed_in(
                str(as_map(variable).get("expression") or "")
            )
    for configuration_name, configuration in ((MUTATING, facts.mutating),
                                              (VALIDATING, facts.validating)):  # fmt: skip
        for hook_name, hook in hooks_of(configuration).items():
            for condition in as_list(hook.get("matchConditions")):
                condition = as_map(condition)
                if condition.get("name") in CONDITIONS:
                    where = f"{configuration_name}/{hook_name} ({condition.get('name')})"
                    places[where] = listed_in(str(condition.get("expression") or ""))
    return places


# --- which controllers may create pods -----------------------------------------------------------


@dataclass(frozen=True)
class PodCreator:
    """A ServiceAccount that workloads run under and RBAC lets create pods: where (every
    namespace, or those of its RoleBindings), and through which bindings."""

    namespace: str
    account: str
    workloads: tuple[str, ...]  # "Deployment volcano-system/volcano-controllers", ...
    everywhere: bool
    namespaces: tuple[str, ...] = ()
    bindings: tuple[str, ...] = field(default=())

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"

    @property
    def elsewhere(self) -> tuple[str, ...]:
        """The namespaces besides its own where RoleBindings let it create pods."""
        return tuple(ns for ns in self.namespaces if ns != self.namespace)


def service_account_of(workload: Obj) -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount a Deployment's or StatefulSet's pods run under:
    ``serviceAccountName``, its deprecated alias ``serviceAccount``, else ``default``."""
    spec = as_map(as_map(as_map(workload.get("spec")).get("template")).get("spec"))
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    return _namespace_of(workload), str(account)


def _namespace_of(obj: Obj) -> str:
    return str(as_map(obj.get("metadata")).get("namespace") or "")


def _grants_pod_create(rule: Mapping[str, object]) -> bool:
    """A PolicyRule that allows ``create`` on core ``pods`` (a rule naming resourceNames never
    matches a create, which has no name)."""

    def has(key: str, *values: str) -> bool:
        return any(v in values for v in as_list(rule.get(key)))

    return (has("verbs", "create", "*") and has("apiGroups", "", "*")
            and has("resources", "pods", "*") and not as_list(rule.get("resourceNames")))  # fmt: skip


def _applies_to(subject: Mapping[str, object], namespace: str, account: str, ns: str) -> bool:
    """rule.go appliesToUser for a ServiceAccount user: the ServiceAccount itself (a subject
    without a namespace means the binding's), or one of its groups."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return name == account and (subject.get("namespace") or ns) == namespace
    if kind == "Group":
        return name in ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                        "system:authenticated")  # fmt: skip
    return kind == "User" and name == f"system:serviceaccount:{namespace}:{account}"


def pod_creators(
    workloads: Sequence[Obj], roles: Sequence[Obj], bindings: Sequence[Obj]
) -> list[PodCreator]:
    """Every ServiceAccount the ``workloads`` run under that the ``bindings`` let create pods,
    with the workloads that run under it; sorted by username."""
    creating: dict[tuple[str, str], bool] = {}
    for role in roles:
        meta = as_map(role.get("metadata"))
        key = (str(meta.get("namespace") or "") if role.get("kind") == "Role" else "",
               f"{role.get('kind')}/{meta.get('name')}")  # fmt: skip
        creating[key] = any(_grants_pod_create(as_map(r)) for r in as_list(role.get("rules")))
    by_account: dict[tuple[str, str], list[str]] = {}
    for workload in workloads:
        label = f"{workload.get('kind')} {_namespace_of(workload)}/{objects.name_of(workload)}"
        by_account.setdefault(service_account_of(workload), []).append(label)
    out = []
    for (namespace, account), labels in sorted(by_account.items()):
        everywhere, where, through = False, set[str](), list[str]()
        for binding in bindings:
            meta = as_map(binding.get("metadata"))
            cluster_wide = binding.get("kind") == "ClusterRoleBinding"
            ns = "" if cluster_wide else str(meta.get("namespace") or "")
            ref = as_map(binding.get("roleRef"))
            role_ns = ns if ref.get("kind") == "Role" else ""
            if not creating.get((role_ns, f"{ref.get('kind')}/{ref.get('name')}")):
                continue
            if not any(_applies_to(as_map(s), namespace, account, ns)
                       for s in as_list(binding.get("subjects"))):  # fmt: skip
                continue
            everywhere |= cluster_wide
            where |= {ns} if ns else set()
            through.append(f"{binding.get('kind')} {meta.get('name')}")
        if through:
            out.append(PodCreator(namespace, account, tuple(labels), everywhere,
                                  tuple(sorted(where)), tuple(through)))  # fmt: skip
    return out


# --- the check -----------------------------------------------------------------------------------


def _judged(creator: PodCreator, facts: Facts) -> bool:
    """Whether the list must name ``creator``: a controller of the cluster may create pods in
    every namespace, or (installed per namespace, as some operators are) through RoleBindings
    in namespaces besides its own, of which one is labelled Always (or the labels were not
    read). A grant in its own namespace alone makes a workload of that namespace, such as a
    notebook or a CI runner: its pods are wrapped there by design, and listing it would let
    anyone who may act as that ServiceAccount (a namespace editor) skip wrapping."""
    if creator.everywhere or "namespaces" in facts.unreadable and creator.elsewhere:
        return True
    always = {objects.name_of(ns) for ns in facts.namespaces
              if objects.labels_of(ns).get(names.WRAP_LABEL) == "Always"}  # fmt: skip
    return bool(set(creator.elsewhere) & always)


def _patch(listed: Sequence[str], missing: Sequence[str]) -> str:
    """The overlay patch docs/security.md shows, with ``missing`` added to the list."""
    value = "[" + ", ".join(f"'{u}'" for u in [*listed, *missing]) + "]"
    return (f"in your overlay of autowrap's release, patch ConfigMap {IDENTITIES_CONFIGMAP} "
            f"with `- op: replace`, `path: /data/usernames`, `value: \"{value}\"`, list "
            f"{TRANSFORMER} under `transformers:` (docs/security.md, \"Who the controllers "
            "are\"), and apply the overlay")  # fmt: skip


def controller_identities(facts: Facts) -> list[Finding]:
    """Each controller that may create pods under a name the installed list lacks: a warning
    with the overlay patch that adds it."""
    for key, what in (("workloads", "Deployments and StatefulSets"),
                      ("rbac_objects", "ClusterRoles, Roles and their bindings")):  # fmt: skip
        if cannot := cannot_read(facts, "autowrap", CHECK, key, what, what):
            return [cannot]
    places = installed_lists(facts)
    if not places:
        unread = [why for key in ("admission_policies", MUTATING, VALIDATING)
                  if (why := unread_reason(facts, key, key.replace("_", " ")))]  # fmt: skip
        return [Finding("autowrap", CHECK, WARN,
                        "; ".join(unread) or f"no installed list of controllers: neither "
                        f"{WRAPPED_PODS} nor the *-always webhook entries were found",
                        fix_read("ValidatingAdmissionPolicies and webhook configurations")
                        if unread else "apply the release file again")]  # fmt: skip
    out = []
    unparsed = sorted(p for p, found in places.items() if found is None)
    parsed = {p: set(found) for p, found in places.items() if found is not None}
    anywhere = set[str]().union(*parsed.values())
    agreed = anywhere.intersection(*parsed.values())
    differ = sorted(f"{p} lacks {', '.join(sorted(anywhere - found))}"
                    for p, found in parsed.items() if found != anywhere)  # fmt: skip
    if unparsed or differ:
        said = ([f"{', '.join(unparsed)} do not open with a list of usernames"] if unparsed
                else []) + differ  # fmt: skip
        out.append(Finding("autowrap", CHECK, WARN,
                           "the places that read the controllers' list disagree: "
                           + "; ".join(said),
                           f"apply your overlay again ({TRANSFORMER} copies the one list into "
                           "every place); never edit the installed objects by hand"))  # fmt: skip
    order = next((found for found in places.values() if found is not None), [])
    listed = [u for u in order if u in agreed]
    own = f"system:serviceaccount:{facts.install_namespace}:{names.SERVICE_NAME}"
    creators = [c for c in pod_creators(facts.workloads, facts.rbac_roles, facts.rbac_bindings)
                if c.username != own]  # fmt: skip
    judged = [c for c in creators if _judged(c, facts)]
    unlisted = [c for c in judged if c.username not in agreed]
    fix = _patch(listed, [c.username for c in unlisted])
    for creator in unlisted:
        scope = ("in every namespace" if creator.everywhere
                 else f"in {', '.join(creator.elsewhere)}")  # fmt: skip
        out.append(Finding(
            "autowrap", CHECK, WARN,
            f"{', '.join(creator.workloads)} runs as {creator.username}, which may create pods "
            f"{scope} ({', '.join(creator.bindings)}) but is not in the installed controllers' "
            f"list: the pods it makes for a Volcano Job or an AppWrapper are refused "
            f"({WRAPPED_PODS}), and in wrap: Always namespaces what it creates is sent to "
            "autowrap, which refuses it",
            f"if it is a controller you trust (a listed identity's objects are not wrapped, "
            f"and it may create pods that claim a wrapped object), add '{creator.username}' to "
            f"the list: {fix}",
        ))  # fmt: skip
    if not unlisted:
        out.append(Finding("autowrap", CHECK, OK,
                           f"{len(judged)} controller identities may create pods, each in the "
                           f"installed list of {len(listed)}"))  # fmt: skip
    return out
