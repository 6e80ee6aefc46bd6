"""``autowrap doctor`` on the whole adopt-mode testbed cluster, read with a user's kubeconfig.

The cluster holds what a real install leaves (``testbed.installation``): the release's objects,
Kueue's, the AppWrapper controller's and Volcano's, autowrap's ServiceAccount's RBAC as the
authorizer answers it. Each prerequisite is broken in turn; doctor must fail that check with a
fix, the fix is applied (the printed command run where there is one, else the change it
describes), and doctor must then pass it. The smoke run goes through to running pods and leaves
nothing behind.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import copy
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from testbed import installation
from testbed.cluster.cluster import ADMIN
from testbed.cluster.resources import (
    APPWRAPPERS,
    CLUSTERQUEUES,
    CONFIGMAPS,
    EVENTS,
    KUEUE,
    LEASES,
    LOCALQUEUES,
    NAMESPACES,
    PODS,
    RESOURCEFLAVORS,
    VCJOBS,
    WEBHOOK_CONFIGURATIONS,
    Resource,
)
from testbed.pki import ServingPki
from tests.adopt.cluster import AUTOWRAP, FLAVORS, NAMESPACE, Cluster, running_cluster
from tests.deploy.test_manifests import render
from tests.support.cli import run as _run
from tests.support.operator_edits import edit_cluster_role_verbs
from webhook import __version__, app
from webhook.cli import doctor
from webhook.cli import main as cli
from webhook.shell import certs, kube

TEAM_A = "team-a"


@contextlib.asynccontextmanager
async def installed(
    pki: ServingPki, tmp_path: Path, mode: str = "Adopt", *, enforcement: bool = False
) -> AsyncIterator[tuple[Cluster, Path]]:
    # A cluster as the release installs into it: without OwnerReferencesPermissionEnforcement,
    # so deploy/base's grants are all autowrap needs (``enforcement``: with the plugin on and
    # the component that goes with it left out).
    async with running_cluster(
        pki,
        tmp_path,
        mode=mode,
        owner_references_enforcement=enforcement,
        owner_references_component=False,
    ) as cluster:
        rendered = render("base")
        installation.install(cluster.api, rendered, ca_bundle=pki.ca_bundle,
                             serving_port=cluster.running.port, policy_dir=tmp_path / "policies",
                             flavors={n: {"nodeLabels": f["nodeLabels"]}
                                      for n, f in FLAVORS.items()})  # fmt: skip
        installation.grant_rbac(cluster.api, rendered, AUTOWRAP.username)
        _as_the_install_doc_says(cluster, rendered)
        # team-a (the shipped policy: wrap Always, default queue team-a-queue), set up right.
        cluster.api.add_namespace(TEAM_A, {"autowrap.io/wrap": "Always"})
        cluster.api.add_local_queue(TEAM_A, "team-a-queue", "cq")
        await cluster.settle()
        kubeconfig = cluster.api.write_kubeconfig(tmp_path / "user-kubeconfig")
        yield cluster, kubeconfig


Installed = tuple[Cluster, Path]
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy",
                            singular="networkpolicy", short_names=("netpol",))  # fmt: skip
CONTROL_PLANE = "10.0.0.0/24"


def _as_the_install_doc_says(cluster: Cluster, rendered: list[dict[str, Any]]) -> None:
    """What a healthy install also holds: the NetworkPolicy with the control plane's range
    set (docs/install.md), and the built-in ClusterRole edit as kube-controller-manager's
    clusterrole-aggregation controller writes it, with autowrap-submitter's rules merged in."""
    cluster.api.store.serve(NETWORK_POLICIES)
    policy = copy.deepcopy(next(o for o in rendered if o["kind"] == "NetworkPolicy"))
    policy["spec"]["ingress"][0]["from"] = [{"ipBlock": {"cidr": CONTROL_PLANE}}]
    cluster.api.store.apply(NETWORK_POLICIES, policy)
    submitter = next(o for o in rendered if o["metadata"]["name"] == "autowrap-submitter")
    edit = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "edit"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {
                "rbac.authorization.k8s.io/aggregate-to-edit": "true"}}]},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
                      *submitter["rules"]]}  # fmt: skip
    installation.put(cluster.api, edit)


@pytest.fixture
async def installed_cluster(
    webhook_pki: ServingPki, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Installed]:
    """The testbed cluster as the release installs into it, in adopt mode (or the mode a test
    gives with ``indirect`` parametrization), and a user's kubeconfig for it."""
    async with installed(webhook_pki, tmp_path, getattr(request, "param", "Adopt")) as found:
        yield found


async def _doctor(kubeconfig: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    argv = ["doctor", "--kubeconfig", str(kubeconfig), *extra]
    code, out, err = await asyncio.to_thread(_run, [*argv, "-o", "json"])
    return code, (orjson.loads(out) if out else {}), err


async def _smoke_in_text(kubeconfig: Path, *, deadline: int) -> tuple[int, str, str]:
    """``doctor --smoke`` in the test namespace, each stage given ``deadline`` seconds, as text."""
    argv = ["doctor", "--kubeconfig", str(kubeconfig), "--smoke", NAMESPACE,
            "--smoke-deadline", str(deadline)]  # fmt: skip
    return await asyncio.to_thread(_run, argv)


def _by_check(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check"] == check]


def _level(report: dict[str, Any], check: str) -> str:
    found = _by_check(report, check)
    assert found, f"no finding {check}: {[f['check'] for f in report['findings']]}"
    return doctor.worst(doctor.Finding("", "", f["level"], "") for f in found)


def _kubectl(kubeconfig: Path, command: list[str]) -> None:
    """Run a fix's command against the fake API, as the operator would."""
    assert command[0] == "kubectl"
    done = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *command[1:]],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")


async def test_a_healthy_install_passes_every_check(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    code, report, err = await _doctor(kubeconfig)
    # The testbed runs one replica, and the test PKI issues week-long certificates: both
    # are warned about, as on a real cluster.
    expected = {"endpoints", "certificate-expiry"}
    warned = {f["check"] for f in report["findings"] if f["level"] == doctor.WARN}
    assert warned == expected, warned
    failing = [f for f in report["findings"] if f["level"] == doctor.FAIL]
    assert code == cli.EXIT_OK, "\n".join(str(f) for f in failing) + err
    assert report["result"] == doctor.WARN, failing
    checks = {f["check"] for f in report["findings"]}
    assert {"kubernetes-version", "kueue-appwrapper-integration", "kueue-admission-gated-by",
            "appwrapper-settings", "volcano-webhooks", "webhook-configurations",
            "admission-policies", "ca-bundle", "certificate-expiry", "endpoints", "readyz",
            "lease", "rbac", "rbac-excess", "cluster-queue", "policy-set",
            "deployment", "controller-identities"} <= checks  # fmt: skip
    # Volcano's and the AppWrapper controller's ServiceAccounts may create pods, and are listed;
    # Kueue's may not (and autowrap's own creates are dry runs).
    identities = _by_check(report, "controller-identities")
    assert [f["found"] for f in identities] == [
        "2 controller identities may create pods, each in the installed list of 11"
    ]
    running = _by_check(report, "deployment")[0]["found"]
    assert running.startswith(
        f"Deployment autowrap-system/autowrap: autowrap {__version__}, 1/1 ready"
    )
    assert any("-> ClusterQueue cq" in f["found"] for f in _by_check(report, "cluster-queue"))
    # Read-only: its calls are all listed, and its only writes are SubjectAccessReviews and
    # the owner-reference probe's dry run, which stores nothing.
    made = _calls_of(cluster, ADMIN.username)
    assert made and made <= set(kube.DOCTOR_CALLS), made - set(kube.DOCTOR_CALLS)
    assert {c for c in made if c[2] not in ("get", "list")} == {
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("", "events", "create"),
    }
    assert not [e for e in cluster.api.store.list(EVENTS, None) if e.get("reason") == "DoctorProbe"]
    assert [f["level"] for f in _by_check(report, "owner-references")] == ["ok"]
    code, text, _ = await asyncio.to_thread(_run, ["doctor", "--kubeconfig", str(kubeconfig)])
    assert code == cli.EXIT_OK
    assert "ok    lease: Lease autowrap-system/autowrap-controller: held by" in text


def _config(cluster: Cluster, which: str) -> tuple[dict[str, Any], Callable[[], None]]:
    """Kueue's or the AppWrapper controller's configuration, and a function that stores it."""
    namespace, name, entry = {
        "kueue": ("kueue-system", "kueue-manager-config", "controller_manager_config.yaml"),
        "appwrapper": ("appwrapper-system", "appwrapper-operator-config", "config.yaml"),
    }[which]
    cm = cluster.api.store.get(CONFIGMAPS, namespace, name)
    assert cm is not None
    config: dict[str, Any] = yaml.safe_load(cm["data"][entry])

    def save() -> None:
        cm["data"][entry] = yaml.safe_dump(config)
        installation.put(cluster.api, cm)

    return config, save


def _set_kueue_image(cluster: Cluster, tag: str) -> None:
    found = cluster.api.store.get(installation.DEPLOYMENTS, "kueue-system",
                                  "kueue-controller-manager")  # fmt: skip
    assert found is not None
    found["spec"]["template"]["spec"]["containers"][0]["image"] = (
        f"registry.k8s.io/kueue/kueue:{tag}"
    )
    installation.put(cluster.api, found)


async def _broken_then_fixed(
    kubeconfig: Path,
    check: str,
    expect: str,
    fix_says: list[str],
    apply_fix: Callable[[], Any],
    repaired: str = doctor.OK,
) -> dict[str, Any]:
    """Doctor fails (or warns on) ``check`` with a fix naming ``fix_says``; after ``apply_fix``
    the same check is ok. Returns the broken report."""
    code, report, err = await _doctor(kubeconfig)
    assert _level(report, check) == expect, _by_check(report, check)
    bad = [f for f in _by_check(report, check) if f["level"] == expect]
    fix = " ".join(f.get("fix", "") + " " + " ".join(f.get("command", [])) for f in bad)
    for words in fix_says:
        assert words in fix, (words, fix, bad)
    if expect == doctor.FAIL:
        assert code == cli.EXIT_REJECTED and report["result"] == doctor.FAIL
    done = apply_fix()
    if asyncio.iscoroutine(done):
        await done
    code, fixed, err = await _doctor(kubeconfig)
    assert _level(fixed, check) == repaired, _by_check(fixed, check)
    return report


async def test_kueue_without_the_appwrapper_integration(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    config, save = _config(cluster, "kueue")
    config["integrations"]["frameworks"].remove(doctor.APPWRAPPER_FRAMEWORK)
    save()

    def fix() -> None:
        config["integrations"]["frameworks"].append(doctor.APPWRAPPER_FRAMEWORK)
        save()

    # The smoke run stops where that leaves a job: Kueue never makes its Workload.
    code, text, _ = await _smoke_in_text(kubeconfig, deadline=2)
    assert code == cli.EXIT_REJECTED
    assert "ok    vcjob-appwrapper" in text and "fail  vcjob-workload" in text
    assert "see the kueue-appwrapper-integration check" in text

    report = await _broken_then_fixed(
        kubeconfig, "kueue-appwrapper-integration", doctor.FAIL,
        [f'add "{doctor.APPWRAPPER_FRAMEWORK}" to integrations.frameworks',
         "rollout restart deployment/kueue-controller-manager"], fix,
    )  # fmt: skip
    assert "waits forever" in _by_check(report, "kueue-appwrapper-integration")[0]["found"]

    # No frameworks at all: Kueue's own default is batch/job alone.
    del config["integrations"]
    save()
    await _broken_then_fixed(
        kubeconfig, "kueue-appwrapper-integration", doctor.FAIL,
        [doctor.APPWRAPPER_FRAMEWORK],
        lambda: (config.update(integrations={"frameworks": [doctor.APPWRAPPER_FRAMEWORK]}),
                 save()),
    )  # fmt: skip


async def test_admission_gated_by_off_or_too_old(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    config, save = _config(cluster, "kueue")
    config["featureGates"] = {"AdmissionGatedBy": False}
    save()

    def switch_on() -> None:
        config["featureGates"] = {"AdmissionGatedBy": True}
        save()

    await _broken_then_fixed(kubeconfig, "kueue-admission-gated-by", doctor.FAIL,
                             ["AdmissionGatedBy: true"], switch_on)  # fmt: skip

    # Kueue 0.18 has the gate off by default; the same fix repairs it.
    del config["featureGates"]
    save()
    _set_kueue_image(cluster, "v0.18.2")
    await _broken_then_fixed(kubeconfig, "kueue-admission-gated-by", doctor.FAIL,
                             ["AdmissionGatedBy: true"], switch_on)  # fmt: skip

    # Kueue 0.16 has no such gate: only an upgrade helps.
    _set_kueue_image(cluster, "v0.16.4")
    await _broken_then_fixed(kubeconfig, "kueue-version", doctor.FAIL,
                             ["upgrade Kueue to 0.19.0"],
                             lambda: _set_kueue_image(cluster, "v0.19.1"))  # fmt: skip


async def test_kubernetes_below_the_minimums(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    cluster.api.version = {"major": "1", "minor": "29+", "gitVersion": "v1.29.7-gke.1"}

    def upgrade() -> None:
        cluster.api.version = {"major": "1", "minor": "30", "gitVersion": "v1.30.0"}

    report = await _broken_then_fixed(kubeconfig, "kubernetes-version", doctor.WARN,
                                      ["1.30"], upgrade)  # fmt: skip
    assert "adopt mode works" in _by_check(report, "kubernetes-version")[0]["found"]
    cluster.api.version = {"major": "1", "minor": "26", "gitVersion": "v1.26.3"}
    await _broken_then_fixed(kubeconfig, "kubernetes-version", doctor.FAIL, ["1.30"], upgrade)


async def test_appwrapper_settings_adopt_mode_depends_on(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    config, save = _config(cluster, "appwrapper")
    config["appwrapper"]["schedulerName"] = "default-scheduler"
    save()

    def empty_it() -> None:
        config["appwrapper"]["schedulerName"] = ""
        save()

    await _broken_then_fixed(kubeconfig, "appwrapper-scheduler-name", doctor.FAIL,
                             ['set appwrapper.schedulerName to ""',
                              "rollout restart deployment/appwrapper-controller-manager"],
                             empty_it)  # fmt: skip

    # The without-component-create grants under the operator's user RBAC check.
    for verb, group, resource in (("create", "batch.volcano.sh", "jobs"),
                                  ("create", "", "pods"), ("create", "", "services")):  # fmt: skip
        installation.revoke(cluster.api, AUTOWRAP.username, verb, group, resource)

    def check_off() -> None:
        config["appwrapper"]["userRBACAdmissionCheck"] = False
        save()

    await _broken_then_fixed(kubeconfig, "appwrapper-settings", doctor.FAIL,
                             ["userRBACAdmissionCheck: false"], check_off)  # fmt: skip
    code, report, _ = await _doctor(kubeconfig)
    rbac = _by_check(report, "rbac")[0]
    assert (
        rbac["level"] == doctor.OK
        and "create jobs.batch.volcano.sh, create pods, create services" in rbac["found"]
    )


async def test_autowrap_rbac_missing_and_excess(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    installation.revoke(cluster.api, AUTOWRAP.username, "list", "kueue.x-k8s.io", "workloads")
    report = await _broken_then_fixed(
        kubeconfig, "rbac", doctor.FAIL, ["apply the release file"],
        lambda: installation.grant_rbac(cluster.api, render("base"), AUTOWRAP.username),
    )  # fmt: skip
    assert "may not list workloads.kueue.x-k8s.io" in _by_check(report, "rbac")[0]["found"]

    extra = cluster.api.allow(AUTOWRAP.username, verb="update", group="", resource="pods")
    cluster.api.access_rules.remove(extra)
    cluster.api.access_rules.insert(0, extra)
    report = await _broken_then_fixed(kubeconfig, "rbac-excess", doctor.FAIL,
                                      ["remove the extra grant"],
                                      lambda: cluster.api.access_rules.remove(extra))  # fmt: skip
    assert "may also update pods" in _by_check(report, "rbac-excess")[0]["found"]

    # Running with --self-managed-certs needs the overlay's Secret and caBundle grants.
    deployment = cluster.api.store.get(installation.DEPLOYMENTS, "autowrap-system", "autowrap")
    assert deployment is not None
    deployment["spec"]["template"]["spec"]["containers"][0]["args"].append("--self-managed-certs")
    installation.put(cluster.api, deployment)
    report = await _broken_then_fixed(
        kubeconfig, "rbac", doctor.FAIL, ["apply the release file"],
        lambda: installation.grant_rbac(cluster.api, render("self-managed"),
                                        AUTOWRAP.username),
    )  # fmt: skip
    missing = _by_check(report, "rbac")[0]["found"]
    assert "get secrets in autowrap-system" in missing
    assert "patch mutatingwebhookconfigurations.admissionregistration.k8s.io" in missing
    running = _by_check(report, "deployment")[0]
    assert "self-managed certificates" in running["found"]


async def test_an_operators_edit_of_the_cluster_role_is_what_doctor_reports(
    installed_cluster: Installed,
) -> None:
    """The cluster answers by the ClusterRole it stores: ``kubectl edit clusterrole autowrap``
    taking patch on pods away fails the rbac check (its SubjectAccessReviews), and re-applying
    the release, the fix it prints, repairs it."""
    cluster, kubeconfig = installed_cluster
    await edit_cluster_role_verbs(kubeconfig, "autowrap", "", "pods",
                                  lambda verbs: verbs.remove("patch"))  # fmt: skip
    report = await _broken_then_fixed(
        kubeconfig, "rbac", doctor.FAIL, ["apply the release file"],
        lambda: installation.grant_rbac(cluster.api, render("base"), AUTOWRAP.username),
    )  # fmt: skip
    assert "may not patch pods" in _by_check(report, "rbac")[0]["found"]


def _overlay_with(tmp_path: Path, usernames: str) -> list[dict[str, Any]]:
    """Render the overlay docs/security.md ("Who the controllers are") describes: the release,
    the ConfigMap autowrap-controller-identities patched to ``usernames``, and
    deploy/controller-identities as a transformer."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(deploy / "base", overlay)],
        "patches": [{
            "target": {"kind": "ConfigMap", "name": "autowrap-controller-identities"},
            "patch": yaml.safe_dump([{"op": "replace", "path": "/data/usernames",
                                      "value": usernames}]),
        }],
        "transformers": [os.path.relpath(deploy / "controller-identities", overlay)],
    }))  # fmt: skip
    done = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@needs_kubectl
async def test_a_controller_under_a_name_the_installed_list_lacks(
    webhook_pki: ServingPki, installed_cluster: Installed, tmp_path: Path
) -> None:
    cluster, kubeconfig = installed_cluster
    # Volcano installed as the Helm release "vc": its job controller runs as vc-controllers
    # (and its scheduler, which may not create pods, as vc-scheduler).
    for obj in installation.volcano_release():
        installation.remove(cluster.api, obj)
    for obj in installation.volcano_release("vc"):
        installation.put(cluster.api, obj)
    renamed = "system:serviceaccount:volcano-system:vc-controllers"
    # An operator installed per namespace: its ServiceAccount may create pods in team-a
    # (wrap: Always) through a RoleBinding there.
    operator = "system:serviceaccount:spark-operator:spark-operator-controller"
    # No controller the list must name: Kueue's and Volcano's scheduler's ServiceAccounts may
    # not create pods, nor may a dashboard's that reads them; a workload of team-a may create
    # pods in team-a alone (they are wrapped there by design).
    cluster.api.add_namespace("monitoring")
    cluster.api.add_namespace("spark-operator")

    def role_binding(namespace: str, name: str, account: tuple[str, str]) -> dict[str, Any]:
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "pod-runner"},
                "subjects": [{"kind": "ServiceAccount", "name": account[1],
                              "namespace": account[0]}]}  # fmt: skip

    for obj in (
        installation.deployment("monitoring", "pod-dashboard", "example/dash:v1"),
        installation.cluster_role("pod-reader", [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]),
        installation.cluster_role_binding("pod-dashboard", "pod-reader", "monitoring",
                                          "pod-dashboard"),
        installation.cluster_role("pod-runner", [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        installation.deployment(TEAM_A, "runner", "example/runner:v1"),
        role_binding(TEAM_A, "runner", (TEAM_A, "runner")),
        installation.deployment("spark-operator", "spark-operator-controller", "example/so:v2"),
        role_binding(TEAM_A, "spark-operator", ("spark-operator", "spark-operator-controller")),
    ):  # fmt: skip
        installation.put(cluster.api, obj)

    code, report, _ = await _doctor(kubeconfig)
    warned = [f for f in _by_check(report, "controller-identities") if f["level"] == doctor.WARN]
    assert [f["found"].partition(" but ")[0] for f in warned] == [
        "Deployment spark-operator/spark-operator-controller runs as "
        f"{operator}, which may create pods in team-a (RoleBinding spark-operator)",
        f"Deployment volcano-system/vc-controllers runs as {renamed}, which may create pods in "
        "every namespace (ClusterRoleBinding vc-controllers-role)",
    ]
    assert warned[1]["found"].endswith(
        "is not in the installed controllers' list: the pods it makes for a Volcano Job or an "
        "AppWrapper are refused (autowrap-wrapped-pods), and in wrap: Always namespaces what it "
        "creates is sent to autowrap, which refuses it"
    )
    assert code == cli.EXIT_OK
    # The fix is the overlay patch: the installed list with both controllers added.
    fix = warned[1]["fix"]
    assert fix.startswith("if it is a controller you trust"), fix
    value = re.search(r'`value: "(\[.*\])"`', fix)
    assert value is not None, fix
    usernames = ast.literal_eval(value.group(1))
    assert usernames[-2:] == [operator, renamed] and len(usernames) == 13
    assert "system:serviceaccount:volcano-system:volcano-controllers" in usernames

    def apply_the_overlay() -> None:
        rendered = _overlay_with(tmp_path, value.group(1))
        installation.apply_release(cluster.api, rendered, ca_bundle=webhook_pki.ca_bundle)

    await _broken_then_fixed(
        kubeconfig, "controller-identities", doctor.WARN,
        [f"add '{renamed}' to the list", "ConfigMap autowrap-controller-identities",
         "`path: /data/usernames`", "deploy/controller-identities under `transformers:`"],
        apply_the_overlay,
    )  # fmt: skip
    code, report, _ = await _doctor(kubeconfig)
    assert [f["found"] for f in _by_check(report, "controller-identities")] == [
        "3 controller identities may create pods, each in the installed list of 13"
    ]


async def test_a_drifted_ca_bundle_and_the_service_endpoints(
    webhook_pki: ServingPki, installed_cluster: Installed
) -> None:
    cluster, kubeconfig = installed_cluster
    mutating = cluster.api.store.get(WEBHOOK_CONFIGURATIONS[0], None, doctor.MUTATING)
    assert mutating is not None
    other_ca = certs.make_ca("another-ca", days=30)
    mutating["webhooks"][1]["clientConfig"]["caBundle"] = certs.ca_bundle(other_ca.cert_pem)
    installation.put(cluster.api, mutating)

    def patch_back() -> None:
        mutating["webhooks"][1]["clientConfig"]["caBundle"] = webhook_pki.ca_bundle
        installation.put(cluster.api, mutating)

    report = await _broken_then_fixed(kubeconfig, "ca-bundle", doctor.FAIL,
                                      ["clientConfig.caBundle"], patch_back)  # fmt: skip
    found = _by_check(report, "ca-bundle")[0]["found"]
    assert "autowrap-mutating/pods.mutate.autowrap.io: does not verify" in found

    # No ready endpoint: nothing answers the webhooks.
    slices = cluster.api.store.list(installation.ENDPOINT_SLICES, "autowrap-system")
    ready = copy.deepcopy(slices[0])
    slices[0]["endpoints"][0]["conditions"]["ready"] = False
    installation.put(cluster.api, slices[0])
    # (repaired, one replica is what the testbed runs: warned about, not failed)
    await _broken_then_fixed(kubeconfig, "endpoints", doctor.FAIL, ["describe deployment"],
                             lambda: installation.put(cluster.api, ready),
                             repaired=doctor.WARN)  # fmt: skip


async def test_webhooks_and_admission_policies_missing(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    rendered = render("base")
    binding = cluster.api.store.get(installation.ADMISSION_POLICY_BINDINGS, None,
                                    "autowrap-admission-gate")  # fmt: skip
    assert binding is not None
    cluster.api.store.delete(installation.ADMISSION_POLICY_BINDINGS, None,
                             "autowrap-admission-gate")  # fmt: skip
    validating = cluster.api.store.get(WEBHOOK_CONFIGURATIONS[1], None, doctor.VALIDATING)
    cluster.api.store.delete(WEBHOOK_CONFIGURATIONS[1], None, doctor.VALIDATING)

    def reapply() -> None:
        for obj in rendered:
            if obj["kind"] == "ValidatingAdmissionPolicyBinding":
                installation.put(cluster.api, obj)
        assert validating is not None
        validating.pop("metadata")
        installation.put(cluster.api, {**validating,
                                       "metadata": {"name": doctor.VALIDATING}})  # fmt: skip

    report = await _broken_then_fixed(kubeconfig, "admission-policies", doctor.FAIL,
                                      ["apply the release file"], reapply)  # fmt: skip
    assert (
        "not bound: autowrap-admission-gate" in _by_check(report, "admission-policies")[0]["found"]
    )
    assert any(f["level"] == doctor.FAIL and "autowrap-validating does not exist" in f["found"]
               for f in _by_check(report, "webhook-configurations"))  # fmt: skip


async def test_a_controller_that_stopped_renewing_its_lease(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    await cluster.stop_controller()
    lease = cluster.api.store.get(LEASES, "autowrap-system", "autowrap-controller")
    assert lease is not None
    lease["spec"]["renewTime"] = "2020-01-01T00:00:00.000000Z"
    installation.put(cluster.api, lease)

    async def start_again() -> None:  # what the rollout restart does: a fresh replica
        state, options = cluster.running.state, cluster.running.options
        cluster.running.tasks.append(asyncio.create_task(app._run_controller(state, options)))
        while state.controller is None or not state.controller.leading.is_set():
            await asyncio.sleep(0.01)

    report = await _broken_then_fixed(
        kubeconfig, "lease", doctor.FAIL,
        ["logs deployment/autowrap", "rollout restart deployment/autowrap"], start_again,
    )  # fmt: skip
    assert "no replica leads" in _by_check(report, "lease")[0]["found"]


@needs_kubectl
async def test_policies_against_namespaces_and_queues(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    namespace = cluster.api.store.get(NAMESPACES, None, TEAM_A)
    assert namespace is not None
    del namespace["metadata"]["labels"]["autowrap.io/wrap"]
    installation.put(cluster.api, namespace)
    holder: dict[str, list[str]] = {}

    async def run_the_command() -> None:
        await asyncio.to_thread(_kubectl, kubeconfig, holder["command"])

    code, report, _ = await _doctor(kubeconfig, "-n", TEAM_A)
    label = _by_check(report, "wrap-always-label")[0]
    assert label["level"] == doctor.FAIL and "run unwrapped" in label["found"]
    holder["command"] = label["command"]
    assert holder["command"] == ["kubectl", "label", "namespace", TEAM_A,
                                 "autowrap.io/wrap=Always"]  # fmt: skip
    await _broken_then_fixed(kubeconfig, "wrap-always-label", doctor.FAIL,
                             ["kubectl label namespace team-a autowrap.io/wrap=Always"],
                             run_the_command)  # fmt: skip

    cluster.api.store.delete(LOCALQUEUES, TEAM_A, "team-a-queue")
    await _broken_then_fixed(kubeconfig, "local-queue", doctor.FAIL,
                             ["create LocalQueue team-a/team-a-queue"],
                             lambda: cluster.api.add_local_queue(TEAM_A, "team-a-queue",
                                                                 "cq"))  # fmt: skip

    # A LocalQueue whose ClusterQueue does not exist; one that uses MultiKueue.
    cluster.api.add_local_queue(TEAM_A, "team-a-batch", "gone")
    code, report, _ = await _doctor(kubeconfig, "-n", TEAM_A)
    missing = [f for f in _by_check(report, "cluster-queue") if f["level"] == doctor.FAIL]
    assert missing and "'gone', which does not exist" in missing[0]["found"]
    cluster.api.store.delete(LOCALQUEUES, TEAM_A, "team-a-batch")
    cq = cluster.api.store.get(CLUSTERQUEUES, None, "cq")
    assert cq is not None
    cq["spec"]["admissionChecks"] = ["multikueue-check"]
    installation.put(cluster.api, cq)
    code, report, _ = await _doctor(kubeconfig, "-n", TEAM_A)
    assert code == cli.EXIT_OK
    redirect = _by_check(report, "cluster-queue")[0]
    assert "MultiKueue" in redirect["found"] and "redirects" in redirect["found"]

    # A namespace labelled Always that no Always policy covers.
    cluster.api.add_namespace("stray", {"autowrap.io/wrap": "Always"})
    code, report, _ = await _doctor(kubeconfig, "-n", "stray")
    stray = _by_check(report, "wrap-always-label")[0]
    assert stray["level"] == doctor.WARN and stray["command"][-1] == "autowrap.io/wrap-"
    await asyncio.to_thread(_kubectl, kubeconfig, stray["command"])
    code, report, _ = await _doctor(kubeconfig, "-n", "stray")
    assert not _by_check(report, "wrap-always-label")


async def test_what_cannot_be_read_is_said_not_assumed(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    forbidden = 'configmaps "kueue-manager-config" is forbidden: User "bob" cannot get'
    cluster.api.inject("GET", "/namespaces/kueue-system/configmaps/", 403, times=None,
                       message=forbidden, reason="Forbidden")  # fmt: skip
    cluster.api.inject("POST", "/subjectaccessreviews", 403, times=None,
                       message="cannot create subjectaccessreviews", reason="Forbidden")  # fmt: skip
    cluster.api.inject("GET", "/v1/rolebindings$", 403, times=None,
                       message="cannot list rolebindings", reason="Forbidden")  # fmt: skip
    code, report, _ = await _doctor(kubeconfig)
    assert code == cli.EXIT_OK, [f for f in report["findings"] if f["level"] == doctor.FAIL]
    for check in ("kueue-appwrapper-integration", "rbac", "controller-identities"):
        found = _by_check(report, check)[0]
        assert found["level"] == doctor.WARN and "could not be read (HTTP 403" in found["found"]
        assert "credentials that may read" in found["fix"]
    # On by default in this version, but the configuration that could switch it off is
    # unread: said, not assumed.
    gate = _by_check(report, "kueue-admission-gated-by")[0]
    assert gate["level"] == doctor.WARN and "cannot be read" in gate["found"]
    assert "kueue_config" in report["cluster"]["unreadable"]


async def test_an_unreachable_cluster_exits_2(tmp_path: Path) -> None:
    from testbed.cluster.common import write_kubeconfig

    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", "token")
    code, out, err = await asyncio.to_thread(_run, ["doctor", "--kubeconfig", str(kubeconfig)])
    assert code == 2 and "cannot reach the cluster" in err and out == ""


# --- the smoke run -------------------------------------------------------------------------------


def _calls_of(cluster: Cluster, user: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every resource request ``user`` made."""
    made = set()
    for request in cluster.api.requests:
        parts = [p for p in request.path.split("/") if p]
        if request.user != user or len(parts) < 3 or parts[0] not in ("api", "apis"):
            continue
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            rest = rest[2:]
        if not rest:
            continue
        named = len(rest) > 1
        verb = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}.get(
            request.method,
            "get" if named else "watch" if request.query.get("watch") == "true" else "list",
        )
        made.add((group, rest[0], verb))
    return made


def _smoke_objects(cluster: Cluster) -> list[str]:
    left = []
    for res in (VCJOBS, PODS, APPWRAPPERS):
        for obj in cluster.api.store.list(res, NAMESPACE):
            if obj["metadata"]["name"].startswith("autowrap-smoke"):
                left.append(f"{res.kind}/{obj['metadata']['name']}")
    return left


async def test_smoke_runs_a_job_and_a_pod_to_running_pods_and_cleans_up(
    installed_cluster: Installed,
) -> None:
    cluster, kubeconfig = installed_cluster
    code, report, err = await _doctor(kubeconfig, "--smoke", NAMESPACE)
    stages = [(f["check"], f["level"]) for f in report["findings"] if f["section"] == "smoke"]
    assert code == cli.EXIT_OK, (stages, err)
    assert stages == [(f"{kind}-{stage}", doctor.OK) for kind in ("vcjob", "pod")
                      for stage in ("mutated", "appwrapper", "workload", "admitted",
                                    "released", "running", "rank-env")]  # fmt: skip
    # Every call doctor made (as the kubeconfig's user) is one it lists.
    made = _calls_of(cluster, ADMIN.username)
    listed = set(kube.DOCTOR_CALLS) | set(kube.SMOKE_CALLS)
    assert made - listed == set()
    assert {("", "pods", "watch"), (KUEUE, "workloads", "watch"),
            ("batch.volcano.sh", "jobs", "delete")} <= made  # fmt: skip
    found = {f["check"]: f["found"] for f in report["findings"] if f["section"] == "smoke"}
    assert "NODE_RANK=0" in found["vcjob-rank-env"] and "NODE_RANK=1" in found["vcjob-rank-env"]
    assert "cloud.example/pool" in found["vcjob-released"]
    await cluster.settle()
    assert _smoke_objects(cluster) == []


@pytest.mark.parametrize("installed_cluster", ["Redirect"], indirect=True)
async def test_smoke_in_redirect_mode_follows_the_appwrapper_that_stands_in(
    installed_cluster: Installed,
) -> None:
    cluster, kubeconfig = installed_cluster
    code, report, err = await _doctor(kubeconfig, "--smoke", NAMESPACE)
    smoke = {f["check"]: f for f in report["findings"] if f["section"] == "smoke"}
    assert code == cli.EXIT_OK, (list(smoke.values()), err)
    assert "denied by design" in smoke["vcjob-mutated"]["found"]
    assert {f["level"] for f in smoke.values()} == {doctor.OK}
    assert "NODE_RANK=1" in smoke["vcjob-rank-env"]["found"]
    assert "pod-running" in smoke
    await cluster.settle()
    assert _smoke_objects(cluster) == []


async def test_smoke_says_which_stage_stopped_and_why(installed_cluster: Installed) -> None:
    cluster, kubeconfig = installed_cluster
    # Kueue never admits: the run stops at that stage with Kueue's own reason.
    cluster.sims.kueue.auto_admit = False
    code, text, _ = await _smoke_in_text(kubeconfig, deadline=2)
    assert code == cli.EXIT_REJECTED
    assert "ok    vcjob-workload" in text
    assert "fail  vcjob-admitted: Workload appwrapper-autowrap-smoke-" in text
    assert "not admitted within 2s" in text
    assert "pod-mutated" not in text
    await cluster.settle()
    assert _smoke_objects(cluster) == []


async def test_a_cancelled_smoke_run_deletes_what_it_created(installed_cluster: Installed) -> None:
    from webhook.cli import smoke
    from webhook.shell.kube import Api

    cluster, kubeconfig = installed_cluster
    cluster.sims.kueue.auto_admit = False
    api = await Api.connect(str(kubeconfig))
    seen_appwrapper = asyncio.Event()

    def say(finding: doctor.Finding) -> None:
        if finding.check == "vcjob-appwrapper":
            seen_appwrapper.set()

    try:
        task = asyncio.create_task(smoke.run(api, NAMESPACE, "team-queue", say=say))
        await seen_appwrapper.wait()
        assert _smoke_objects(cluster)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await api.close()
    await cluster.settle()
    assert _smoke_objects(cluster) == []


def test_the_names_doctor_expects_are_the_ones_the_release_installs() -> None:
    rendered = render("base")
    hooks = {o["metadata"]["name"]: [h["name"] for h in o["webhooks"]]
             for o in rendered if "webhooks" in o}  # fmt: skip
    assert hooks == {doctor.MUTATING: list(doctor.MUTATING_WEBHOOKS),
                     doctor.VALIDATING: list(doctor.VALIDATING_WEBHOOKS)}  # fmt: skip
    policies = [o["metadata"]["name"] for o in rendered
                if o["kind"] == "ValidatingAdmissionPolicy"]  # fmt: skip
    assert sorted(policies) == sorted(doctor.ADMISSION_POLICIES)
    maps = [o["metadata"]["name"] for o in rendered if o["kind"] == "ConfigMap"]
    assert doctor.POLICIES_CONFIGMAP in maps
    assert set(doctor.WRAP_WEBHOOKS) <= set(doctor.MUTATING_WEBHOOKS)


def test_doctor_calls_are_the_users_not_the_service_accounts() -> None:
    """doctor reads with the user's kubeconfig: its calls are not granted to autowrap."""
    from webhook.shell import kube

    extra = set(kube.DOCTOR_CALLS) - set(kube.RBAC)
    assert ("", "configmaps", "get") in extra and ("apps", "deployments", "get") in extra
    assert not {c for c in kube.RBAC if c[1] in ("configmaps", "deployments", "secrets")}


async def test_admission_and_doctor_agree_on_when_to_redirect(installed_cluster: Installed) -> None:
    from webhook.shell.kube import KubeClient

    cluster, kubeconfig = installed_cluster
    flavor = cluster.api.store.get(RESOURCEFLAVORS, None, "a100")
    assert flavor is not None
    flavor["spec"]["topologyName"] = "default"
    installation.put(cluster.api, flavor)
    client = await KubeClient.connect(str(kubeconfig))
    try:
        said = await client.redirect_reason(NAMESPACE, "team-queue", timeout=10)
    finally:
        await client.close()
    assert said == "ClusterQueue 'cq' uses topology-aware scheduling (ResourceFlavor 'a100')"
    code, report, _ = await _doctor(kubeconfig, "-n", NAMESPACE)
    found = _by_check(report, "cluster-queue")[0]["found"]
    assert said in found and "autowrap redirects" in found


def test_the_rank_env_check_compares_each_pod_with_its_offline_rendering() -> None:
    from webhook.cli import podview, smoke

    env = [{"name": "MASTER_ADDR", "value": "m-0.m"}, {"name": "MASTER_PORT", "value": "23456"},
           {"name": "NNODES", "value": "2"}, {"name": "WORLD_SIZE", "value": "2"},
           {"name": "NODE_RANK", "valueFrom": {"fieldRef": {
               "fieldPath": "metadata.annotations['autowrap.io/node-rank']"}}}]  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml",
                        "annotations": {"autowrap.io/node-rank": "1"}},
           "spec": {"containers": [{"name": "c", "image": "i", "env": env}]}}  # fmt: skip
    rows = podview.pods(pod, "ml")
    assert rows[0].node_rank == "1"
    assert smoke.rank_env_differences(rows, {"p": pod}) == []
    other = copy.deepcopy(pod)
    other["metadata"]["annotations"]["autowrap.io/node-rank"] = "0"
    assert smoke.rank_env_differences(rows, {"p": other}) == ["p NODE_RANK=0 (rendered offline: 1)"]
    assert smoke.rank_env_differences(rows, {}) == ["p: no such pod"]


# --- checks over facts alone (the pure module) ---------------------------------------------------


def test_versions_are_read_from_tags_flags_and_server_strings() -> None:
    assert doctor.parse_version("v1.29.7-gke.1") == (1, 29, 7)
    assert doctor.parse_version("1.30+") == (1, 30, 0)
    assert doctor.parse_version("latest") is None
    kueue = installation.deployment("kueue-system", "kueue-controller-manager",
                                    "registry:5000/kueue/kueue:v0.18.1@sha256:abc")  # fmt: skip
    assert doctor.image_version(kueue) == (0, 18, 1)
    untagged = installation.deployment("kueue-system", "kueue-controller-manager",
                                       "registry:5000/kueue/kueue@sha256:abc")  # fmt: skip
    assert doctor.image_version(untagged) is None
    kueue["spec"]["template"]["spec"]["containers"][0]["args"] = [
        "--feature-gates=TopologyAwareScheduling=true,AdmissionGatedBy=true"
    ]
    facts = doctor.Facts(kueue_deployment=kueue)
    gate = doctor.admission_gated_by(facts, doctor.image_version(kueue))
    assert gate.level == doctor.OK and "--feature-gates" in gate.found


def test_partition_policy_matters_only_where_a_policy_writes_it() -> None:
    from webhook.core import policy

    crd_without = {"spec": {"versions": [{"name": "v1alpha1", "schema": {"tasks": {}}}]}}
    plain = doctor.Facts(volcano_job_crd=crd_without,
                         policies=policy.PolicySet((policy.BUILTIN,)))  # fmt: skip
    assert doctor.partition_policy(plain).level == doctor.OK
    partitioned = policy.build([("p.yaml", """
apiVersion: autowrap.io/v1alpha1
kind: Policy
metadata: {name: racks}
spec:
  namespaces: {names: ["*"]}
  topology: {partitionDefault: {mode: hard, highestTierAllowed: 1}}
""")])  # fmt: skip
    wanting = doctor.Facts(volcano_job_crd=crd_without, policies=partitioned)
    found = doctor.partition_policy(wanting)
    assert found.level == doctor.FAIL and "racks" in found.found and "1.14" in found.fix


def test_an_expired_certificate_fails_and_one_near_expiry_warns(webhook_pki: ServingPki) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(webhook_pki.cert_path.read_bytes())
    der = cert.public_bytes(serialization.Encoding.DER)
    hook = {"name": "pods.mutate.autowrap.io", "clientConfig": {"caBundle": webhook_pki.ca_bundle}}
    replica = doctor.Replica("10.0.0.1", 9443, "autowrap-0", certificate=der, readyz=200)
    after = cert.not_valid_after_utc + datetime.timedelta(minutes=1)
    facts = doctor.Facts(mutating={"webhooks": [hook]}, replicas=[replica], now=after)
    levels = {f.check: f.level for f in doctor.ca_bundles(facts)}
    # Past its end the chain no longer verifies either, as the apiserver would find.
    assert levels == {"ca-bundle": doctor.FAIL, "certificate-expiry": doctor.FAIL}
    soon = cert.not_valid_after_utc - datetime.timedelta(days=3)
    facts = doctor.Facts(mutating={"webhooks": [hook]}, replicas=[replica], now=soon)
    levels = {f.check: f.level for f in doctor.ca_bundles(facts)}
    assert levels == {"ca-bundle": doctor.OK, "certificate-expiry": doctor.WARN}
    # Checked for the Service's name: another install namespace does not match the certificate.
    elsewhere = doctor.Facts(mutating={"webhooks": [hook]}, replicas=[replica], now=soon,
                             install_namespace="platform")  # fmt: skip
    assert doctor.ca_bundles(elsewhere)[0].level == doctor.FAIL


def test_cert_manager_is_checked_only_for_its_variant() -> None:
    plain = doctor.Facts(mutating={"metadata": {"name": doctor.MUTATING}})
    assert doctor.cert_manager(plain) is None
    injected = {"metadata": {"name": doctor.MUTATING, "annotations": {
        doctor.CERT_MANAGER_INJECT: "autowrap-system/autowrap-serving-cert"}}}  # fmt: skip
    missing = doctor.cert_manager(doctor.Facts(mutating=injected))
    assert (
        missing is not None and missing.level == doctor.FAIL and "cert-manager.io" in missing.found
    )
    not_ready = doctor.Facts(mutating=injected, groups={"cert-manager.io": ("v1",)},
                             certificate={"status": {"conditions": [
                                 {"type": "Ready", "status": "False"}]}})  # fmt: skip
    found = doctor.cert_manager(not_ready)
    assert found is not None and found.level == doctor.FAIL and "not Ready" in found.found
    ready = doctor.Facts(mutating=injected, groups={"cert-manager.io": ("v1",)},
                         certificate={"status": {"conditions": [
                             {"type": "Ready", "status": "True"}]}})  # fmt: skip
    found = doctor.cert_manager(ready)
    assert found is not None and found.level == doctor.OK


def test_queues_that_cannot_be_read_are_not_judged_missing() -> None:
    from webhook.core import policy

    team = policy.build([("t.yaml", """
apiVersion: autowrap.io/v1alpha1
kind: Policy
metadata: {name: team-a}
spec:
  namespaces: {names: [team-a]}
  wrap: Always
  queue: {default: team-a-queue}
""")])  # fmt: skip
    namespace = {"metadata": {"name": "team-a", "labels": {"autowrap.io/wrap": "Always"}}}
    unread = doctor.Facts(policies=team, namespaces=[namespace],
                          unreadable={"local_queues": "HTTP 403: forbidden"})  # fmt: skip
    found = {(f.check, f.level) for f in doctor.policies(unread)}
    assert ("local-queues", doctor.WARN) in found
    assert not {c for c, _ in found} & {"local-queue", "cluster-queue"}
    # Read, and absent: that is a failure.
    read = doctor.Facts(policies=team, namespaces=[namespace])
    assert ("local-queue", doctor.FAIL) in {(f.check, f.level) for f in doctor.policies(read)}


def test_which_workloads_rbac_lets_create_pods() -> None:
    """RBAC as the authorizer reads it: a ClusterRoleBinding grants everywhere, a RoleBinding in
    its namespace (to a Role there or a ClusterRole), a ServiceAccount's groups count, and a rule
    with resourceNames never allows a create."""

    def role(kind: str, name: str, rule: dict[str, Any], namespace: str = "") -> dict[str, Any]:
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"kind": kind, "metadata": meta, "rules": [rule]}

    def binding(kind: str, name: str, ref: tuple[str, str], subject: dict[str, str],
                namespace: str = "") -> dict[str, Any]:  # fmt: skip
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        return {"kind": kind, "metadata": meta, "subjects": [subject],
                "roleRef": {"kind": ref[0], "name": ref[1]}}  # fmt: skip

    create = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    workloads = []
    for ns, name, spec in (("a", "plain", {"serviceAccountName": "plain"}),
                           ("a", "old-field", {"serviceAccount": "old-field"}),
                           ("b", "no-account", {}), ("c", "named-only", {"serviceAccountName": "x"}),
                           ("d", "grouped", {"serviceAccountName": "g"})):  # fmt: skip
        workloads.append({"kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                          "spec": {"template": {"spec": spec}}})  # fmt: skip
    roles = [role("ClusterRole", "creates", create),
             role("ClusterRole", "named", {**create, "resourceNames": ["p"]}),
             role("Role", "local", {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, "b")]  # fmt: skip
    bindings = [
        binding("ClusterRoleBinding", "plain", ("ClusterRole", "creates"),
                {"kind": "ServiceAccount", "name": "plain", "namespace": "a"}),
        binding("RoleBinding", "old", ("ClusterRole", "creates"),
                {"kind": "ServiceAccount", "name": "old-field"}, "a"),
        binding("RoleBinding", "default", ("Role", "local"),
                {"kind": "ServiceAccount", "name": "default", "namespace": "b"}, "b"),
        binding("ClusterRoleBinding", "named", ("ClusterRole", "named"),
                {"kind": "ServiceAccount", "name": "x", "namespace": "c"}),
        binding("ClusterRoleBinding", "group", ("ClusterRole", "creates"),
                {"kind": "Group", "name": "system:serviceaccounts:d"}),
    ]  # fmt: skip
    found = {c.username: (c.everywhere, c.namespaces, c.workloads)
             for c in doctor.pod_creators(workloads, roles, bindings)}  # fmt: skip
    assert found == {
        "system:serviceaccount:a:plain": (True, (), ("Deployment a/plain",)),
        "system:serviceaccount:a:old-field": (False, ("a",), ("Deployment a/old-field",)),
        "system:serviceaccount:b:default": (False, ("b",), ("Deployment b/no-account",)),
        "system:serviceaccount:d:g": (True, (), ("Deployment d/grouped",)),
    }


def test_the_installed_list_is_read_where_it_is_used_and_must_agree() -> None:
    from webhook.cli.doctor import identities

    listed = [
        "system:serviceaccount:volcano-system:volcano-controllers",
        "system:kube-controller-manager",
    ]
    cel = repr(listed)
    policy = {"spec": {"variables": [{"name": "controllers", "expression": cel}]}}
    hook = {"name": "pods.adopt-always.autowrap.io", "matchConditions": [
        {"name": "not-from-its-controller",
         "expression": f"{cel}.all(u, u != request.userInfo.username) || x"},
        {"name": "appwrapper-label-only-from-its-controller",
         "expression": f"{repr(listed[:1])}.all(u, u != request.userInfo.username)"}]}  # fmt: skip
    assert identities.listed_in("['a', \"b\"].all(u, u != x)") == ["a", "b"]
    assert identities.listed_in("request.userInfo.username in ['a']") is None
    facts = doctor.Facts(admission_policies={"autowrap-wrapped-pods": policy},
                         mutating={"webhooks": [hook]})  # fmt: skip
    said = doctor.controller_identities(facts)
    assert [(f.level, f.found) for f in said] == [
        (doctor.WARN, "the places that read the controllers' list disagree: autowrap-mutating/"
                      "pods.adopt-always.autowrap.io (appwrapper-label-only-from-its-controller) "
                      "lacks system:kube-controller-manager"),
        (doctor.OK, "0 controller identities may create pods, each in the installed list of 1"),
    ]  # fmt: skip


async def test_an_enforced_owner_reference_without_the_component_fails_before_a_user_sees_it(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with installed(webhook_pki, tmp_path, enforcement=True) as (_, kubeconfig):
        code, report, _ = await _doctor(kubeconfig)
    found = _by_check(report, "owner-references")
    assert [f["level"] for f in found] == ["fail"], found
    assert "enforces OwnerReferencesPermissionEnforcement" in found[0]["found"]
    assert "deploy/components/owner-references-enforcement/rbac.yaml" in found[0]["fix"]
    assert code != cli.EXIT_OK
