"""The documentation holds together: every relative link and anchor in the README, docs/ and
examples/README.md leads somewhere, the README stays short enough to read in one sitting, and
the indexes list every page and every example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

README_MAX_LINES = 400

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples/README.md"]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, with inline code removed (links there are examples)."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, CODE_SPAN.sub("", line)))
    return lines


def anchors(text: str) -> set[str]:
    """The heading anchors GitHub generates: lower case, punctuation dropped, spaces to hyphens,
    a repeated one numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links() -> list[tuple[str, int, str]]:
    links = []
    for doc in documents():
        for number, line in prose_lines(doc):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                links.append((doc.relative_to(REPO).as_posix(), number, target))
    return links


@pytest.mark.parametrize(("doc", "line", "target"), relative_links())
def test_every_relative_link_resolves(doc: str, line: int, target: str) -> None:
    path, _, anchor = target.partition("#")
    source = REPO / doc
    destination = (source.parent / path).resolve() if path else source
    name = destination.relative_to(REPO).as_posix() if destination.is_relative_to(REPO) else path
    assert destination.exists(), f"{doc}:{line}: {target} points at a missing file"
    if anchor:
        assert destination.suffix == ".md", f"{doc}:{line}: {target}: an anchor outside Markdown"
        assert anchor in anchors(destination.read_text(encoding="utf-8")), (
            f"{doc}:{line}: {target}: no heading in {name} makes the anchor #{anchor}"
        )


def test_the_anchor_rules_match_githubs() -> None:
    text = "# A `code` title: it's here\n## Again\n## Again\n```\n# not a heading\n```\n"
    assert anchors(text) == {"a-code-title-its-here", "again", "again-1"}


def test_the_readme_fits_in_one_sitting() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move detail to docs/"
    )


def test_the_readme_keeps_the_commands_ci_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci.startswith("python3 -m venv .venv")
    assert ci in readme


def test_the_docs_index_lists_every_page() -> None:
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {target for _, line in prose_lines(REPO / "docs" / "README.md")
              for target in LINK.findall(line)}  # fmt: skip
    pages = {p.name for p in (REPO / "docs").glob("*.md") if p.name != "README.md"}
    missing = sorted(page for page in pages if page not in listed)
    assert index and not missing, f"docs/README.md does not list {missing}"


def test_the_examples_index_lists_every_example() -> None:
    examples = REPO / "examples"
    listed = {target for _, line in prose_lines(examples / "README.md")
              for target in LINK.findall(line)}  # fmt: skip
    files = {p.relative_to(examples).as_posix() for p in examples.rglob("*.yaml")}
    missing = sorted(files - listed)
    assert files and not missing, f"examples/README.md does not list {missing}"
