"""AppWrapper fault-tolerance annotations: they must parse, and stay within the policy's caps.

The AppWrapper controller logs a malformed value and silently uses its default, so a typo
would go unnoticed until a job is retried the wrong number of times.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.core.policy import (
    FAULT_TOLERANCE_CODES,
    FAULT_TOLERANCE_DURATIONS,
    FAULT_TOLERANCE_INTS,
    FaultTolerance,
    cap_exceeded,
)
from webhook.model import durations, names
from webhook.model.fields import ANNOTATIONS, FieldPath, Violation, error


def check(
    annotations: Mapping[str, str], policy: FaultTolerance, *, base: FieldPath = ANNOTATIONS
) -> list[Violation]:
    found: list[Violation] = []
    for key, value in annotations.items():
        if not key.startswith(names.FAULT_TOLERANCE_PREFIX):
            continue
        short = key[len(names.FAULT_TOLERANCE_PREFIX) :]
        path = base.key(key)
        problem = _problem(short, value)
        if problem:
            found.append(error(path, problem))
            continue
        cap = policy.caps.get(short)
        if (
            cap is not None
            and short not in FAULT_TOLERANCE_CODES
            and cap_exceeded(short, value, cap)
        ):
            found.append(
                error(path, f"{value} exceeds this namespace's cap of {cap}; use at most {cap}")
            )
    return found


def _problem(short: str, value: str) -> str | None:
    if short in FAULT_TOLERANCE_DURATIONS:
        try:
            seconds = durations.parse_seconds(value)
        except ValueError as exc:
            return f"{exc}; use a Go duration such as 90s, 5m or 168h (there is no 'd' unit)"
        if seconds < 0:
            return f"{value!r} is negative; use a duration ≥ 0"
        return None
    if short in FAULT_TOLERANCE_INTS:
        if not value.isdigit():
            return f'{value!r} is not a non-negative integer; use e.g. "3"'
        return None
    if short in FAULT_TOLERANCE_CODES:
        codes = [c.strip() for c in value.split(",")]
        if not all(c.isdigit() and 0 < int(c) < 256 for c in codes):
            return f'{value!r} is not a comma-separated list of exit codes 1..255, e.g. "42,43"'
        return None
    known = ", ".join(FAULT_TOLERANCE_DURATIONS + FAULT_TOLERANCE_INTS + FAULT_TOLERANCE_CODES)
    return f"unknown AppWrapper annotation {short!r}; the controller ignores it. Known: {known}"
