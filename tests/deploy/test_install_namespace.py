"""Installing into another namespace with one setting: kustomize's `namespace:` field plus the
transformer deploy/install-namespace (docs/install.md, "Another namespace"), or the release
renderer's --namespace. Everything that names autowrap's namespace follows; the AppWrapper
controller's binding stays where that controller runs."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import prerequisites
from testbed.apiserver import ApiserverEmulator, UserInfo, selector_matches
from tests.deploy.test_manifests import CLUSTER_SCOPED_KINDS, DEPLOY, VARIANTS
from tools import render_release
from webhook.model import names


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    prerequisites.kubectl()  # skipped without it, failed in CI


Obj = dict[str, Any]
TARGET = "platform-webhooks"
APPWRAPPER_NAMESPACE = "appwrapper-system"
NAME_LABEL = "kubernetes.io/metadata.name"


def _kustomize(directory: Path) -> str:
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _overlay(tmp_path: Path, variant: str, *, transformer: bool = True) -> str:
    """An overlay of the user's own, as docs/install.md shows it, built with kubectl."""
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("release"))
    overlay = tmp_path / "install"
    overlay.mkdir()
    relative = VARIANTS[variant].relative_to(DEPLOY.parent)
    text = (
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"namespace: {TARGET}\n"
        f"resources:\n- ../{relative}\n"
    )
    if transformer:
        text += "transformers:\n- ../deploy/install-namespace\n"
    (overlay / "kustomization.yaml").write_text(text, encoding="utf-8")
    return _kustomize(overlay)


def _docs(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def _hooks(docs: list[Obj]) -> list[Obj]:
    return [
        hook
        for doc in docs
        if doc["kind"].endswith("WebhookConfiguration")
        for hook in doc["webhooks"]
    ]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_nothing_names_autowrap_system_any_more(tmp_path: Path, variant: str) -> None:
    text = _overlay(tmp_path, variant)
    assert names.SERVICE_NAMESPACE not in text
    docs = _docs(text)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"] == [TARGET]
    for doc in docs:
        namespace = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED_KINDS:
            assert namespace is None, f"{doc['kind']}/{doc['metadata']['name']} is cluster-scoped"
        else:
            assert namespace == TARGET, (doc["kind"], doc["metadata"])


def test_the_namespace_field_alone_leaves_autowrap_system_behind(tmp_path: Path) -> None:
    # Why the transformer exists: without it these stay (and the policy ConfigMap's webhook
    # would check a namespace autowrap is not in).
    text = _overlay(tmp_path, "cert-manager", transformer=False)
    assert text.count(names.SERVICE_NAMESPACE) >= 13


@pytest.mark.parametrize("variant", ["self-managed", "cert-manager"])
def test_every_webhook_serves_from_and_leaves_out_the_new_namespace(
    tmp_path: Path, variant: str
) -> None:
    hooks = _hooks(_docs(_overlay(tmp_path, variant)))
    assert len(hooks) >= 13
    home = {NAME_LABEL: TARGET}
    for hook in hooks:
        service = hook["clientConfig"]["service"]
        assert (service["namespace"], service["name"]) == (TARGET, names.SERVICE_NAME)
        reaches_home = selector_matches(hook["namespaceSelector"], home)
        # Only the policy ConfigMap's own webhook reaches autowrap's namespace, so it still
        # checks the ConfigMap there; every other one leaves it out.
        assert reaches_home == (hook["name"] == "policies.validate.autowrap.io"), hook["name"]
        assert selector_matches(hook["namespaceSelector"], {NAME_LABEL: "kube-system"}) is False


def test_the_default_policy_excludes_the_new_namespace(tmp_path: Path) -> None:
    docs = _docs(_overlay(tmp_path, "self-managed"))
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["name"] == "autowrap-policies"
    policy = yaml.safe_load(configmap["data"]["default.yaml"])
    assert policy["spec"]["namespaces"]["exclude"] == [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        TARGET,
    ]
    # Everything else in the file is untouched.
    original = yaml.safe_load((DEPLOY / "base" / "policies" / "default.yaml").read_text())
    policy["spec"]["namespaces"]["exclude"][-1] = names.SERVICE_NAMESPACE
    assert policy == original


def test_cert_manager_names_follow(tmp_path: Path) -> None:
    docs = _docs(_overlay(tmp_path, "cert-manager"))
    (certificate,) = [
        d for d in docs if d["kind"] == "Certificate" and d["metadata"]["name"] == "autowrap-serving-cert"
    ]  # fmt: skip
    assert certificate["spec"]["dnsNames"] == [
        f"{names.SERVICE_NAME}.{TARGET}.svc",
        f"{names.SERVICE_NAME}.{TARGET}.svc.cluster.local",
    ]
    annotations = [
        d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
    ]
    assert annotations == [f"{TARGET}/autowrap-serving-cert"] * 2


def test_bindings_follow_autowrap_but_not_the_appwrapper_controller(tmp_path: Path) -> None:
    docs = _docs(_overlay(tmp_path, "self-managed"))
    subjects = [
        subject
        for doc in docs
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for subject in doc.get("subjects", [])
    ]
    autowrap = [s for s in subjects if s["name"] == names.SERVICE_NAME]
    assert autowrap and all(s["namespace"] == TARGET for s in autowrap)
    # Groups (every authenticated user may read the policies) have no namespace.
    others = [s for s in subjects if s["name"] != names.SERVICE_NAME and s["kind"] != "Group"]
    assert others and all(s["namespace"] == APPWRAPPER_NAMESPACE for s in others)


def test_the_pods_learn_their_namespace_from_the_downward_api(tmp_path: Path) -> None:
    # `serve` takes the Lease's and the self-managed Secret's namespace, and the certificate's
    # DNS name <service>.<namespace>.svc, from POD_NAMESPACE: nothing in the pod names one.
    docs = _docs(_overlay(tmp_path, "self-managed"))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert names.SERVICE_NAMESPACE not in yaml.safe_dump(container)


async def test_the_policies_know_autowrap_by_its_new_service_account(tmp_path: Path) -> None:
    emulator = ApiserverEmulator(
        "127.0.0.1", 9, admission_policies=_docs(_overlay(tmp_path, "self-managed"))
    )
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "labels": {"workload.codeflare.dev/appwrapper": "aw-p"},
        },
        "spec": {
            "schedulingGates": [{"name": names.ADMISSION_GATE}],
            "containers": [{"name": "c", "image": "train:1"}],
        },
    }
    released = copy.deepcopy(pod)
    released["spec"]["schedulingGates"] = []

    def account(namespace: str) -> UserInfo:
        return UserInfo(username=f"system:serviceaccount:{namespace}:{names.SERVICE_NAME}")

    moved = await emulator.admit("UPDATE", released, old_object=pod, user=account(TARGET))
    assert moved.allowed, moved.message
    stale = await emulator.admit(
        "UPDATE", released, old_object=pod, user=account(names.SERVICE_NAMESPACE)
    )
    assert not stale.allowed and "autowrap-admission-gate" in stale.message
    swap = copy.deepcopy(pod)
    swap["spec"]["containers"][0]["image"] = "other:1"
    refused = await emulator.admit("UPDATE", swap, old_object=pod, user=account(TARGET))
    assert not refused.allowed and "autowrap-own-writes" in refused.message


# --- the release renderer ---------------------------------------------------------------------


def test_release_files_for_a_chosen_namespace_and_image(tmp_path: Path) -> None:
    out = tmp_path / "release"
    assert render_release.main(["--out", str(out), "--namespace", TARGET, "--image",
                                "registry.example:5000/ml/autowrap:0.5.0"]) == 0  # fmt: skip
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(f"autowrap-{v}.yaml" for v in render_release.VARIANTS)
    text = (out / "autowrap-cert-manager.yaml").read_text()
    assert text == _overlay(tmp_path / "kustomize", "cert-manager").replace(
        "ghcr.io/autowrap/autowrap:0.5.0", "registry.example:5000/ml/autowrap:0.5.0"
    )
    for path in out.iterdir():
        text = path.read_text()
        assert names.SERVICE_NAMESPACE not in text, path.name
        images = {
            c["image"]
            for d in _docs(text)
            if d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"]
        }
        assert images == {"registry.example:5000/ml/autowrap:0.5.0"}


def test_release_files_with_a_digest_and_another_policy_set(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    default = (DEPLOY.parent / "policies" / "default.yaml").read_text()
    (policies / "default.yaml").write_text(default)
    (policies / "team-a.yaml").write_text((DEPLOY.parent / "policies" / "team-a.yaml").read_text())
    digest = "sha256:" + "ab" * 32
    out = tmp_path / "release"
    code = render_release.main(["--out", str(out), "--variant", "self-managed", "--policies",
                                str(policies), "--image", f"registry.example/autowrap@{digest}"])  # fmt: skip
    assert code == 0
    docs = _docs((out / "autowrap-self-managed.yaml").read_text())
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert set(configmap["data"]) == {"default.yaml", "team-a.yaml"}
    assert configmap["data"]["default.yaml"] == default
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.example/autowrap@{digest}"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--namespace", "Team_A"], "not a valid namespace name"),
        (["--image", "registry.example/autowrap"], "give a tag or a digest"),
        (["--image", "registry.example:5000/autowrap"], "give a tag or a digest"),
        (["--policies", "{bad}"], "--policies"),
    ],
)
def test_bad_options_are_one_line_with_the_fix(
    tmp_path: Path, argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.yaml").write_text("apiVersion: autowrap.io/v1alpha1\nkind: Policy\nspec: 3\n")
    argv = [a.replace("{bad}", str(bad)) for a in argv]
    assert render_release.main(["--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_customising_needs_an_output_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_release.main(["--namespace", TARGET]) == 2
    assert "give --out DIR" in capsys.readouterr().err


def test_an_overlay_replaces_the_policy_set_as_the_install_guide_shows(tmp_path: Path) -> None:
    # docs/install.md, "Choosing the policies": the overlay's own files, behavior: replace.
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("release"))
    overlay = tmp_path / "my-autowrap"
    (overlay / "policies").mkdir(parents=True)
    examples = DEPLOY.parent / "policies"
    for name in ("default.yaml", "team-a.yaml"):
        shutil.copyfile(examples / name, overlay / "policies" / name)
    (overlay / "kustomization.yaml").write_text(
        "resources:\n- ../deploy/overlays/self-managed\n"
        "configMapGenerator:\n- name: autowrap-policies\n  namespace: autowrap-system\n"
        "  behavior: replace\n  options:\n    disableNameSuffixHash: true\n"
        "  files:\n  - policies/default.yaml\n  - policies/team-a.yaml\n",
        encoding="utf-8",
    )
    (configmap,) = [d for d in _docs(_kustomize(overlay)) if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["name"] == "autowrap-policies"
    assert configmap["data"] == {
        "default.yaml": (examples / "default.yaml").read_text(),
        "team-a.yaml": (examples / "team-a.yaml").read_text(),
    }


def test_your_policy_files_are_installed_as_they_are_in_another_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    default = (DEPLOY.parent / "policies" / "default.yaml").read_text()
    (policies / "default.yaml").write_text(default)
    out = tmp_path / "release"
    argv = ["--out", str(out), "--variant", "base", "--namespace", TARGET, "--policies",
            str(policies)]  # fmt: skip
    assert render_release.main(argv) == 0
    assert f"names {names.SERVICE_NAMESPACE}" in capsys.readouterr().err, "the note says so"
    docs = _docs((out / "autowrap-base.yaml").read_text())
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["namespace"] == TARGET
    assert configmap["data"] == {"default.yaml": default}, "never rewritten by the transformer"
