"""AppWrapper's hard limit: at most 8 podSets over all components (Kueue's Workload allows
more, but the AppWrapper webhook refuses a ninth)."""

from __future__ import annotations

from webhook import names
from webhook.fields import FieldPath, Violation, error


def check(count: int, *, path: FieldPath) -> list[Violation]:
    limit = names.APPWRAPPER_MAX_PODSETS
    if count > limit:
        return [
            error(
                path,
                f"{count} pod sets (one per pod template) but an AppWrapper holds at most {limit}; merge "
                "groups that share a template, or split the workload",
            )
        ]
    return []
