"""The CLI without a checkout: a wheel built from the repository carries the policy set deploy/
installs, and the command installed from it judges with that set."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot build a wheel here (pip fetches setuptools to build): {done.stderr}")
    (built,) = out.glob("autowrap-*.whl")
    return built


def test_the_wheel_carries_the_policy_set_deploy_installs(wheel: Path) -> None:
    installed = sorted((REPO / "deploy" / "base" / "policies").glob("*.yaml"))
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n: archive.read(n).decode() for n in archive.namelist()
                   if n.startswith("webhook/shell/policies/")}  # fmt: skip
    assert shipped == {f"webhook/shell/policies/{p.name}": p.read_text() for p in installed}


def test_the_installed_command_judges_with_it_outside_a_checkout(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
                    str(target), str(wheel)], check=True, timeout=300)  # fmt: skip
    job = tmp_path / "job.yaml"
    job.write_text((REPO / "examples" / "master-worker.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("AUTOWRAP_POLICY", None)
    done = subprocess.run([sys.executable, "-m", "webhook", "explain", "-n", "ml"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(
        "note: no --policy given: using the policy set autowrap installs by default (default)"
    )
    assert "default.yaml (shipped with autowrap)" in done.stdout
    assert str(target) in subprocess.run(
        [sys.executable, "-c", "import webhook; print(webhook.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
