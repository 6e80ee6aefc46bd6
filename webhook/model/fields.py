"""Field paths and violations: how autowrap says *where* something is wrong.

Paths are values, built with ``child``/``index``/``key`` and rendered to the familiar
``spec.tasks[1].replicas`` form only at the edge (the admission response, the CLI's stderr).
Violations are data, never exceptions: every rule returns all it finds, and the caller decides
(per the policy's enforcement) whether they deny or only warn.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from enum import StrEnum

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class FieldPath:
    """A path into an object: a tuple of map keys (str) and list indexes (int)."""

    parts: tuple[str | int, ...] = ()

    def child(self, *names: str) -> FieldPath:
        return FieldPath(self.parts + names)

    def index(self, i: int) -> FieldPath:
        return FieldPath((*self.parts, i))

    def key(self, k: str) -> FieldPath:
        """A map key that may contain dots or slashes (labels, annotations)."""
        return FieldPath((*self.parts, _MapKey(k)))

    def join(self, other: FieldPath) -> FieldPath:
        return FieldPath(self.parts + other.parts)

    def __str__(self) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, (_MapKey, int)):
                out.append(f"[{part}]")
            elif _PLAIN_KEY.match(part):
                out.append(f".{part}" if out else part)
            else:
                out.append(f"[{part}]")
        return "".join(out) or "<root>"

    def pointer(self) -> str:
        """The RFC 6901 JSON pointer of this path (``~1`` for ``/``, ``~0`` for ``~``)."""
        return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in self.parts)


class _MapKey(str):
    """A map key rendered in brackets, like ``metadata.labels[kueue.x-k8s.io/queue-name]``."""

    __slots__ = ()


ROOT = FieldPath()
METADATA = ROOT.child("metadata")
LABELS = METADATA.child("labels")
ANNOTATIONS = METADATA.child("annotations")
SPEC = ROOT.child("spec")


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Violation:
    """One finding: where, what is wrong and how to fix it (``detail`` says both)."""

    path: FieldPath
    detail: str
    severity: Severity = Severity.ERROR
    # The rule family that found it (``rule_family``): a metric label and an audit record's
    # "rule", never compared (two findings are the same finding whoever reports them).
    rule: str = field(default="", compare=False)

    def render(self) -> str:
        return f"{self.path}: {self.detail}"

    def under(self, prefix: FieldPath) -> Violation:
        """The same finding, seen from an enclosing object (e.g. inside an AppWrapper)."""
        return Violation(prefix.join(self.path), self.detail, self.severity, self.rule)

    def as_warning(self) -> Violation:
        return Violation(self.path, self.detail, Severity.WARNING, self.rule)


# Modules whose findings go by another family name than their own module name.
_FAMILIES = {
    "webhook.core.engine": "appwrapper",
    "webhook.core.kinds.volcano_rules": "volcano",
    "webhook.core.kinds.volcano_job": "volcano",
    "webhook.model.podschema": "pod-schema",
    "webhook.core.plumbing.pods": "plumbing",
}


def rule_family(module: str) -> str:
    """The stable rule family of findings made in ``module``: the rule module's name
    (``webhook.core.rules.pod_templates`` -> ``pod-templates``), a kind's rules by the kind
    (``volcano``), the AppWrapper's own checks ``appwrapper``. A bounded set: one per module."""
    return _FAMILIES.get(module) or module.rpartition(".")[2].replace("_", "-")


def _caller_family() -> str:
    # Two frames up: the rule module that called error() or warning().
    return rule_family(str(sys._getframe(2).f_globals.get("__name__", "")))


def error(path: FieldPath, detail: str) -> Violation:
    return Violation(path, detail, Severity.ERROR, _caller_family())


def warning(path: FieldPath, detail: str) -> Violation:
    return Violation(path, detail, Severity.WARNING, _caller_family())
