"""Installing into another namespace with kustomize's `namespace:` field (README, "Another
namespace"): what follows the namespace, and what stays."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests import CLUSTER_SCOPED_KINDS, DEPLOY, VARIANTS
from webhook import names

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

Obj = dict[str, Any]
TARGET = "platform-webhooks"
APPWRAPPER_NAMESPACE = "appwrapper-system"


def _render_in(tmp_path: Path, variant: str) -> list[Obj]:
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("release"))
    overlay = tmp_path / "install"
    overlay.mkdir()
    relative = VARIANTS[variant].relative_to(DEPLOY.parent)
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"namespace: {TARGET}\n"
        f"resources:\n- ../{relative}\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        ["kubectl", "kustomize", str(overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("variant", ["self-managed", "cert-manager"])
def test_namespace_field_moves_the_install_and_every_webhook_service(
    tmp_path: Path, variant: str
) -> None:
    docs = _render_in(tmp_path, variant)
    namespaces = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    assert namespaces == [TARGET]
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED_KINDS and doc["kind"] != "ClusterRole":
            assert doc["metadata"].get("namespace") == TARGET, (doc["kind"], doc["metadata"])
    hooks = [
        hook
        for doc in docs
        if doc["kind"].endswith("WebhookConfiguration")
        for hook in doc["webhooks"]
    ]
    assert hooks
    for hook in hooks:
        service = hook["clientConfig"]["service"]
        assert (service["namespace"], service["name"]) == (TARGET, names.SERVICE_NAME)


def test_bindings_follow_autowrap_but_not_the_appwrapper_controller(tmp_path: Path) -> None:
    docs = _render_in(tmp_path, "self-managed")
    subjects = [
        subject
        for doc in docs
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for subject in doc.get("subjects", [])
    ]
    autowrap = [s for s in subjects if s["name"] == names.SERVICE_NAME]
    assert autowrap and all(s["namespace"] == TARGET for s in autowrap)
    others = [s for s in subjects if s["name"] != names.SERVICE_NAME]
    assert others and all(s["namespace"] == APPWRAPPER_NAMESPACE for s in others)


def test_the_pods_learn_their_namespace_from_the_downward_api(tmp_path: Path) -> None:
    # `serve` takes the Lease's and the self-managed Secret's namespace, and the certificate's
    # DNS name <service>.<namespace>.svc, from POD_NAMESPACE: nothing in the pod names one.
    docs = _render_in(tmp_path, "self-managed")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert names.SERVICE_NAMESPACE not in yaml.safe_dump(container)
