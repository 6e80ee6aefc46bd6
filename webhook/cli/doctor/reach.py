"""Who reaches autowrap and whom autowrap serves: the NetworkPolicy in front of the webhook
port, and whether the people who edit a namespace may create the AppWrappers their jobs become
(autowrap creates one only for a user who may: a SubjectAccessReview, in both modes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.cli.doctor.facts import NETWORK_POLICY, WEBHOOK_PORT, Facts, unread_reason
from webhook.cli.doctor.findings import FAIL, OK, WARN, Finding
from webhook.model import names
from webhook.model.objects import as_list, as_map

SUBMITTER_ROLE = "autowrap-submitter"
AGGREGATE_TO_EDIT = "rbac.authorization.k8s.io/aggregate-to-edit"
_OPEN = ("0.0.0.0/0", "::/0")
_CIDR_FIX = (
    "set the control plane's range in the NetworkPolicy's ipBlock (docs/install.md, \"The "
    "control plane's range\" says where to find it on EKS, GKE, AKS and kubeadm)"
)


def network_policy(facts: Facts) -> Finding:
    check = "network-policy"
    where = f"NetworkPolicy {facts.install_namespace}/{NETWORK_POLICY}"
    unread = unread_reason(facts, "network_policy", where)
    if unread:
        return Finding("autowrap", check, WARN, unread,
                       "grant get on networkpolicies to read it")  # fmt: skip
    if facts.network_policy is None:
        return Finding("autowrap", check, WARN,
                       f"{where} not found: anyone who reaches the Service may call the webhooks",
                       f"apply deploy/base/networkpolicy.yaml, then {_CIDR_FIX}")  # fmt: skip
    sources = _webhook_sources(facts.network_policy)
    if sources is None:
        return Finding("autowrap", check, WARN,
                       f"{where} admits every source on the webhook port {WEBHOOK_PORT} (a rule "
                       "without from)", _CIDR_FIX)  # fmt: skip
    open_blocks = [s for s in sources if s in _OPEN]
    if open_blocks:
        return Finding("autowrap", check, WARN,
                       f"{where} admits {', '.join(open_blocks)} on the webhook port "
                       f"{WEBHOOK_PORT}: everyone, as shipped", _CIDR_FIX)  # fmt: skip
    return Finding("autowrap", check, OK,
                   f"{where} admits {', '.join(sources) or 'nobody'} on the webhook port "
                   f"{WEBHOOK_PORT} (it takes effect only with a CNI that enforces "
                   "NetworkPolicies)")  # fmt: skip


def _webhook_sources(policy: Mapping[str, Any]) -> list[str] | None:
    """The sources the policy admits on the webhook port: ipBlock CIDRs, selectors said as
    such; None when a rule admits every source."""
    out: list[str] = []
    for rule in as_list(as_map(policy.get("spec")).get("ingress")):
        rule = as_map(rule)
        ports = [as_map(p).get("port") for p in as_list(rule.get("ports"))]
        if ports and WEBHOOK_PORT not in ports and "https" not in ports:
            continue
        peers = as_list(rule.get("from"))
        if not peers:
            return None
        for peer in peers:
            peer = as_map(peer)
            block = as_map(peer.get("ipBlock"))
            if block.get("cidr"):
                out.append(str(block["cidr"]))
            elif peer:
                out.append("pods or namespaces by selector")
    return out


def submitters(facts: Facts) -> Finding:
    """Whether the built-in ``edit`` role (which namespace editors hold) allows creating
    AppWrappers: the install aggregates autowrap-submitter into it."""
    check = "submitters"
    unread = unread_reason(facts, "rbac_objects", "ClusterRoles")
    if unread:
        return Finding("policies", check, WARN, unread, "grant list on clusterroles to read them")
    roles = {str(as_map(r.get("metadata")).get("name")): r for r in facts.rbac_roles
             if r.get("kind") == "ClusterRole"}  # fmt: skip
    edit = roles.get("edit")
    if edit is not None and _allows_create(edit):
        return Finding("policies", check, OK,
                       "the ClusterRole edit allows creating AppWrappers: whoever may edit a "
                       "namespace may submit wrapped jobs there")  # fmt: skip
    submitter = roles.get(SUBMITTER_ROLE)
    aggregated = submitter is not None and (
        as_map(as_map(submitter.get("metadata")).get("labels")).get(AGGREGATE_TO_EDIT) == "true"
    )
    if aggregated and edit is not None:
        return Finding("policies", check, WARN,
                       f"{SUBMITTER_ROLE} is labelled {AGGREGATE_TO_EDIT}, but the ClusterRole "
                       "edit does not allow creating AppWrappers yet: the clusterrole-aggregation "
                       "controller of kube-controller-manager has not merged it",
                       "check that kube-controller-manager runs with its default controllers; "
                       f"or bind {SUBMITTER_ROLE} in each namespace with a RoleBinding")  # fmt: skip
    if edit is None:
        return Finding("policies", check, WARN,
                       "no ClusterRole edit: whether namespace editors may create AppWrappers is "
                       "unknown",
                       f"bind {SUBMITTER_ROLE} to the people and ServiceAccounts that submit, in "
                       "each namespace")  # fmt: skip
    return Finding("policies", check, FAIL,
                   "the ClusterRole edit does not allow creating AppWrappers: a namespace "
                   "editor's labelled job is refused (autowrap creates an AppWrapper only for a "
                   "user who may)",
                   f"apply the install's {SUBMITTER_ROLE} (deploy/base/user-rbac.yaml, aggregated "
                   f"to edit), or bind {SUBMITTER_ROLE} with a RoleBinding in each namespace that "
                   "submits (kubectl create rolebinding autowrap-submitters -n NS "
                   f"--clusterrole={SUBMITTER_ROLE} --group=GROUP)")  # fmt: skip


def _allows_create(role: Mapping[str, Any]) -> bool:
    for rule in as_list(role.get("rules")):
        rule = as_map(rule)
        groups = as_list(rule.get("apiGroups"))
        resources = as_list(rule.get("resources"))
        verbs = as_list(rule.get("verbs"))
        if (
            (names.APPWRAPPER_GROUP in groups or "*" in groups)
            and (names.APPWRAPPER_PLURAL in resources or "*" in resources)
            and ("create" in verbs or "*" in verbs)
        ):
            return True
    return False
