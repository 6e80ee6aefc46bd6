"""YAML as autowrap reads it: libyaml's loader where present, and errors on one line.

``CSafeLoader`` builds the same values as ``SafeLoader`` (the constructor is shared; only the
scanner and parser are C), in about a tenth of the time on large manifests. Pure: text in,
values or a message out.
"""

from __future__ import annotations

import yaml

STDIN = "-"

# libyaml's loader where PyYAML has it; it constructs the same values as SafeLoader.
LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_error(source: str, exc: yaml.YAMLError, text: str | None = None) -> str:
    """One line: ``FILE:LINE:COLUMN: not valid YAML: what the parser found``; given the
    ``text``, a tab where the parser stopped is named (libyaml says only "found character
    that cannot start any token", and a tab in the indentation is nearly always why)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"{source}: not valid YAML: {' '.join(str(exc).split())}"
    mark = exc.problem_mark
    where = "stdin" if source == STDIN else source
    what = exc.problem or "a syntax error"
    if exc.context:
        what = f"{what} ({exc.context}"
        if exc.context_mark is not None and exc.context_mark.line != mark.line:
            what += f" started on line {exc.context_mark.line + 1}"
        what += ")"
    what += _tab_at(text, mark.line, mark.column)
    return f"{where}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {what}"


def _tab_at(text: str | None, line: int, column: int) -> str:
    lines = (text or "").splitlines()
    if line >= len(lines) or "\t" not in lines[line][: column + 1]:
        return ""
    return (
        f"; line {line + 1} has a tab at column {lines[line].index(chr(9)) + 1}: YAML indents "
        "with spaces only, so replace the tab with spaces"
    )


def shown(value: object) -> str:
    """A value as a YAML author wrote it: strings quoted, true/false/null, lists and mappings
    in YAML's flow style, cut short when long."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return str(value)
    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    except yaml.YAMLError:
        text = "a value of another kind"
    return text if len(text) <= 80 else text[:77] + "..."
