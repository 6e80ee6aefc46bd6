"""An install never takes over a namespace it did not create: the record it keeps of the one it
created (the annotation autowrap.io/created-by-install, written when the Namespace is created)
cannot be added later, and an install into an existing namespace leaves the Namespace out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed import prerequisites
from testbed.apiserver import UserInfo
from tests.deploy.test_admission_policies import ALICE, allowed, denied_by, update
from tests.deploy.test_manifests import render

REPO = Path(__file__).resolve().parents[2]
RECORD = "autowrap.io/created-by-install"
POLICY = "autowrap-install-namespace"
ADMIN = UserInfo(username="kubernetes-admin", groups=("system:masters", "system:authenticated"))


def _namespace(name: str = "platform-webhooks", **annotations: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"team": "platform"}, "annotations": annotations},
    }


def test_the_namespace_the_install_creates_carries_the_record():
    (namespace,) = [o for o in render("base") if o["kind"] == "Namespace"]
    assert namespace["metadata"]["annotations"][RECORD] == "true"


async def test_the_release_applied_over_a_namespace_it_did_not_create_is_refused():
    """What `kubectl apply` of the release sends for an existing namespace: its labels, Pod
    Security level and the record. Refused whole, even to a cluster administrator."""
    (installed,) = [o for o in render("base") if o["kind"] == "Namespace"]

    def take_over(ns: dict[str, object]) -> None:
        ns["metadata"]["labels"].update(installed["metadata"]["labels"])  # type: ignore[index]
        ns["metadata"]["annotations"].update(installed["metadata"]["annotations"])  # type: ignore[index]

    message = denied_by(await update(_namespace(), take_over, ADMIN), POLICY)
    assert "namespace platform-webhooks exists and was not created by autowrap's install" in (
        message
    )
    assert "deploy/components/existing-namespace" in message


@pytest.mark.parametrize("user", [ALICE, ADMIN], ids=["a user", "an administrator"])
async def test_nobody_can_mark_a_namespace_for_uninstall_to_delete(user):
    def mark(ns: dict[str, object]) -> None:
        ns["metadata"]["annotations"][RECORD] = "true"  # type: ignore[index]

    denied_by(await update(_namespace(), mark, user), POLICY)


async def test_the_namespace_the_install_created_takes_the_release_again():
    """An upgrade applies the release over the namespace an earlier install created."""

    def relabel(ns: dict[str, object]) -> None:
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "restricted"  # type: ignore[index]

    allowed(await update(_namespace("autowrap-system", **{RECORD: "true"}), relabel, ADMIN))


async def test_a_namespace_may_lose_the_record():
    def drop(ns: dict[str, object]) -> None:
        ns["metadata"]["annotations"].pop(RECORD)  # type: ignore[union-attr]

    allowed(await update(_namespace("autowrap-system", **{RECORD: "true"}), drop, ADMIN))


def test_an_install_into_an_existing_namespace_leaves_the_namespace_out(tmp_path: Path):
    """The overlay docs/install.md gives for a namespace that exists: nothing in it writes a
    Namespace, so kubectl apply changes neither its labels nor its Pod Security level."""
    prerequisites.kubectl()
    shutil.copytree(REPO / "deploy", tmp_path / "deploy", ignore=shutil.ignore_patterns("release"))
    overlay = tmp_path / "install"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "namespace: platform-webhooks\n"
        "resources:\n- ../deploy/overlays/self-managed\n"
        "components:\n- ../deploy/components/existing-namespace\n"
        "transformers:\n- ../deploy/install-namespace\n"
    )
    done = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert objects and not [o for o in objects if o["kind"] == "Namespace"]
    namespaced = [o for o in objects if o["metadata"].get("namespace")]
    assert namespaced and {o["metadata"]["namespace"] for o in namespaced} == {"platform-webhooks"}
