"""deploy/release/: one `kubectl apply -f` ready manifest per kustomize variant, never stale."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed import prerequisites
from tools import render_release


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    prerequisites.kubectl()  # skipped without it, failed in CI


REGENERATE = "regenerate with: python -m tools.render_release"


def test_every_variant_has_a_release_file_and_nothing_else() -> None:
    expected = {render_release.release_path(v).name for v in render_release.VARIANTS}
    present = {p.name for p in render_release.RELEASE.iterdir()}
    assert present == expected, REGENERATE


@pytest.mark.parametrize("variant", sorted(render_release.VARIANTS))
def test_release_file_is_byte_identical_to_kustomize(variant: str) -> None:
    path = render_release.release_path(variant)
    assert path.exists(), f"{path} missing; {REGENERATE}"
    assert path.read_bytes() == render_release.render(variant).encode("utf-8"), (
        f"{path.name} differs from `kubectl kustomize deploy/"
        f"{render_release.VARIANTS[variant]}`; {REGENERATE}"
    )


@pytest.mark.parametrize("variant", sorted(render_release.VARIANTS))
def test_release_file_is_applyable(variant: str) -> None:
    docs = [d for d in yaml.safe_load_all(render_release.release_path(variant).read_text()) if d]
    kinds = [d["kind"] for d in docs]
    # `kubectl apply -f` needs the Namespace before the namespaced objects; kustomize orders it
    # first.
    assert kinds[0] == "Namespace"
    assert "Deployment" in kinds
    assert all("apiVersion" in d and "metadata" in d for d in docs)


def test_check_mode_passes_on_the_checked_in_files() -> None:
    assert render_release.main(["--check"]) == 0


def test_check_mode_reports_a_stale_file_and_write_mode_fixes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(render_release, "RELEASE", tmp_path)
    for variant in render_release.VARIANTS:
        render_release.release_path(variant).write_bytes(b"stale\n")
    assert render_release.main(["--check"]) == 1
    assert "stale: autowrap-base.yaml" in capsys.readouterr().out
    assert render_release.main([]) == 0
    assert render_release.main(["--check"]) == 0


@pytest.mark.parametrize("variant", sorted(render_release.VARIANTS))
def test_every_object_carries_the_label_uninstall_finds_the_install_by(variant: str) -> None:
    """`autowrap uninstall` (and `kubectl apply --prune`) selects the install by
    app.kubernetes.io/part-of: an overlay's own objects carry it as the base's do."""
    docs = [d for d in yaml.safe_load_all(render_release.release_path(variant).read_text()) if d]
    unlabelled = [
        f"{d['kind']} {d['metadata']['name']}"
        for d in docs
        if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of") != "autowrap"
    ]
    assert unlabelled == []
