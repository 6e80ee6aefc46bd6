"""autowrap's own annotations on a workload: nproc, master task, master port, excluded tasks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.core.plumbing.env import excluded_tasks, parse_positive
from webhook.model import names
from webhook.model.fields import ANNOTATIONS, Violation, error


def check(
    annotations: Mapping[str, str], group_names: Iterable[str], *, master_group: str | None = None
) -> list[Violation]:
    """``master_group``: the name of the group that holds node 0 (it cannot be excluded)."""
    found: list[Violation] = []
    nproc = annotations.get(names.NPROC_ANNOTATION)
    if nproc is not None and parse_positive(nproc) is None:
        found.append(
            error(
                ANNOTATIONS.key(names.NPROC_ANNOTATION),
                f'{nproc!r} is not a positive integer; set the processes per pod, e.g. "8", or '
                "remove it to count the pod's accelerators",
            )
        )
    master = annotations.get(names.MASTER_TASK_ANNOTATION)
    known = list(group_names)
    if master is not None and master not in known:
        found.append(
            error(
                ANNOTATIONS.key(names.MASTER_TASK_ANNOTATION),
                f"no task is named {master!r}; use one of: {', '.join(known) or '(none)'}",
            )
        )
    found += _check_excluded(annotations, known, master_group)
    port = annotations.get(names.MASTER_PORT_ANNOTATION)
    if port is not None:
        number = parse_positive(port)
        if number is None or number > 65535:
            found.append(
                error(
                    ANNOTATIONS.key(names.MASTER_PORT_ANNOTATION),
                    f"{port!r} is not a port; use an integer from 1 to 65535",
                )
            )
    return found


def _check_excluded(
    annotations: Mapping[str, str], known: list[str], master: str | None
) -> list[Violation]:
    raw = annotations.get(names.EXCLUDE_TASKS_ANNOTATION)
    if raw is None:
        return []
    path = ANNOTATIONS.key(names.EXCLUDE_TASKS_ANNOTATION)
    found: list[Violation] = []
    excluded = excluded_tasks(raw)
    unknown = [t for t in excluded if t not in known]
    if unknown:
        found.append(
            error(
                path,
                f"no task is named {', '.join(repr(t) for t in unknown)}; list task names "
                f"separated by commas, from: {', '.join(known) or '(none)'}",
            )
        )
    if master is not None and master in excluded:
        found.append(
            error(
                path,
                f"{master!r} is the master task: its pod 0 is node 0, the host behind "
                f"MASTER_ADDR, so it cannot leave the world; remove it from the list, or make "
                f"another task the master with the annotation {names.MASTER_TASK_ANNOTATION}",
            )
        )
    return found
