"""What each doctor check says, and the report made of it: a level, the check's name, what was
found and the fix (with the one command that applies it, where one does). The text and
``-o json`` outputs of ``autowrap doctor`` are both rendered here, from the same findings."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
LEVELS = (OK, WARN, FAIL)


@dataclass(frozen=True)
class Finding:
    section: str  # prerequisites, autowrap, policies, smoke
    check: str
    level: str
    found: str
    fix: str = ""
    # One command that applies the fix, where one does (``kubectl ...`` as argv).
    command: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"section": self.section, "check": self.check,
                               "level": self.level, "found": self.found}  # fmt: skip
        if self.fix:
            out["fix"] = self.fix
        if self.command:
            out["command"] = list(self.command)
        return out


def worst(findings: Iterable[Finding]) -> str:
    levels = {f.level for f in findings}
    return FAIL if FAIL in levels else WARN if WARN in levels else OK


def render(findings: Sequence[Finding]) -> str:
    """One line per finding, its fix (and command) indented below."""
    lines = []
    section = ""
    for f in findings:
        if f.section != section:
            section = f.section
            lines.append(f"{section}:")
        lines.append(f"  {f.level:<4}  {f.check}: {f.found}")
        if f.fix and f.level != OK:
            lines.append(f"        fix: {f.fix}")
        if f.command and f.level != OK:
            lines.append(f"        run: {' '.join(f.command)}")
    counts = {level: sum(1 for f in findings if f.level == level) for level in LEVELS}
    lines.append(", ".join(f"{n} {level}" for level, n in counts.items()))
    return "\n".join(lines) + "\n"


def report(findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "result": worst(findings),
        "counts": {level: sum(1 for f in findings if f.level == level) for level in LEVELS},
        "findings": [f.as_json() for f in findings],
    }
