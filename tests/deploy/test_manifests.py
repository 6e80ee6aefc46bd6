"""The deployment (deploy/, Dockerfile) agrees with Kubernetes and with the server's contract.

The kustomize renderings are built with `kubectl kustomize`, exactly as `kubectl apply -k`
would build them, and checked as data: schema validity, which webhooks an object reaches,
what the pods run with, what the service account may do.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import importlib
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import prerequisites
from testbed.apiserver import ApiserverEmulator, UserInfo, selector_matches
from testbed.cluster.rbac import Rbac
from testbed.pki import ServingPki
from testbed.redirect import cel_predicates
from tests.builders import VolcanoJobBuilder
from webhook.cli import main as cli
from webhook.core import kinds
from webhook.model import names

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
VARIANTS = {
    "base": DEPLOY / "base",
    "cert-manager": DEPLOY / "overlays" / "cert-manager",
    "self-managed": DEPLOY / "overlays" / "self-managed",
    "without-component-create": DEPLOY / "overlays" / "without-component-create",
}
# The oldest Kubernetes the manifests target: matchConditions are GA since 1.30.
KUBERNETES_VERSION = "1.30"
# Custom resources kubernetes-validate has no schema for; anything else unknown is an error.
CRD_KINDS_WITHOUT_SCHEMA = {
    ("cert-manager.io/v1", "Issuer"): "cert-manager CRD, not part of the Kubernetes schemas",
    ("cert-manager.io/v1", "Certificate"): "cert-manager CRD, not part of the Kubernetes schemas",
}
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease", "kube-public", names.SERVICE_NAMESPACE)
WEBHOOK_CONFIGURATIONS = {
    "MutatingWebhookConfiguration": "autowrap-mutating",
    "ValidatingWebhookConfiguration": "autowrap-validating",
}
PATH_FOR_KIND = {
    "MutatingWebhookConfiguration": names.MUTATE_PATH,
    "ValidatingWebhookConfiguration": names.VALIDATE_PATH,
}
SERVING_SECRET = "autowrap-serving-cert"
APPWRAPPER_CONTROLLER = ("appwrapper-system", "appwrapper-controller-manager")
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
# Calls the server's code lists (kube.RBAC) that the base ClusterRole does not grant:
# the deletes exist only for OwnerReferencesPermissionEnforcement, and are granted by the
# component deploy/components/owner-references-enforcement.
OWNER_REFERENCE_DELETES = {("batch.volcano.sh", "jobs", "delete"), ("", "pods", "delete")}
NOT_GRANTED = OWNER_REFERENCE_DELETES

Obj = dict[str, Any]


# --- rendering --------------------------------------------------------------------------------


@functools.cache
def _render(variant: str) -> tuple[Obj, ...]:
    done = subprocess.run(
        ["kubectl", "kustomize", str(VARIANTS[variant])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize {variant} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(variant: str) -> tuple[Obj, ...]:
    prerequisites.kubectl()  # skipped without it, failed in CI
    return _render(variant)


@pytest.fixture(params=sorted(VARIANTS))
def rendered(request: pytest.FixtureRequest) -> tuple[Obj, ...]:
    return render(request.param)


def find(objs: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def the(objs: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhooks(objs: Iterable[Obj], *, policies: bool = False) -> Iterator[tuple[str, Obj]]:
    """The workload webhooks (Volcano Jobs, Pods, AppWrappers); with ``policies``, also the
    entry that checks the policy ConfigMap (tested on its own below)."""
    for kind in WEBHOOK_CONFIGURATIONS:
        for config in find(objs, kind):
            for hook in config.get("webhooks", []):
                if policies or hook["name"] != POLICIES:
                    yield kind, hook


def pod_spec(objs: Iterable[Obj]) -> Obj:
    spec: Obj = the(objs, "Deployment", names.SERVICE_NAME)["spec"]["template"]["spec"]
    return spec


def container(objs: Iterable[Obj]) -> Obj:
    containers = pod_spec(objs)["containers"]
    assert len(containers) == 1
    c: Obj = containers[0]
    return c


def flag(args: list[str], name: str) -> str | None:
    """The value of `--name value` or `--name=value` in a command line."""
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def container_port(objs: Iterable[Obj], port: int | str) -> int:
    if isinstance(port, int):
        return port
    for p in container(objs).get("ports", []):
        if p.get("name") == port:
            number: int = p["containerPort"]
            return number
    raise AssertionError(f"no container port named {port!r}")


def volume_mounted_at(objs: Iterable[Obj], path: str) -> Obj:
    mounts = [m for m in container(objs).get("volumeMounts", []) if m["mountPath"] == path]
    assert mounts, f"nothing is mounted at {path}"
    volumes = [v for v in pod_spec(objs)["volumes"] if v["name"] == mounts[0]["name"]]
    assert len(volumes) == 1
    volume: Obj = volumes[0]
    return volume


# --- admission matching, as the apiserver does it ------------------------------------------------


def conditions_match(
    hook: Obj, obj: Obj, old: Obj | None = None, operation: str = "CREATE", user: str = "alice"
) -> bool:
    """matchConditions with the variables kube-apiserver binds: object, oldObject (null on
    CREATE) and request."""
    conditions = hook.get("matchConditions") or []
    if not conditions:
        return True
    celpy = pytest.importorskip(
        "celpy", reason="cel-python is not installed: matchConditions cannot be evaluated"
    )
    env = celpy.Environment()
    activation = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": operation, "userInfo": {"username": user}}),
    }
    return all(
        bool(env.program(env.compile(c["expression"])).evaluate(activation)) for c in conditions
    )


def rule_matches(hook: Obj, api_version: str, resource: str, operation: str = "CREATE") -> bool:
    group, _, version = api_version.rpartition("/")
    for rule in hook["rules"]:
        if (
            group in rule["apiGroups"]
            and version in rule["apiVersions"]
            and resource in rule["resources"]
            and operation in rule["operations"]
        ):
            return True
    return False


def labels_of(obj: Obj | None) -> dict[str, str]:
    labels: dict[str, str] = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels


def webhooks_called(
    objs: Iterable[Obj],
    *,
    resource: str,
    obj: Obj,
    namespace_labels: dict[str, str],
    old: Obj | None = None,
    kind: str | None = None,
    user: str = "alice",
) -> list[str]:
    """The webhooks the apiserver calls when `obj` is created (or, with `old`, updated) in a
    namespace with those labels; `kind` keeps only one of the two configurations.

    The objectSelector is matched against the new and the old object and matches if either
    does (MutatingWebhook.ObjectSelector, kubernetes/api admissionregistration/v1/types.go)."""
    operation = "CREATE" if old is None else "UPDATE"
    return [
        hook["name"]
        for configuration, hook in webhooks(objs)
        if (kind is None or configuration == kind)
        and rule_matches(hook, obj["apiVersion"], resource, operation)
        and selector_matches(hook.get("namespaceSelector"), namespace_labels)
        and (
            selector_matches(hook.get("objectSelector"), labels_of(obj))
            or (old is not None and selector_matches(hook.get("objectSelector"), labels_of(old)))
        )
        and conditions_match(hook, obj, old, operation, user)
    ]


def namespace(name: str, **labels: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name, **labels}


def _owner(api_version: str, kind: str, controller: bool = True) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": "o",
        "uid": "1",
        "controller": controller,
    }


# A controller that really creates each kind (its adapter's owner_kinds).
REAL_OWNER = {"Job": _owner("workload.codeflare.dev/v1beta2", "AppWrapper"),
              "Pod": _owner("apps/v1", "ReplicaSet")}  # fmt: skip
MADE_UP_OWNER = _owner("v1", "ConfigMap")


def vcjob(
    labels: dict[str, str] | None = None, owned: bool = False, owner: Obj | None = None
) -> Obj:
    job = VolcanoJobBuilder("train", ns="team-a").meta(labels=labels or {})
    if owned or owner is not None:
        job.meta(ownerReferences=[owner or REAL_OWNER["Job"]])
    return job.build()


def pod(labels: dict[str, str] | None = None, owned: bool = False, owner: Obj | None = None) -> Obj:
    job = vcjob(labels, owned, owner)
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": job["metadata"]}
    if owned and owner is None:
        obj["metadata"] = {**obj["metadata"], "ownerReferences": [REAL_OWNER["Pod"]]}
    return obj


def appwrapper(*templates: Obj) -> Obj:
    return {
        "apiVersion": names.APPWRAPPER_API_VERSION,
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "namespace": "team-a"},
        "spec": {"components": [{"template": t} for t in templates]},
    }


def rbac_grants(objs: Iterable[Obj], namespace_: str, account: str) -> set[tuple[Any, ...]]:
    """(group, resource, verb, resourceNames, role-namespace) granted to a service account,
    by the fake cluster's RBAC evaluator (the one that authorizes autowrap in the tests)."""
    return Rbac(objs).grants(namespace_, account)


# --- every rendering ---------------------------------------------------------------------------


def test_every_rendering_passes_kubernetes_schema_validation(rendered: tuple[Obj, ...]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    checked = 0
    for obj in rendered:
        key = (obj["apiVersion"], obj["kind"])
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            checked += 1
        except kubernetes_validate.SchemaNotFoundError:
            assert key in CRD_KINDS_WITHOUT_SCHEMA, f"no schema for {key} and no reason to skip"
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {where}: {e.message}")
    assert checked >= 10


def test_every_namespaced_object_lives_in_the_autowrap_namespace(
    rendered: tuple[Obj, ...],
) -> None:
    for obj in rendered:
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in CLUSTER_SCOPED_KINDS:
            assert ns is None, obj["metadata"]["name"]
        else:
            assert ns == names.SERVICE_NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"


def test_both_webhook_configurations_exist_under_their_names(rendered: tuple[Obj, ...]) -> None:
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        assert the(rendered, kind, name)["webhooks"]


# --- webhooks ----------------------------------------------------------------------------------


def test_every_webhook_calls_the_autowrap_service_on_the_path_for_its_kind(
    rendered: tuple[Obj, ...],
) -> None:
    for kind, hook in webhooks(rendered):
        service = hook["clientConfig"]["service"]
        assert "url" not in hook["clientConfig"]
        assert service["name"] == names.SERVICE_NAME
        assert service["namespace"] == names.SERVICE_NAMESPACE
        assert service["path"] == PATH_FOR_KIND[kind], hook["name"]
        assert service.get("port", 443) == 443


def test_the_service_sends_https_to_the_serving_port_and_exposes_metrics(
    rendered: tuple[Obj, ...],
) -> None:
    service = the(rendered, "Service", names.SERVICE_NAME)
    assert service["metadata"]["namespace"] == names.SERVICE_NAMESPACE
    ports = {p["port"]: p for p in service["spec"]["ports"]}
    assert container_port(rendered, ports[443]["targetPort"]) == names.SERVING_PORT
    metrics = [
        p for p in ports.values() if container_port(rendered, p["targetPort"]) == names.METRICS_PORT
    ]
    assert metrics, "the metrics port is not exposed"
    pod_labels = the(rendered, "Deployment", names.SERVICE_NAME)["spec"]["template"]["metadata"][
        "labels"
    ]
    assert selector_matches({"matchLabels": service["spec"]["selector"]}, pod_labels)


REAPPLY = "vcjobs.reapply.autowrap.io"
# The UPDATE entries, each a mutating one that only makes a re-apply change nothing (Ignore).
UPDATE_ENTRIES = {
    REAPPLY: (["batch.volcano.sh"], ["jobs"]),
    "appwrappers.reapply.autowrap.io": (["workload.codeflare.dev"], ["appwrappers"]),
    "vcjobs.redirected.autowrap.io": (["batch.volcano.sh"], ["jobs"]),
}
POLICIES = "policies.validate.autowrap.io"
POLICY_CONFIGMAP = "autowrap-policies"


def test_every_webhook_is_create_only_but_the_reapply_entries(
    rendered: tuple[Obj, ...],
) -> None:
    for kind, hook in webhooks(rendered):
        expected = ["UPDATE"] if hook["name"] in UPDATE_ENTRIES else ["CREATE"]
        for rule in hook["rules"]:
            assert rule["operations"] == expected, hook["name"]
            assert "*" not in rule["resources"] + rule["apiGroups"], hook["name"]
        if hook["name"] in UPDATE_ENTRIES:
            assert kind == "MutatingWebhookConfiguration"
            assert [(r["apiGroups"], r["resources"]) for r in hook["rules"]] == [
                UPDATE_ENTRIES[hook["name"]]
            ]
    assert set(UPDATE_ENTRIES) <= {h["name"] for _, h in webhooks(rendered)}


def test_every_webhook_sets_timeout_and_failure_policy_explicitly(
    rendered: tuple[Obj, ...],
) -> None:
    for kind, hook in webhooks(rendered):
        assert 1 <= hook["timeoutSeconds"] <= 30, hook["name"]
        assert hook["failurePolicy"] in {"Fail", "Ignore"}, hook["name"]
        assert hook["admissionReviewVersions"] == ["v1"], hook["name"]
        if kind == "MutatingWebhookConfiguration":
            assert hook["reinvocationPolicy"] == "Never", hook["name"]


def test_every_webhook_fails_closed_but_the_reapply_of_adopted_jobs(
    rendered: tuple[Obj, ...],
) -> None:
    # Within their tight scope: an opted-in job is never created unprepared or unwrapped, a
    # wrapped job's pod never starts without its rank, an AppWrapper is never queued
    # incomplete. The re-apply entry only makes a re-apply idempotent (Volcano refuses any
    # other spec change): failing closed would block every update of adopted Jobs, including
    # the garbage collector's, while autowrap is down.
    for _, hook in webhooks(rendered):
        expected = "Ignore" if hook["name"] in UPDATE_ENTRIES else "Fail"
        assert hook["failurePolicy"] == expected, hook["name"]


@pytest.mark.parametrize("system_namespace", SYSTEM_NAMESPACES)
def test_every_webhook_excludes_system_namespaces(
    rendered: tuple[Obj, ...], system_namespace: str
) -> None:
    # Even when someone labels the namespace as an opt-in namespace.
    for labels in (
        namespace(system_namespace),
        namespace(system_namespace, **{names.WRAP_LABEL: "Always"}),
    ):
        for _, hook in webhooks(rendered):
            assert hook.get("namespaceSelector"), hook["name"]
            assert not selector_matches(hook["namespaceSelector"], labels), hook["name"]


def test_only_webhooks_that_create_appwrappers_declare_side_effects_on_non_dry_runs(
    rendered: tuple[Obj, ...],
) -> None:
    # The validating wrap entries create the AppWrapper when a policy says Redirect; every
    # mutating entry (adopt mode's preparation and re-apply included) is pure.
    for kind, hook in webhooks(rendered):
        wraps = kind == "ValidatingWebhookConfiguration" and any(
            r["resources"] != [names.APPWRAPPER_PLURAL] for r in hook["rules"]
        )
        assert hook["sideEffects"] == ("NoneOnDryRun" if wraps else "None"), hook["name"]


def test_appwrapper_webhooks_answer_within_the_wrap_webhooks_budget(
    rendered: tuple[Obj, ...],
) -> None:
    # A wrap webhook creates an AppWrapper, whose admission (autowrap's AppWrapper webhooks
    # among others) runs inside the wrap webhook's own timeout.
    appwrapper_hooks = [
        h
        for _, h in webhooks(rendered)
        if rule_matches(h, names.APPWRAPPER_API_VERSION, names.APPWRAPPER_PLURAL)
    ]
    wrap_hooks = [h for _, h in webhooks(rendered) if h["sideEffects"] == "NoneOnDryRun"]
    assert appwrapper_hooks and wrap_hooks
    slowest_appwrapper = max(h["timeoutSeconds"] for h in appwrapper_hooks)
    for hook in wrap_hooks:
        assert hook["timeoutSeconds"] >= 2 * slowest_appwrapper, hook["name"]


TEAM = namespace("team-a")
ALWAYS = namespace("team-b", **{names.WRAP_LABEL: "Always"})
WRAP = {names.WRAP_LABEL: "true"}
NO_WRAP = {names.WRAP_LABEL: "false"}
QUEUE = {names.QUEUE_LABEL: "team-queue"}
WRAPPED = {names.APPWRAPPER_LABEL: "train"}
RANKED = {names.NODE_RANK_OFFSET_LABEL: "0", names.APPWRAPPER_LABEL: "train"}

# (what is created, resource, namespace labels, which kinds of autowrap webhook must see it)
SCENARIOS = {
    "vcjob labeled wrap=true is wrapped": (vcjob(WRAP), "jobs", TEAM, ["adopt", "wrap"]),
    "vcjob with a queue label is wrapped": (vcjob(QUEUE), "jobs", TEAM, ["adopt", "wrap"]),
    "unlabeled vcjob is not sent": (vcjob(), "jobs", TEAM, []),
    "vcjob labeled wrap=false is not sent": (vcjob({**NO_WRAP, **QUEUE}), "jobs", TEAM, []),
    "owned vcjob is not sent": (vcjob(WRAP, owned=True), "jobs", TEAM, []),
    "vcjob of an AppWrapper is not sent": (vcjob({**QUEUE, **WRAPPED}), "jobs", TEAM, []),
    "unlabeled vcjob in an Always namespace is wrapped": (
        vcjob(),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "labeled vcjob in an Always namespace is sent once": (
        vcjob({**WRAP, **QUEUE}),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "vcjob labeled wrap=false in an Always namespace is sent (the policy decides)": (
        vcjob(NO_WRAP),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "vcjob with a made-up owner in an Always namespace is sent (and refused)": (
        vcjob(owner=MADE_UP_OWNER),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "vcjob with a non-controller AppWrapper owner in an Always namespace is sent": (
        vcjob(owner=_owner("workload.codeflare.dev/v1beta2", "AppWrapper", controller=False)),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "vcjob of an AppWrapper in an Always namespace is not sent": (
        vcjob(owned=True),
        "jobs",
        ALWAYS,
        [],
        names.APPWRAPPER_CONTROLLER_USER,
    ),
    "vcjob a user made with a borrowed AppWrapper ownerReference is sent (and refused)": (
        vcjob(owned=True),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "vcjob with a user's AppWrapper label in an Always namespace is sent (and refused)": (
        vcjob(WRAPPED),
        "jobs",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "pod with a made-up owner in an Always namespace is sent (and refused)": (
        pod(owner=MADE_UP_OWNER),
        "pods",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "pod labeled wrap=true is wrapped": (pod(WRAP), "pods", TEAM, ["adopt", "wrap"]),
    "pod with only a queue label is left to Kueue": (pod(QUEUE), "pods", TEAM, []),
    "unlabeled pod is not sent": (pod(), "pods", TEAM, []),
    "unlabeled ownerless pod in an Always namespace is wrapped": (
        pod(),
        "pods",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "pod of an AppWrapper is not sent": (pod({**WRAP, **WRAPPED}), "pods", TEAM, []),
    "pod with a user's AppWrapper label in an Always namespace is sent (and refused)": (
        pod(WRAPPED),
        "pods",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "vcjob already marked for adoption by its author is prepared as any other": (
        vcjob({**QUEUE, names.ADOPTION_LABEL: names.ADOPTION_PENDING}),
        "jobs",
        TEAM,
        ["adopt", "wrap"],
    ),
    "controller-made pod in an Always namespace is not sent": (
        pod(owned=True),
        "pods",
        ALWAYS,
        [],
        "system:serviceaccount:kube-system:replicaset-controller",
    ),
    "mirror pod of a kubelet in an Always namespace is not sent": (
        pod(owner=_owner("v1", "Node")),
        "pods",
        ALWAYS,
        [],
        "system:node:gpu-1",
    ),
    "pod a user made with a borrowed ReplicaSet ownerReference is sent (and refused)": (
        pod(owned=True),
        "pods",
        ALWAYS,
        ["adopt", "wrap"],
    ),
    "pod of a wrapped vcjob gets its rank and is not wrapped again": (
        pod(RANKED, owned=True),
        "pods",
        ALWAYS,
        ["rank"],
        "system:serviceaccount:volcano-system:volcano-controllers",
    ),
    "AppWrapper of a vcjob is completed and validated": (
        appwrapper(vcjob()),
        "appwrappers",
        TEAM,
        ["complete", "check"],
    ),
    "AppWrapper of a pod is completed and validated": (
        appwrapper(pod()),
        "appwrappers",
        TEAM,
        ["complete", "check"],
    ),
    "AppWrapper of other kinds is not sent": (
        appwrapper({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}),
        "appwrappers",
        TEAM,
        [],
    ),
    "AppWrapper without components is not sent": (
        {**appwrapper(), "spec": {}},
        "appwrappers",
        TEAM,
        [],
    ),
}


def webhook_role(objs: Iterable[Obj], name: str) -> str:
    for kind, hook in webhooks(objs):
        if hook["name"] == name:
            if kind == "MutatingWebhookConfiguration":
                if rule_matches(hook, names.APPWRAPPER_API_VERSION, "appwrappers"):
                    return "complete"
                if any("UPDATE" in r["operations"] for r in hook["rules"]):
                    return "reapply"
                keys = {
                    e["key"] for e in (hook.get("objectSelector") or {}).get("matchExpressions", [])
                }
                return "rank" if names.NODE_RANK_OFFSET_LABEL in keys else "adopt"
            return "wrap" if hook["sideEffects"] == "NoneOnDryRun" else "check"
    raise AssertionError(name)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_which_webhooks_see_an_object(scenario: str) -> None:
    obj, resource, ns_labels, expected, *user = SCENARIOS[scenario]
    objs = render("base")
    called = webhooks_called(
        objs, resource=resource, obj=obj, namespace_labels=ns_labels, user=(user or ["alice"])[0]
    )
    assert sorted(webhook_role(objs, n) for n in called) == sorted(expected), called


def _policies_hook(objs: Iterable[Obj]) -> tuple[str, Obj]:
    found = [(k, h) for k, h in webhooks(objs, policies=True) if h["name"] == POLICIES]
    assert len(found) == 1, f"expected one {POLICIES} entry"
    return found[0]


def _configmap(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": names.SERVICE_NAMESPACE}}  # fmt: skip


def test_the_policy_configmap_is_checked_on_create_and_update_by_its_own_route(
    rendered: tuple[Obj, ...],
) -> None:
    from webhook.shell.server import VALIDATE_POLICIES_PATH

    kind, hook = _policies_hook(rendered)
    assert kind == "ValidatingWebhookConfiguration"
    assert hook["clientConfig"]["service"]["path"] == VALIDATE_POLICIES_PATH
    assert hook["clientConfig"]["service"]["name"] == names.SERVICE_NAME
    for operation in ("CREATE", "UPDATE"):
        assert rule_matches(hook, "v1", "configmaps", operation)
    assert not rule_matches(hook, "v1", "configmaps", "DELETE")
    assert [r["resources"] for r in hook["rules"]] == [["configmaps"]]
    assert hook["sideEffects"] == "None"
    # Ignore: a fixed ConfigMap must be storable while autowrap is down (see webhooks.yaml).
    assert hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 10


@pytest.mark.parametrize(
    ("ns", "name", "sent"),
    [
        (names.SERVICE_NAMESPACE, POLICY_CONFIGMAP, True),
        (names.SERVICE_NAMESPACE, "kube-root-ca.crt", False),
        ("team-a", POLICY_CONFIGMAP, False),
        ("kube-system", POLICY_CONFIGMAP, False),
    ],
)
def test_only_the_policy_configmap_in_the_autowrap_namespace_reaches_the_policy_check(
    ns: str, name: str, sent: bool
) -> None:
    _, hook = _policies_hook(render("base"))
    obj = _configmap(name)
    for operation, old in (("CREATE", None), ("UPDATE", obj)):
        reached = selector_matches(hook.get("namespaceSelector"), namespace(ns)) and (
            conditions_match(hook, obj, old, operation)
        )
        assert reached == sent, (ns, name, operation)


def test_no_workload_webhook_sees_configmaps(rendered: tuple[Obj, ...]) -> None:
    for _, hook in webhooks(rendered):
        assert not rule_matches(hook, "v1", "configmaps"), hook["name"]


def test_the_shipped_policy_configmap_passes_the_policy_check(rendered: tuple[Obj, ...]) -> None:
    from webhook.core import policy
    from webhook.shell import policyfiles

    configmap = the(rendered, "ConfigMap", POLICY_CONFIGMAP)
    files = policyfiles.from_config_map(configmap["data"])
    assert files
    assert policy.build(files).policies


# --- adopt mode: preparing wrap candidates, re-applying adopted Jobs ---------------------------


def as_prepared(obj: Obj) -> Obj:
    """The labels adopt mode's mutation leaves on a wrap candidate (webhook/core/adoption.py
    prepare): the adoption label; on a Pod, which is its own pod template, also the AppWrapper
    label, and its queue label moves to an annotation."""
    prepared = copy.deepcopy(obj)
    labels = prepared["metadata"].setdefault("labels", {})
    labels[names.ADOPTION_LABEL] = names.ADOPTION_PENDING
    if prepared["kind"] == "Pod":
        labels.pop(names.QUEUE_LABEL, None)
        labels[names.APPWRAPPER_LABEL] = "train"
    return prepared


def wrap_routes(
    objs: Iterable[Obj], kind: str, obj: Obj, ns_labels: dict[str, str], user: str = "alice"
) -> list[str]:
    """The wrap entries of one configuration that `obj` reaches, as "<kind>.<route>"."""
    resource = "jobs" if obj["kind"] == "Job" else "pods"
    called = webhooks_called(
        objs, resource=resource, obj=obj, namespace_labels=ns_labels, kind=kind, user=user
    )
    routes = []
    for name in called:
        if webhook_role(objs, name) in ("adopt", "wrap"):
            plural, entry = name.split(".")[:2]
            routes.append(f"{plural}.{'always' if entry.endswith('-always') else 'label'}")
    return sorted(routes)


CANDIDATE_LABELS = {
    "none": {},
    "wrap": WRAP,
    "queue": QUEUE,
    "wrap+queue": {**WRAP, **QUEUE},
    "no-wrap": NO_WRAP,
    "no-wrap+queue": {**NO_WRAP, **QUEUE},
    "wrap=other": {names.WRAP_LABEL: "yes"},
    "appwrapper": WRAPPED,
    "wrap+appwrapper": {**WRAP, **WRAPPED},
    "ranked": RANKED,
}
CANDIDATE_NAMESPACES = {
    "team": TEAM,
    "always": ALWAYS,
    "kube-system": namespace("kube-system", **{names.WRAP_LABEL: "Always"}),
}


@pytest.mark.parametrize("make", [vcjob, pod], ids=["vcjob", "pod"])
@pytest.mark.parametrize("owned", [False, True], ids=["ownerless", "owned"])
@pytest.mark.parametrize("labels", sorted(CANDIDATE_LABELS))
@pytest.mark.parametrize("ns", sorted(CANDIDATE_NAMESPACES))
def test_mutating_wrap_entries_cover_exactly_what_the_validating_wrap_entries_cover(
    make: Any, owned: bool, labels: str, ns: str
) -> None:
    objs = render("base")
    obj = make(dict(CANDIDATE_LABELS[labels]), owned=owned)
    ns_labels = CANDIDATE_NAMESPACES[ns]
    prepares = wrap_routes(objs, "MutatingWebhookConfiguration", obj, ns_labels)
    # Redirect mode, or a candidate its policy does not wrap: the object is validated as sent.
    checks = wrap_routes(objs, "ValidatingWebhookConfiguration", obj, ns_labels)
    assert prepares == checks
    assert len(prepares) <= 1, "an object is sent to one entry per configuration"
    if prepares:
        # Adopt mode: validation sees the object as the mutation left it.
        prepared = as_prepared(obj)
        assert wrap_routes(objs, "ValidatingWebhookConfiguration", prepared, ns_labels) == checks


def test_mutating_wrap_entries_share_the_scope_of_their_validating_twins() -> None:
    objs = render("base")
    mutating = {h["name"]: h for k, h in webhooks(objs) if k == "MutatingWebhookConfiguration"}
    validating = {h["name"]: h for k, h in webhooks(objs) if k == "ValidatingWebhookConfiguration"}
    adopt = sorted(n for n in mutating if webhook_role(objs, n) == "adopt")
    assert adopt == sorted(
        f"{kind}.{entry}.autowrap.io"
        for kind in ("pods", "vcjobs")
        for entry in ("adopt", "adopt-always")
    )
    for name in adopt:
        twin = validating[name.replace(".adopt", ".wrap")]
        hook = mutating[name]
        assert hook["rules"] == twin["rules"], name
        assert hook["namespaceSelector"] == twin["namespaceSelector"], name
        assert hook["matchPolicy"] == twin["matchPolicy"], name
        # Every condition of the twin holds for the mutating entry too (the Pod twins move the
        # AppWrapper-label exclusion into a condition that lets prepared Pods through; the
        # Always entries all do, on request.userInfo).
        conditions = {c["name"] for c in hook.get("matchConditions", [])}
        if name.endswith("-always.autowrap.io"):
            assert "objectSelector" not in hook, name
            assert {"not-from-its-controller", "appwrapper-label-only-from-its-controller"} <= (
                conditions
            ), name
            assert hook["matchConditions"] == twin["matchConditions"], name
        else:
            keys = {e["key"] for e in hook["objectSelector"]["matchExpressions"]}
            assert names.APPWRAPPER_LABEL in keys, name
            assert "has-no-owner" in conditions, name


def test_mutating_wrap_entries_are_pure_fail_closed_and_may_look_up_the_queue(
    rendered: tuple[Obj, ...],
) -> None:
    adopt = [h for k, h in webhooks(rendered) if k == "MutatingWebhookConfiguration"
             and webhook_role(rendered, h["name"]) == "adopt"]  # fmt: skip
    assert len(adopt) == 4
    for hook in adopt:
        assert hook["clientConfig"]["service"]["path"] == names.MUTATE_PATH
        assert hook["sideEffects"] == "None", hook["name"]
        assert hook["failurePolicy"] == "Fail", hook["name"]
        assert hook["reinvocationPolicy"] == "Never", hook["name"]
        assert hook["timeoutSeconds"] == 10, hook["name"]


def test_the_reapply_entry_is_pure_and_selects_adopted_jobs_by_their_stored_label(
    rendered: tuple[Obj, ...],
) -> None:
    hook = next(h for _, h in webhooks(rendered) if h["name"] == REAPPLY)
    assert hook["clientConfig"]["service"]["path"] == names.MUTATE_PATH
    assert hook["sideEffects"] == "None"
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": names.ADOPTION_LABEL, "operator": "Exists"}]
    }
    assert any("oldObject" in c["expression"] for c in hook["matchConditions"])
    assert hook["timeoutSeconds"] <= 10


ADOPTED = {**QUEUE, names.ADOPTION_LABEL: names.ADOPTION_ADOPTED}
PENDING = {**QUEUE, names.ADOPTION_LABEL: names.ADOPTION_PENDING}
AW_OWNER = [{"apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper", "name": "train",
             "uid": "1", "controller": True}]  # fmt: skip


def owned_by_appwrapper(obj: Obj) -> Obj:
    obj["metadata"]["ownerReferences"] = copy.deepcopy(AW_OWNER)
    return obj


# (old, new, resource, namespace labels, whether the re-apply entry is called)
UPDATES = {
    "re-apply of a Job pending adoption": (vcjob(PENDING), vcjob(PENDING), "jobs", TEAM, True),
    "re-apply of an adopted Job (owned by its AppWrapper)": (
        owned_by_appwrapper(vcjob(ADOPTED)),
        owned_by_appwrapper(vcjob(ADOPTED)),
        "jobs",
        TEAM,
        True,
    ),
    "re-apply of an adopted Job in an Always namespace": (
        vcjob(ADOPTED),
        vcjob(ADOPTED),
        "jobs",
        ALWAYS,
        True,
    ),
    "update that removes the adoption label": (vcjob(ADOPTED), vcjob(QUEUE), "jobs", TEAM, True),
    "update that adds the adoption label to another Job": (
        vcjob(QUEUE),
        vcjob(ADOPTED),
        "jobs",
        TEAM,
        False,
    ),
    "update of a Job never adopted": (vcjob(QUEUE), vcjob(QUEUE), "jobs", TEAM, False),
    "update of an adopted Job labeled wrap=false": (
        vcjob({**ADOPTED, **NO_WRAP}),
        vcjob({**ADOPTED, **NO_WRAP}),
        "jobs",
        TEAM,
        True,
    ),
    "update of an adopted Pod": (pod(ADOPTED), pod(ADOPTED), "pods", TEAM, False),
    "update of an adopted Job in a system namespace": (
        vcjob(ADOPTED),
        vcjob(ADOPTED),
        "jobs",
        namespace(names.SERVICE_NAMESPACE),
        False,
    ),
}


@pytest.mark.parametrize("scenario", sorted(UPDATES))
def test_updates_reach_only_the_reapply_entry_and_only_for_adopted_jobs(scenario: str) -> None:
    old, new, resource, ns_labels, expected = UPDATES[scenario]
    objs = render("base")
    called = webhooks_called(objs, resource=resource, obj=new, old=old, namespace_labels=ns_labels)
    assert called == ([REAPPLY] if expected else []), called


def test_every_rendered_webhook_configuration_parses_in_the_apiserver_emulator(
    rendered: tuple[Obj, ...], webhook_pki: ServingPki
) -> None:
    configurations = tuple(o for o in rendered if o["kind"] in WEBHOOK_CONFIGURATIONS)
    emulator = ApiserverEmulator(
        "127.0.0.1",
        names.SERVING_PORT,
        configurations,
        match_conditions=cel_predicates(configurations),
        ca_bundle=webhook_pki.ca_bundle,
    )
    assert {h.name for h in emulator.webhooks()} == {
        h["name"] for _, h in webhooks(rendered, policies=True)
    }


ALICE = UserInfo(username="alice", groups=("system:authenticated",))


def manifest_job(name: str, labels: dict[str, str]) -> Obj:
    template = {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "trainer", "image": "torch:2.4", "resources": {"limits": {"cpu": "1"}}}]}}  # fmt: skip
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": {
            "schedulerName": "volcano",
            "tasks": [
                {"name": "master", "replicas": 1, "template": copy.deepcopy(template)},
                {"name": "worker", "replicas": 2, "template": copy.deepcopy(template)},
            ],
        },
    }


async def test_adopt_mode_runs_through_the_rendered_webhooks(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    """The real server, in adopt mode, behind the rendered webhook configurations: a labeled
    Volcano Job and a labeled Pod are created prepared (and validated as prepared), a re-apply
    of the Job's manifest gets the stored spec back, and updates of other Jobs never reach
    autowrap."""
    from testbed.cluster.cluster import FakeCluster
    from testbed.cluster.resources import LOCALQUEUES, PODS, VCJOBS
    from testbed.policies import in_mode
    from webhook import app
    from webhook.shell import server

    configurations = tuple(o for o in render("base") if o["kind"] in WEBHOOK_CONFIGURATIONS)
    emulator = ApiserverEmulator(
        "127.0.0.1",
        0,
        configurations,
        match_conditions=cel_predicates(configurations),
        ca_bundle=webhook_pki.ca_bundle,
    )
    api = FakeCluster(emulator=emulator)
    await api.start()
    api.add_namespace("ml")
    api.store.create(LOCALQUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                   "metadata": {"name": "team-queue", "namespace": "ml"},
                                   "spec": {"clusterQueue": "cq"}})  # fmt: skip
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    for source in (webhook_pki.cert_path, webhook_pki.key_path, webhook_pki.ca_path):
        shutil.copy(source, cert_dir / source.name)
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir,
        policy_path=in_mode(REPO / "policies", tmp_path / "policies", "Adopt"),
        kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
        reload_interval=60.0, drain_timeout=5.0, controller=False,
    )  # fmt: skip
    running = await app.start(options)
    emulator.port = running.port
    try:

        def called(name: str) -> list[str]:
            return [c.name for c in emulator.calls if c.request["request"].get("name") == name]

        # A labeled Volcano Job: prepared by the mutating entry, checked by the validating one.
        job = manifest_job("train", dict(QUEUE))
        stored = await api.create(VCJOBS, job, user=ALICE)
        assert called("train") == ["vcjobs.adopt.autowrap.io", "vcjobs.wrap.autowrap.io"]
        assert stored["metadata"]["labels"][names.ADOPTION_LABEL] == names.ADOPTION_PENDING
        assert names.ADOPTION_FINALIZER in stored["metadata"]["finalizers"]
        for task in stored["spec"]["tasks"]:
            template = task["template"]
            assert {"name": names.ADMISSION_GATE} in template["spec"]["schedulingGates"]
            assert template["metadata"]["labels"][names.APPWRAPPER_LABEL] == "train"

        # Re-applying the manifest sends spec.tasks without autowrap's additions: the re-apply
        # entry gives the stored spec back.
        reapplied = copy.deepcopy(stored)
        reapplied["spec"] = copy.deepcopy(job["spec"])
        updated = await api.update(VCJOBS, reapplied, user=ALICE)
        assert called("train")[-1] == REAPPLY
        assert updated["spec"] == stored["spec"]

        # A Job that never opted in: neither its create nor its updates reach autowrap, not even
        # one that adds the adoption label.
        plain = await api.create(VCJOBS, manifest_job("plain", {}), user=ALICE)
        plain["metadata"].setdefault("annotations", {})["note"] = "x"
        plain = await api.update(VCJOBS, plain, user=ALICE)
        plain["metadata"]["labels"] = {names.ADOPTION_LABEL: names.ADOPTION_ADOPTED}
        await api.update(VCJOBS, plain, user=ALICE)
        assert called("plain") == []

        # A labeled bare Pod carries the AppWrapper label once prepared, and is still validated.
        bare = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "solo", "namespace": "ml", "labels": {**WRAP, **QUEUE}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "torch:2.4", "resources": {"limits": {"cpu": "1"}}}]},
        }  # fmt: skip
        stored_pod = await api.create(PODS, bare, user=ALICE)
        assert called("solo") == ["pods.adopt.autowrap.io", "pods.wrap.autowrap.io"]
        assert stored_pod["metadata"]["labels"][names.APPWRAPPER_LABEL]
        assert stored_pod["metadata"]["labels"][names.ADOPTION_LABEL] == names.ADOPTION_PENDING
        assert {"name": names.ADMISSION_GATE} in stored_pod["spec"]["schedulingGates"]
        assert not [c for c in emulator.calls if c.error], [c.error for c in emulator.calls]
    finally:
        await running.drain()
        await api.stop()


# --- the Deployment ----------------------------------------------------------------------------


def test_webhook_runs_two_replicas_kept_apart(rendered: tuple[Obj, ...]) -> None:
    deployment = the(rendered, "Deployment", names.SERVICE_NAME)
    assert deployment["spec"]["replicas"] >= 2
    anti = pod_spec(rendered)["affinity"]["podAntiAffinity"]
    terms = [
        t.get("podAffinityTerm", t)
        for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
        + anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])
    ]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and selector_matches(t["labelSelector"], pod_labels)
        for t in terms
    )
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_a_disruption_budget_keeps_one_replica_serving(rendered: tuple[Obj, ...]) -> None:
    pdb = the(rendered, "PodDisruptionBudget")
    pod_labels = the(rendered, "Deployment", names.SERVICE_NAME)["spec"]["template"]["metadata"][
        "labels"
    ]
    assert pdb["spec"]["minAvailable"] == 1
    assert selector_matches(pdb["spec"]["selector"], pod_labels)


def test_probes_ask_the_server_over_https(rendered: tuple[Obj, ...]) -> None:
    c = container(rendered)
    for probe, path in (
        ("readinessProbe", names.READYZ_PATH),
        ("livenessProbe", names.HEALTHZ_PATH),
    ):
        get = c[probe]["httpGet"]
        assert get["path"] == path
        assert get["scheme"] == "HTTPS"
        assert container_port(rendered, get["port"]) == names.SERVING_PORT


def test_webhook_pods_are_locked_down(rendered: tuple[Obj, ...]) -> None:
    spec = pod_spec(rendered)
    pod_sc, sc = spec.get("securityContext", {}), container(rendered)["securityContext"]

    def setting(key: str) -> Any:
        return sc.get(key, pod_sc.get(key))

    assert setting("runAsNonRoot") is True
    assert setting("runAsUser") == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    assert setting("seccompProfile") == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is True
    assert spec["serviceAccountName"] == names.SERVICE_NAME
    assert not spec.get("hostNetwork") and not spec.get("hostPID")


def test_webhook_container_declares_requests_and_limits(rendered: tuple[Obj, ...]) -> None:
    resources = container(rendered)["resources"]
    for kind in ("requests", "limits"):
        assert set(resources[kind]) >= {"cpu", "memory"}, kind


def test_shutdown_leaves_time_to_finish_the_slowest_admission(rendered: tuple[Obj, ...]) -> None:
    slowest = max(h["timeoutSeconds"] for _, h in webhooks(rendered))
    pre_stop = container(rendered).get("lifecycle", {}).get("preStop", {})
    delay = pre_stop.get("sleep", {}).get("seconds", 0)
    assert pod_spec(rendered)["terminationGracePeriodSeconds"] > delay + slowest


def test_server_listens_where_the_manifests_point(rendered: tuple[Obj, ...]) -> None:
    c = container(rendered)
    args = c["args"]
    assert args[0] == "serve"
    assert flag(args, "--host") == "0.0.0.0"
    assert flag(args, "--port") == str(names.SERVING_PORT)
    assert flag(args, "--metrics-port") == str(names.METRICS_PORT)
    assert flag(args, "--kubeconfig") is None, "in the cluster the server uses in-cluster config"
    declared = {p["containerPort"] for p in c["ports"]}
    assert declared == {names.SERVING_PORT, names.METRICS_PORT}


def test_image_is_the_release_image(rendered: tuple[Obj, ...]) -> None:
    assert container(rendered)["image"] == "ghcr.io/autowrap/autowrap:0.5.0"


def test_policies_reach_the_policy_dir_from_the_policies_configmap(
    rendered: tuple[Obj, ...],
) -> None:
    policy_dir = flag(container(rendered)["args"], "--policy")
    assert policy_dir
    volume = volume_mounted_at(rendered, policy_dir)
    configmap = the(rendered, "ConfigMap", volume["configMap"]["name"])
    assert configmap["data"]


@pytest.mark.parametrize("variant", ["base", "cert-manager"])
def test_serving_secret_is_mounted_as_the_cert_dir(variant: str) -> None:
    objs = render(variant)
    cert_dir = flag(container(objs)["args"], "--cert-dir")
    assert cert_dir
    assert volume_mounted_at(objs, cert_dir)["secret"]["secretName"] == SERVING_SECRET


# --- certificates ------------------------------------------------------------------------------


def test_cert_manager_certificate_names_the_service() -> None:
    objs = render("cert-manager")
    certificate = [
        c for c in find(objs, "Certificate") if c["spec"]["secretName"] == SERVING_SECRET
    ]
    assert len(certificate) == 1
    svc = f"{names.SERVICE_NAME}.{names.SERVICE_NAMESPACE}.svc"
    assert set(certificate[0]["spec"]["dnsNames"]) == {svc, f"{svc}.cluster.local"}
    issuer = certificate[0]["spec"]["issuerRef"]
    assert find(objs, issuer["kind"], issuer["name"]), "the serving certificate has no issuer"


def test_cert_manager_injects_the_ca_into_both_webhook_configurations() -> None:
    objs = render("cert-manager")
    certificate = next(
        c for c in find(objs, "Certificate") if c["spec"]["secretName"] == SERVING_SECRET
    )
    source = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        annotations = the(objs, kind, name)["metadata"].get("annotations", {})
        assert annotations.get("cert-manager.io/inject-ca-from") == source, name


def test_self_managed_server_owns_its_secret_and_both_webhook_configurations() -> None:
    objs = render("self-managed")
    args = container(objs)["args"]
    assert "--self-managed-certs" in args
    assert flag(args, "--cert-secret") == SERVING_SECRET
    configured = flag(args, "--webhook-configurations")
    assert configured
    assert set(configured.split(",")) == set(WEBHOOK_CONFIGURATIONS.values())
    cert_dir = flag(args, "--cert-dir")
    assert cert_dir
    assert "emptyDir" in volume_mounted_at(objs, cert_dir), "the server writes its own cert files"
    mount = next(m for m in container(objs)["volumeMounts"] if m["mountPath"] == cert_dir)
    assert not mount.get("readOnly")


# --- RBAC --------------------------------------------------------------------------------------


LEASES = ("coordination.k8s.io", "leases")


def test_autowrap_may_make_exactly_the_api_calls_the_server_makes() -> None:
    # Admission, the adopt-mode controller and the AppWrapper operator's component check
    # (kube.RBAC): the ClusterRole and the Lease Role together grant exactly these.
    kube = importlib.import_module("webhook.shell.kube")
    expected = {("" if g == "core" else g, r, v) for g, r, v in kube.RBAC} - NOT_GRANTED
    grants = rbac_grants(render("base"), names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    assert {(g, r, v) for g, r, v, _, _ in grants} == expected
    cluster_wide = {grant for grant in grants if grant[4] is None}
    assert all(names_ == () for *_, names_, _ in cluster_wide)
    assert not {g for g in cluster_wide if g[:2] == LEASES}, "the Lease is never cluster-wide"


def test_the_controller_lease_is_granted_only_in_autowrap_namespace_and_by_name() -> None:
    grants = rbac_grants(render("base"), names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    ns, lease = names.SERVICE_NAMESPACE, (names.CONTROLLER_LEASE,)
    assert {g for g in grants if g[4] is not None} == {
        (*LEASES, "get", lease, ns),
        (*LEASES, "update", lease, ns),
        # Kubernetes cannot restrict create by name; the Role keeps it to autowrap's namespace.
        (*LEASES, "create", (), ns),
    }


def test_the_controller_finds_its_namespace_through_the_downward_api(
    rendered: tuple[Obj, ...],
) -> None:
    env = {e["name"]: e for e in container(rendered).get("env", [])}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    deployment = the(rendered, "Deployment", names.SERVICE_NAME)
    role = the(rendered, "Role", "autowrap-controller-lease")
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]


def test_the_server_does_not_turn_the_controller_off(rendered: tuple[Obj, ...]) -> None:
    assert "--no-controller" not in container(rendered)["args"]


def test_self_managed_certificates_add_only_their_secret_and_webhook_configurations() -> None:
    base = rbac_grants(render("base"), names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    overlay = rbac_grants(render("self-managed"), names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    ns = names.SERVICE_NAMESPACE
    admission = "admissionregistration.k8s.io"
    assert overlay - base == {
        # The Secret is shipped (empty): no create, which could not be limited by name.
        ("", "secrets", "get", (SERVING_SECRET,), ns),
        ("", "secrets", "update", (SERVING_SECRET,), ns),
        # Read, then a JSON patch of the caBundles (CertificateStore.set_ca_bundle).
        *(
            (admission, f"{kind.lower()}s", verb, (name,), None)
            for kind, name in WEBHOOK_CONFIGURATIONS.items()
            for verb in ("get", "patch")
        ),
    }
    assert base <= overlay


def test_cert_manager_overlay_grants_autowrap_nothing_more() -> None:
    base = rbac_grants(render("base"), names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    overlay = rbac_grants(render("cert-manager"), names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    assert overlay == base


def test_no_role_grants_wildcards(rendered: tuple[Obj, ...]) -> None:
    for role in find(rendered, "ClusterRole") + find(rendered, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), role["metadata"]["name"]


def test_appwrapper_controller_may_run_volcano_jobs(rendered: tuple[Obj, ...]) -> None:
    grants = rbac_grants(rendered, *APPWRAPPER_CONTROLLER)
    assert grants == {
        ("batch.volcano.sh", "jobs", verb, (), None)
        for verb in ("get", "list", "watch", "create", "delete")
    }


def test_the_policies_configmap_installs_the_default_policy_only() -> None:
    # policies/ holds the default and examples; only the default is installed, a copy of
    # policies/default.yaml (examples such as team-a would wrap and restrict real namespaces).
    objs = render("base")
    policy_dir = flag(container(objs)["args"], "--policy")
    assert policy_dir
    configmap = the(objs, "ConfigMap", volume_mounted_at(objs, policy_dir)["configMap"]["name"])
    default = (REPO / "policies" / "default.yaml").read_text(encoding="utf-8")
    assert configmap["data"] == {"default.yaml": default}, (
        "deploy/base/policies/default.yaml differs from policies/default.yaml: copy it over"
    )
    assert [p.name for p in (DEPLOY / "base" / "policies").iterdir()] == ["default.yaml"]


def test_no_release_manifest_ships_an_example_policy() -> None:
    examples = {p.name for p in (REPO / "policies").glob("*.yaml")} - {"default.yaml"}
    assert examples, "policies/ keeps its examples"
    for release in sorted((DEPLOY / "release").glob("*.yaml")):
        for doc in yaml.safe_load_all(release.read_text(encoding="utf-8")):
            if (
                doc
                and doc["kind"] == "ConfigMap"
                and doc["metadata"]["name"] == "autowrap-policies"
            ):
                assert set(doc["data"]) == {"default.yaml"}, release.name


def test_owner_references_component_grants_only_the_deletes() -> None:
    component = DEPLOY / "components" / "owner-references-enforcement"
    objs = [d for d in yaml.safe_load_all((component / "rbac.yaml").read_text()) if d]
    grants = rbac_grants(objs, names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    assert {(g, r, v) for g, r, v, _, _ in grants} == OWNER_REFERENCE_DELETES
    kube = importlib.import_module("webhook.shell.kube")
    assert set(kube.RBAC) >= OWNER_REFERENCE_DELETES, "the component grants what the code lists"


# --- the image ---------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile as stages of (INSTRUCTION, arguments), continuation lines joined."""
    lines: list[str] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    stages: list[list[tuple[str, str]]] = []
    for line in lines:
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction, rest.strip()))
    return stages


def final_stage() -> list[tuple[str, str]]:
    return dockerfile_stages()[-1]


def test_image_is_built_in_separate_stages() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    assert any(i == "COPY" and a.startswith("--from=") for i, a in final_stage()), (
        "the final stage copies the built environment from the builder"
    )


def test_image_runs_as_a_numeric_non_root_user() -> None:
    users = [a for i, a in final_stage() if i == "USER"]
    assert users, "the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert int(user) == 65532, "the Deployment's runAsUser"


def test_image_has_no_build_tools() -> None:
    tools = ("gcc", "g++", "build-essential", "make", "clang", "apt-get install", "apk add")
    for instruction, args in final_stage():
        if instruction == "RUN":
            assert not any(t in args for t in tools), args


def test_image_starts_autowrap_serve() -> None:
    stage = final_stage()
    assert [a for i, a in stage if i == "ENTRYPOINT"][-1] == '["autowrap"]'
    assert [a for i, a in stage if i == "CMD"][-1] == '["serve"]'
    exposed = {p for i, a in stage if i == "EXPOSE" for p in a.split()}
    assert exposed == {str(names.SERVING_PORT), str(names.METRICS_PORT)}
    env = " ".join(a for i, a in stage if i == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env


def dockerignored(path: str) -> bool:
    """Whether the build context leaves `path` out: a pattern matches a path or any of its
    parent directories, `**/` matches at any depth, `!` re-includes, the last match wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        if pattern.startswith("**/"):
            tail = pattern.removeprefix("**/")
            hit = any(fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], tail) for p in prefixes)
        else:
            hit = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)
        if hit:
            ignored = not negate
    return ignored


@pytest.mark.parametrize("path", ["pyproject.toml", "README.md", "webhook/model/names.py"])
def test_build_context_holds_the_sources(path: str) -> None:
    assert not dockerignored(path)


@pytest.mark.parametrize(
    "path", [".git/HEAD", ".venv/bin/python", "tests/deploy/test_manifests.py", "certs/ca.key"]
)
def test_build_context_leaves_out_everything_else(path: str) -> None:
    assert dockerignored(path)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_container_command_is_one_the_cli_accepts(variant: str) -> None:
    workload = container(render(variant))
    argv = [*workload.get("command", []), *workload.get("args", [])]
    if argv and argv[0] == "autowrap":
        argv = argv[1:]

    args = cli.parser().parse_args(argv)

    assert args.command == "serve"
    assert args.port == names.SERVING_PORT
    assert args.metrics_port == names.METRICS_PORT


# --- wrap: Always cannot be skipped by what a user writes (issue 14, item 3) --------------------


@pytest.mark.parametrize("make", [vcjob, pod], ids=["vcjob", "pod"])
def test_always_entries_let_exactly_the_adapters_controller_owners_through(make: Any) -> None:
    objs = render("base")
    adapter = kinds.find(make()["apiVersion"], make()["kind"])
    assert adapter is not None
    route = f"{adapter.resource if adapter.kind == 'Pod' else 'vcjobs'}.always"
    controller_user = "system:serviceaccount:kube-system:job-controller"
    for group, kind in sorted(adapter.owner_kinds):
        api_version = f"{group}/v9" if group else "v1"
        for controller, user, sent in ((True, controller_user, False), (False, controller_user, True),
                                       (True, "alice", True)):  # fmt: skip
            obj = make(owner=_owner(api_version, kind, controller=controller))
            for config in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                routes = wrap_routes(objs, config, obj, ALWAYS, user)
                assert routes == ([route] if sent else []), (kind, controller, user, config)
    for api_version, kind in (("v1", "ConfigMap"), ("example.com/v1", "ReplicaSet"),
                              ("apps/v1", "Deployment"), ("batch.volcano.sh.evil/v1", "Job")):  # fmt: skip
        obj = make(owner=_owner(api_version, kind))
        assert wrap_routes(objs, "ValidatingWebhookConfiguration", obj, ALWAYS,
                           controller_user) == [route], kind  # fmt: skip


@pytest.mark.parametrize("make", [vcjob, pod], ids=["vcjob", "pod"])
def test_the_appwrapper_label_keeps_an_object_out_only_on_the_controllers_requests(
    make: Any,
) -> None:
    objs = render("base")
    obj = make(WRAPPED)
    resource = "jobs" if obj["kind"] == "Job" else "pods"
    for user, expected in (("alice", 2), (names.APPWRAPPER_CONTROLLER_USER, 0)):
        called = webhooks_called(
            objs, resource=resource, obj=obj, namespace_labels=ALWAYS, user=user
        )
        assert len([n for n in called if "-always." in n]) == expected, (user, called)
    # The username in the YAML is the engine's.
    for _, hook in webhooks(objs):
        for condition in hook.get("matchConditions", []):
            if condition["name"] == "appwrapper-label-only-from-its-controller":
                assert f"'{names.APPWRAPPER_CONTROLLER_USER}'" in condition["expression"]
