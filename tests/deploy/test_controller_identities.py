"""The controllers' usernames are written in one place, deploy/base/controller-identities.yaml,
and deploy/controller-identities carries them to every webhook entry and policy that reads them:
the rendered base agrees with the list, and an overlay that patches the list as
docs/security.md ("Who the controllers are") shows changes every place and nothing else."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests import DEPLOY, _owner, pod, render, webhooks, webhooks_called

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")

Obj = dict[str, Any]
ALWAYS = {"kubernetes.io/metadata.name": "team-b", "autowrap.io/wrap": "Always"}
RENAMED = "system:serviceaccount:batch-system:vc-controller"
VOLCANO = "system:serviceaccount:volcano-system:volcano-controllers"


def _listed() -> list[str]:
    doc = yaml.safe_load((DEPLOY / "base" / "controller-identities.yaml").read_text())
    usernames = ast.literal_eval(doc["data"]["usernames"])
    assert isinstance(usernames, list) and all(isinstance(u, str) for u in usernames)
    return usernames


def _places(objs: tuple[Obj, ...] | list[Obj]) -> list[str]:
    """Every expression that reads the list: the *-always entries' two conditions, the
    policy's variable."""
    found = [
        condition["expression"]
        for _, hook in webhooks(objs)
        for condition in hook.get("matchConditions", [])
        if condition["name"]
        in ("not-from-its-controller", "appwrapper-label-only-from-its-controller")
    ]
    for obj in objs:
        if obj.get("kind") == "ValidatingAdmissionPolicy" and obj["metadata"]["name"] == (
            "autowrap-wrapped-pods"
        ):
            found += [
                v["expression"] for v in obj["spec"]["variables"] if v["name"] == "controllers"
            ]
    return found


def _list_in(expression: str) -> list[str]:
    literal = expression[: expression.index("]") + 1]
    return list(ast.literal_eval(literal))


def test_every_place_reads_the_one_list() -> None:
    objs = render("base")
    places = _places(objs)
    assert len(places) == 9, places  # 4 entries x 2 conditions, and the policy
    for expression in places:
        assert _list_in(expression) == _listed(), expression
    assert not [o for o in objs if o["metadata"]["name"] == "autowrap-controller-identities"], (
        "a kustomize-only object, never installed"
    )


def test_an_overlay_that_renames_a_controller_changes_every_place(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(DEPLOY / "overlays" / "self-managed", overlay)
    transformer = os.path.relpath(DEPLOY / "controller-identities", overlay)
    renamed = [RENAMED if u == VOLCANO else u for u in _listed()]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "patches": [{
            "target": {"kind": "ConfigMap", "name": "autowrap-controller-identities"},
            "patch": yaml.safe_dump([{"op": "replace", "path": "/data/usernames",
                                      "value": repr(renamed)}]),
        }],
        "transformers": [transformer],
    }))  # fmt: skip
    done = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]

    places = _places(objs)
    assert len(places) == 9
    for expression in places:
        assert _list_in(expression) == renamed, expression

    # The renamed controller's pods are left to it; the old name is now anyone's.
    volcano_pod = pod(owner=_owner("batch.volcano.sh/v1alpha1", "Job"))
    for user, sent in ((RENAMED, False), (VOLCANO, True)):
        called = webhooks_called(objs, resource="pods", obj=volcano_pod,
                                 namespace_labels=ALWAYS, user=user)  # fmt: skip
        assert bool([n for n in called if "-always." in n]) == sent, (user, called)
