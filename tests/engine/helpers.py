"""Shared steps of the engine tests: render a candidate and insist that it was wrapped cleanly."""

from __future__ import annotations

from typing import Any

from tests.builders import PolicyBuilder, _Builder, context
from webhook.core import engine


def outcome_of(
    obj: _Builder | dict[str, Any], *policies: PolicyBuilder, ns: str = "ml", **ctx: Any
) -> engine.Outcome:
    built = obj.build() if isinstance(obj, _Builder) else obj
    return engine.admit(built, context(*policies, ns=ns, **ctx))


def render(
    obj: _Builder | dict[str, Any], *policies: PolicyBuilder, ns: str = "ml", **ctx: Any
) -> dict[str, Any]:
    """The AppWrapper for a candidate that must be wrapped without errors."""
    outcome = outcome_of(obj, *policies, ns=ns, **ctx)
    assert outcome.action is engine.Action.WRAP, outcome.reason
    assert outcome.errors == (), [v.render() for v in outcome.errors]
    assert outcome.result is not None
    return outcome.result


def component(appwrapper: dict[str, Any], index: int = 0) -> dict[str, Any]:
    result: dict[str, Any] = appwrapper["spec"]["components"][index]["template"]
    return result


def rendered_paths(outcome: engine.Outcome) -> list[tuple[str, str]]:
    """(path, severity) of every finding, in the engine's order."""
    return [(str(v.path), v.severity.value) for v in outcome.findings]
