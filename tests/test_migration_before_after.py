"""docs/migration.md shows each example's "before" (examples/migration/before/, what ran under
Volcano's pytorch plugin or Kubeflow's training operator) beside its "after", as a diff of the
two files; the diffs on the page are the files' own, and what check says of each holds."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

from webhook.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "migration.md"
MIGRATION = REPO / "examples" / "migration"
BEFORE = MIGRATION / "before"
SECTION = "## Before and after"
UPDATE = os.environ.get("AUTOWRAP_UPDATE_MIGRATION") == "1"


def _body(path: Path) -> list[str]:
    """The manifest without its leading comment block."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return lines


def diff(name: str) -> str:
    before, after = BEFORE / f"{name}.yaml", MIGRATION / f"{name}.yaml"
    return "".join(
        difflib.unified_diff(
            _body(before), _body(after), f"before/{name}.yaml", f"{name}.yaml", n=3
        )
    )


PAIRS = sorted(p.stem for p in BEFORE.glob("*.yaml"))


def section() -> str:
    """The page's section, as the files make it."""
    out = [
        f"{SECTION}\n\n",
        "Each example's manifest as it ran before (`examples/migration/before/`) beside the one\n",
        "autowrap runs, as a diff (`-` before, `+` after; the comments at the top of each file say\n",
        "why each line changes). `autowrap check` of a *before* leaves it unchanged: it asks for no\n",
        "wrapping, and a PyTorchJob is not a kind autowrap wraps. Arena's *before* is a command,\n",
        "given at the top of [arena-appwrapperjob.yaml](../examples/migration/arena-appwrapperjob.yaml).\n",
    ]
    for name in PAIRS:
        out.append(f"\n[{name}.yaml](../examples/migration/{name}.yaml):\n\n```diff\n")
        out.append(diff(name))
        out.append("```\n")
    return "".join(out)


def test_every_example_from_elsewhere_has_its_before():
    froms = {p.stem for p in MIGRATION.glob("*.yaml")} - {"arena-appwrapperjob"}
    assert set(PAIRS) == froms


def test_the_page_shows_each_before_beside_its_after():
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(SECTION)
    rest = page[start + len(SECTION) :]
    following = re.search(r"^## ", rest, flags=re.M)
    end = start + len(SECTION) + (following.start() if following else len(rest))
    wanted = section()
    if UPDATE:
        PAGE.write_text(page[:start] + wanted + ("\n" if following else "") + page[end:])
        return
    assert page[start:end].rstrip("\n") == wanted.rstrip("\n"), (
        "regenerate with AUTOWRAP_UPDATE_MIGRATION=1 pytest tests/test_migration_before_after.py"
    )


@pytest.mark.parametrize("name", PAIRS)
def test_a_before_is_left_alone_and_its_after_is_wrapped_without_errors(name, capsys):
    policy = str(REPO / "deploy" / "base" / "policies")
    capsys.readouterr()
    assert cli.main(["check", str(BEFORE / f"{name}.yaml"), "--policy", policy]) == 0
    assert "left unchanged" in capsys.readouterr().out
    assert cli.main(["check", str(MIGRATION / f"{name}.yaml"), "--policy", policy]) == 0
    out = capsys.readouterr()
    assert "would be wrapped" in out.out and "error" not in out.err
