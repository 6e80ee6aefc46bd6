"""The changelog and the upgrade notes stay in step with the code: the newest release is the
version the package reports, every autowrap.io/ name is in the stability table, and the install
guide's upgrade section points to both."""

from __future__ import annotations

import re
from pathlib import Path

from webhook import __version__
from webhook.model import names

REPO = Path(__file__).resolve().parents[1]


def test_the_changelog_starts_at_the_running_version() -> None:
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert releases[0] == __version__
    assert "0.1.0" in releases


def test_every_autowrap_name_has_a_stability_promise() -> None:
    notes = (REPO / "docs" / "upgrading.md").read_text()
    shared = {
        value
        for key, value in vars(names).items()
        if key.isupper() and isinstance(value, str) and value.startswith(names.PREFIX)
        and value != names.PREFIX
    }  # fmt: skip
    assert shared
    missing = sorted(n for n in shared if f"`{n}`" not in notes)
    assert not missing, f"docs/upgrading.md, Stability, does not list {missing}"


def test_the_readme_points_to_the_upgrade_notes_and_the_changelog() -> None:
    readme = (REPO / "README.md").read_text()
    install = readme[readme.index("## Install") :]
    install = install[: install.index("\n## ", 1)]
    assert "docs/upgrading.md" in install and "CHANGELOG.md" in install


def test_the_install_guide_points_to_the_upgrade_notes_and_the_changelog() -> None:
    guide = (REPO / "docs" / "install.md").read_text()
    upgrade = guide[guide.index("\n## Upgrade") :]
    upgrade = upgrade[: upgrade.index("\n## ", 1)]
    assert "upgrading.md" in upgrade and "CHANGELOG.md" in upgrade
    # Both ways of installing have their upgrade: a checkout (kustomize) and a release file.
    assert "kubectl apply -k" in upgrade and "deploy/release/autowrap-" in upgrade
