"""One document's outcome as people read it: a result, the findings with their paths, and why.

``autowrap check`` (text and JSON), ``explain`` and ``test`` all tell a document's story from
this one summary, so they can never disagree with each other or with the admission service
(the summary is built from ``engine.admit``'s outcome and its ``verdict``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.core import engine
from webhook.model import names, objects
from webhook.model.fields import Violation


class Result(StrEnum):
    WRAPPED = "wrapped"  # a wrap candidate, accepted
    COMPLETED = "completed"  # a submitted AppWrapper, accepted
    REJECTED = "rejected"  # refused: the create would fail
    UNCHANGED = "unchanged"  # left alone: not a candidate, or not covered by any policy


@dataclass(frozen=True)
class Finding:
    path: str
    message: str
    # A rejection that the policy's Audit enforcement turned into a warning.
    audit: bool = False

    def render(self) -> str:
        return f"{'(audit) ' if self.audit else ''}{self.path}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        value: dict[str, Any] = {"path": self.path, "message": self.message}
        if self.audit:
            value["audit"] = True
        return value


@dataclass(frozen=True)
class Summary:
    result: Result
    violations: tuple[Finding, ...]
    warnings: tuple[Finding, ...]
    policy: str | None  # the policy that applied, None where no policy covers the namespace
    policy_reason: str  # why that policy (or that none covers the namespace)
    reason: str  # the result and why, in a sentence that starts with the result
    appwrapper: str | None  # namespace/name of the AppWrapper, for a wrapped or completed one

    def as_json(self) -> dict[str, Any]:
        return {
            "result": self.result.value,
            "policy": self.policy,
            "appwrapper": self.appwrapper,
            "reason": self.reason,
            "violations": [f.as_json() for f in self.violations],
            "warnings": [f.as_json() for f in self.warnings],
        }


def errors(count: int) -> str:
    """``1 error``, ``2 errors``: how a count of findings is said to users."""
    return f"{count} error" if count == 1 else f"{count} errors"


def _finding(violation: Violation, *, audit: bool = False) -> Finding:
    return Finding(str(violation.path), violation.detail, audit)


def summarize(outcome: engine.Outcome) -> Summary:
    verdict = outcome.verdict()
    # As ``verdict``: what has no result (refused before admission, too large to build) is
    # refused whatever the enforcement.
    audited = outcome.audit and bool(outcome.errors) and outcome.result is not None
    violations = () if audited else tuple(_finding(v) for v in outcome.errors)
    warnings = tuple(_finding(v, audit=True) for v in outcome.errors) if audited else ()
    warnings += tuple(_finding(v) for v in outcome.warnings)
    match = outcome.match
    policy_reason = match.reason if match else outcome.reason
    appwrapper = _appwrapper_name(outcome.result)
    if verdict.denied and outcome.result is None and outcome.reason:
        # Refused before admission (kubectl, the API server): why autowrap said nothing more.
        result, appwrapper = Result.REJECTED, None
        reason = f"rejected: {errors(len(violations))}; {outcome.reason}"
    elif verdict.denied:
        result, appwrapper = Result.REJECTED, None
        them = "it is" if len(violations) == 1 else "they are"
        reason = f"rejected: {errors(len(violations))}; nothing is created until {them} fixed"
    elif outcome.action is engine.Action.WRAP:
        result = Result.WRAPPED
        reason = f"wrapped into AppWrapper {appwrapper}" if appwrapper else "wrapped"
    elif outcome.action is engine.Action.COMPLETE:
        result = Result.COMPLETED
        reason = "completed: a valid AppWrapper, with the policy's defaults and the plumbing added"
    else:
        result, appwrapper = Result.UNCHANGED, None
        reason = f"unchanged: {outcome.reason}" if outcome.reason else "unchanged"
    if audited and match is not None:
        reason += (
            f" ({errors(len(outcome.errors))} reported as warnings: policy "
            f"{match.named_for('enforcement')!r} only audits)"
        )
    return Summary(
        result=result,
        violations=violations,
        warnings=warnings,
        policy=match.policy.name if match else None,
        policy_reason=policy_reason,
        reason=reason,
        appwrapper=appwrapper,
    )


def _appwrapper_name(result: object) -> str | None:
    """``namespace/name`` of the AppWrapper a result is, or (adopt mode) the one its pod
    templates name."""
    if not isinstance(result, dict):
        return None
    namespace = objects.as_map(result.get("metadata")).get("namespace")
    prefix = f"{namespace}/" if namespace else ""
    if (
        result.get("kind") == "AppWrapper"
        and result.get("apiVersion") == names.APPWRAPPER_API_VERSION
    ):
        return f"{prefix}{objects.name_of(result)}" if objects.name_of(result) else None
    name = objects.labels_of(result).get(names.APPWRAPPER_LABEL)
    return f"{prefix}{name}" if name else None
