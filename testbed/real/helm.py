"""Just enough of Helm's template language to read Volcano's chart for its RBAC and webhooks.

Those parts of the chart use ``.Release.Name``/``.Release.Namespace`` and ``if`` blocks on
plain values (``.Values.a.b``, ``... | regexMatch "x"``, ``not``, ``or``/``and`` of values); the Deployments around them
use much more (``$vars``, ``toYaml``, ``.Files``), which nobody here needs. So a condition this
module cannot evaluate, or an expression it cannot substitute, makes its document *unknown*:
dropped, and an error only when it is one of the kinds asked for. Nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
CONTROL = re.compile(r"^\s*\{\{-?\s*(if|else if|else|end|range|with)\b(.*?)-?\}\}\s*$")
ASSIGNMENT = re.compile(r"^\s*\{\{-?\s*\$\w+\s*:=.*\}\}\s*$")
VALUE = re.compile(r"^\.Values((?:\.\w+)+)$")
REGEX_MATCH = re.compile(r'^\.Values((?:\.\w+)+)\s*\|\s*regexMatch\s+"([^"]*)"$')


class Unknown(Exception):
    """A condition outside what this module evaluates."""


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.strip(".").split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def evaluate(condition: str, values: Mapping[str, Any]) -> bool:
    text = condition.strip()
    if text.startswith("not "):
        return not evaluate(text[4:], values)
    words = text.split()
    if len(words) > 2 and words[0] in ("or", "and") and all(VALUE.match(w) for w in words[1:]):
        results = [evaluate(w, values) for w in words[1:]]
        return any(results) if words[0] == "or" else all(results)
    if match := VALUE.match(text):
        return bool(_lookup(values, match.group(1)))
    if match := REGEX_MATCH.match(text):
        return re.search(match.group(2), str(_lookup(values, match.group(1)) or "")) is not None
    raise Unknown(text)


def render(text: str, values: Mapping[str, Any], release: str, namespace: str) -> list[Obj | None]:
    """The template's documents: each a dict, or None where the document is unknown."""
    documents: list[list[str]] = [[]]
    unknown: list[bool] = [False]
    # One frame per open block: (this branch emits, a branch was taken, the block is unknown).
    stack: list[tuple[bool, bool, bool]] = []

    def emitting() -> bool:
        return all(frame[0] for frame in stack)

    def branch(condition: str) -> tuple[bool, bool, bool]:
        try:
            taken = evaluate(condition, values)
        except Unknown:
            if emitting():
                unknown[-1] = True
            return (False, True, True)
        return (taken, taken, False)

    for line in text.splitlines():
        if ASSIGNMENT.match(line):
            continue
        control = CONTROL.match(line)
        if control is None:
            if not emitting():
                continue
            if line.strip() == "---":
                documents.append([])
                unknown.append(False)
                continue
            line = line.replace("{{ .Release.Name }}", release)
            line = line.replace("{{ .Release.Namespace }}", namespace)
            if "{{" in line:
                unknown[-1] = True
            documents[-1].append(line)
            continue
        word, rest = control.group(1), control.group(2)
        if word == "if":
            stack.append(branch(rest))
        elif word in ("range", "with"):
            stack.append(branch(f"{word} {rest}"))
        elif word == "end":
            stack.pop()
        else:
            _, taken, block_unknown = stack.pop()
            if block_unknown or taken:
                stack.append((False, True, block_unknown))
            elif word == "else":
                stack.append((True, True, False))
            else:
                stack.append(branch(rest))
    out: list[Obj | None] = []
    for lines, dropped in zip(documents, unknown, strict=True):
        if dropped:
            out.append(None)
            continue
        loaded = yaml.safe_load("\n".join(lines))
        if loaded:
            out.append(loaded)
    return out


def chart_objects(
    chart: Path,
    templates: Iterable[str],
    kinds: Iterable[str],
    *,
    release: str,
    namespace: str,
) -> list[Obj]:
    """The objects of ``kinds`` that ``templates`` of ``chart`` render with its default values.
    Raises when a template holds a document this module cannot render that may be one of them
    (its text names one of ``kinds``)."""
    wanted = set(kinds)
    values = yaml.safe_load((chart / "values.yaml").read_text()) or {}
    out: list[Obj] = []
    for template in templates:
        text = (chart / "templates" / template).read_text()
        rendered = render(text, values, release, namespace)
        for obj in rendered:
            if obj is not None and obj.get("kind") in wanted:
                out.append(obj)
        unknown = sum(1 for obj in rendered if obj is None)
        known_kinds = [o.get("kind") for o in rendered if o is not None]
        text_kinds = re.findall(r"^kind:\s*(\w+)", text, flags=re.M)
        missed = [k for k in text_kinds if k in wanted]
        for kind in known_kinds:
            if kind in missed:
                missed.remove(kind)
        if unknown and missed:
            raise ValueError(f"{chart.name}/templates/{template}: cannot render the "
                             f"document(s) holding {', '.join(missed)}")  # fmt: skip
    return out
