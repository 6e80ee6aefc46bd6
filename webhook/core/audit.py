"""Audit leaves a record: the findings an Audit-enforcement policy let through, as data.

``verdict()`` turns them into ``(audit)`` warnings for the submitter; the same findings are also
counted (``autowrap_policy_findings_total{policy,rule,enforcement}``), logged on the request
line, written on the AppWrapper (``autowrap.io/audit-findings``) and raised as an Event on the
object by the controller when it adopts it. Each names the policy, the rule family
(``fields.rule_family``), the field and the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.core import engine
from webhook.model import names, objects

# An annotation stays well below the 256 KiB of all annotations together.
MAX_RECORDED = 20
MAX_MESSAGE = 300


@dataclass(frozen=True)
class Finding:
    policy: str
    rule: str
    enforcement: str
    field: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"policy": self.policy, "rule": self.rule, "field": self.field,
                "message": self.message}  # fmt: skip

    def render(self) -> str:
        return (
            f"policy {self.policy} ({self.enforcement}), rule {self.rule}, "
            f"field {self.field}: {self.message}"
        )


def findings(outcome: engine.Outcome) -> list[Finding]:
    """The policy findings of ``outcome`` that its enforcement acts on (error severity: denied
    under Enforce, let through as ``(audit)`` warnings under Audit)."""
    if outcome.match is None:
        return []
    policy = outcome.match.policy
    enforcement = str(policy.spec.enforcement)
    return [
        Finding(policy.name, v.rule or "other", enforcement, str(v.path), v.detail)
        for v in outcome.errors
    ]


def audited(outcome: engine.Outcome) -> list[Finding]:
    """The findings that Audit enforcement let through (none under Enforce)."""
    return findings(outcome) if outcome.audit else []


def annotation(found: list[Finding]) -> str:
    """The ``autowrap.io/audit-findings`` value: a JSON list of policy, rule, field, message."""
    records = [{**f.as_json(), "message": f.message[:MAX_MESSAGE]} for f in found[:MAX_RECORDED]]
    return orjson.dumps(records).decode()


def annotate(appwrapper: dict[str, Any], found: list[Finding]) -> None:
    """Write ``found`` on the AppWrapper (nothing when there are none)."""
    if found:
        metadata = objects.own_map(appwrapper, "metadata")
        objects.own_map(metadata, "annotations")[names.AUDIT_FINDINGS_ANNOTATION] = annotation(
            found
        )


def recorded(appwrapper: Mapping[str, Any]) -> list[Finding]:
    """The findings an AppWrapper was created with, read back from its annotation."""
    raw = objects.annotations_of(appwrapper).get(names.AUDIT_FINDINGS_ANNOTATION)
    if not raw:
        return []
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    return [
        Finding(
            str(d.get("policy", "")),
            str(d.get("rule", "")),
            "Audit",
            str(d.get("field", "")),
            str(d.get("message", "")),
        )  # fmt: skip
        for d in (data if isinstance(data, list) else [])
        if isinstance(d, dict)
    ]
