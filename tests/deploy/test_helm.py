"""deploy/helm/autowrap: the Helm chart installs the objects of the kustomize release.

The chart is generated from deploy/ (python -m tools.render_chart) and committed; here the
pinned helm (built from its Go module) lints it, renders it for a set of values, and each
rendering is compared with kustomize's for the same settings (deploy/ with an overlay of the
user's own, as docs/install.md lays it out). Two differences are the chart's by design, and
asserted as such: the Namespace is in the release only with namespace.create, and the
ClusterRole and binding that `autowrap uninstall` leaves for the AppWrapper controller are
marked for `helm uninstall` to leave as well.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import prerequisites
from tools import render_chart, render_release
from tools.render_chart import Settings
from webhook.shell.uninstall import KEPT_CLUSTER_ROLES

Obj = dict[str, Any]
CHART = render_chart.CHART
REPO = render_release.REPO
KUBE_VERSION = "v1.30.0"
OTHER = "platform-webhooks"
DIGEST = "sha256:" + "0123456789abcdef" * 4
RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"},
             "limits": {"cpu": "2", "memory": "1Gi"}}  # fmt: skip
RENAMED = "system:serviceaccount:batch-system:vc-controller"
REGENERATE = "after a change under deploy/, regenerate the chart: python -m tools.render_chart"


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    prerequisites.kubectl()  # skipped without it, failed in CI


@pytest.fixture(scope="module")
def helm() -> Path:
    return prerequisites.helm()


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=REPO)  # fmt: skip


def template(helm: Path, *args: str, namespace: str = "autowrap-system") -> list[Obj]:
    done = run_helm(helm, "template", "autowrap", str(CHART), "--namespace", namespace,
                    "--kube-version", KUBE_VERSION, *args)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def refusal(helm: Path, *args: str, namespace: str = "autowrap-system") -> str:
    done = run_helm(helm, "template", "autowrap", str(CHART), "--namespace", namespace,
                    "--kube-version", KUBE_VERSION, *args)  # fmt: skip
    assert done.returncode != 0, "helm rendered what it should have refused"
    return done.stderr


def key(obj: Obj) -> tuple[str, str]:
    return (obj["kind"], obj["metadata"]["name"])


def as_the_chart_installs(
    objs: list[Obj], *, namespace_created: bool
) -> dict[tuple[str, str], Obj]:
    """The kustomize objects with the chart's two deliberate differences."""
    out = {}
    for obj in objs:
        if obj["kind"] == "Namespace" and not namespace_created:
            continue
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding") and (
            obj["metadata"]["name"] in KEPT_CLUSTER_ROLES
        ):
            obj["metadata"].setdefault("annotations", {})["helm.sh/resource-policy"] = "keep"
        out[key(obj)] = obj
    return out


def policy(name: str) -> str:
    return (REPO / "policies" / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Case:
    """Settings as kustomize installs them, and the helm arguments that choose the same."""

    settings: Settings
    args: tuple[str, ...] = ()
    values: Obj = field(default_factory=dict)  # written to a values file, passed with -f
    release_namespace: str = "autowrap-system"
    namespace_created: bool = False


CASES: dict[str, Case] = {
    "defaults": Case(Settings()),
    "another namespace, the release's": Case(Settings(namespace=OTHER), release_namespace=OTHER),
    "another namespace, namespace.name, created": Case(
        Settings(namespace=OTHER),
        ("--set", f"namespace.name={OTHER}", "--set", "namespace.create=true"),
        release_namespace="default",
        namespace_created=True,
    ),
    "cert-manager": Case(
        Settings(certificates="cert-manager"), ("--set", "certificates.mode=cert-manager")
    ),  # fmt: skip
    "cert-manager in another namespace": Case(
        Settings(namespace=OTHER, certificates="cert-manager"),
        ("--set", "certificates.mode=cert-manager"),
        release_namespace=OTHER,
    ),
    "a certificate provided": Case(
        Settings(certificates="provided"), ("--set", "certificates.mode=provided")
    ),  # fmt: skip
    "replicas": Case(Settings(replicas=3), ("--set", "replicas=3")),
    "image by digest, resources, control-plane CIDR (a values file)": Case(
        Settings(
            image=f"registry.example.com:5000/platform/autowrap@{DIGEST}",
            resources=RESOURCES,
            control_plane_cidr="10.0.0.0/24",
        ),
        values={
            "image": {
                "repository": "registry.example.com:5000/platform/autowrap",
                "digest": DIGEST,
            },
            "resources": RESOURCES,
            "networkPolicy": {"controlPlaneCIDR": "10.0.0.0/24"},
        },
    ),  # fmt: skip
    "image tag": Case(
        Settings(image="registry.example.com/autowrap:0.5.0-rc1"),
        ("--set", "image.repository=registry.example.com/autowrap", "--set", "image.tag=0.5.0-rc1"),
    ),  # fmt: skip
    "controller identities": Case(
        Settings(controller_identities=(RENAMED, "system:kube-controller-manager")),
        (
            "--set-json",
            "controllerIdentities=" + json.dumps([RENAMED, "system:kube-controller-manager"]),
        ),
    ),  # fmt: skip
    "without component create, with owner-references enforcement, cert-manager": Case(
        Settings(
            component_create=False, owner_references_enforcement=True, certificates="cert-manager"
        ),
        (
            "--set",
            "rbac.componentCreate=false",
            "--set",
            "rbac.ownerReferencesEnforcement=true",
            "--set",
            "certificates.mode=cert-manager",
        ),
    ),  # fmt: skip
    "policies from files (--set-file)": Case(
        Settings(
            policies={"default.yaml": policy("default.yaml"), "team-a.yaml": policy("team-a.yaml")}
        ),
        (
            "--set-file",
            "policies.default\\.yaml=policies/default.yaml",
            "--set-file",
            "policies.team-a\\.yaml=policies/team-a.yaml",
        ),
    ),  # fmt: skip
    "policies inline, in another namespace": Case(
        Settings(namespace=OTHER, policies={"audit.yaml": policy("research-audit.yaml")}),
        values={"policies": {"audit.yaml": policy("research-audit.yaml")}},
        release_namespace=OTHER,
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_helm_renders_the_objects_kustomize_renders(helm: Path, case: Case, tmp_path: Path) -> None:
    args = list(case.args)
    if case.values:
        values = tmp_path / "values.yaml"
        values.write_text(yaml.safe_dump(case.values))
        args += ["--values", str(values)]
    rendered = {key(o): o for o in template(helm, *args, namespace=case.release_namespace)}
    expected = as_the_chart_installs(render_chart.kustomize_objects(case.settings),
                                     namespace_created=case.namespace_created)  # fmt: skip

    assert sorted(rendered) == sorted(expected), REGENERATE
    for name, obj in expected.items():
        assert rendered[name] == obj, f"{name}; {REGENERATE}"


def test_the_committed_chart_is_the_rendering_of_deploy() -> None:
    files = render_chart.chart_files()
    for path, text in files.items():
        committed = CHART / path
        assert committed.is_file(), f"{path} missing; run python -m tools.render_chart"
        assert committed.read_text(encoding="utf-8") == text, (
            f"{path} differs from the rendering of deploy/; run python -m tools.render_chart"
        )
    assert render_chart.generated_paths() == set(files), "files the tool does not render"


def test_check_mode_reports_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(render_chart, "CHART", tmp_path / "autowrap")
    assert render_chart.main([]) == 0
    assert render_chart.main(["--check"]) == 0
    (tmp_path / "autowrap" / "templates" / "deployment.yaml").write_text("stale\n")
    (tmp_path / "autowrap" / "templates" / "extra.yaml").write_text("{}\n")
    assert render_chart.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "stale: templates/deployment.yaml" in out
    assert "not generated: templates/extra.yaml" in out


def test_the_chart_version_is_the_project_version_and_the_image_the_base_image() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["version"] == project
    deployment = next(o for o in render_chart.kustomize_objects(Settings())
                      if o["kind"] == "Deployment")  # fmt: skip
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/autowrap/autowrap:{chart['appVersion']}"


def test_the_chart_installs_no_crds() -> None:
    assert not (CHART / "crds").exists()
    assert "CustomResourceDefinition" not in "".join(
        p.read_text() for p in (CHART / "templates").iterdir()
    )


@pytest.mark.parametrize("mode", sorted(render_chart.CERTIFICATE_MODES))
def test_helm_lint_passes_strictly(helm: Path, mode: str) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION,
                    "--set", f"certificates.mode={mode}")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--set", "image.tagg=0.5.0"), "at '/image': additional properties 'tagg' not allowed"),
        (("--set", "replica=3"), "additional properties 'replica' not allowed"),
        (("--set", "networkPolicy.controlPlaneCidr=10.0.0.0/8"),
         "at '/networkPolicy': additional properties 'controlPlaneCidr' not allowed"),
        (("--set", "certificates.mode=certmanager"), "at '/certificates/mode': value must be one of"),
        (("--set-string", "replicas=3"), "at '/replicas': got string, want integer"),
        (("--set", "replicas=0"), "at '/replicas'"),
        (("--set", "namespace.name=Platform"), "at '/namespace/name'"),
        (("--set", "controllerIdentities[0]=it's"), "at '/controllerIdentities/0'"),
        (("--set", "policies.team-a\\.json=x"), "at '/policies'"),
        (("--set", "image.tag=0.5.0:latest"), "at '/image/tag'"),
        (("--set", "resources.requests.cpu=lots"), "at '/resources/requests/cpu'"),
    ],
)  # fmt: skip
def test_a_mistyped_value_is_refused_with_its_path(
    helm: Path, args: tuple[str, ...], said: str
) -> None:
    assert said in refusal(helm, *args)


def test_the_chart_cannot_create_its_own_release_namespace(helm: Path) -> None:
    said = refusal(helm, "--set", "namespace.create=true")
    assert "namespace.create" in said and "--create-namespace" in said


def test_the_readme_names_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def paths(node: Any, prefix: str) -> list[str]:
        if isinstance(node, dict) and node and prefix not in ("resources", "policies"):
            return [p for k, v in node.items() for p in paths(v, f"{prefix}.{k}".lstrip("."))]
        return [prefix]

    for path in paths(values, ""):
        assert f"`{path}`" in readme, path
