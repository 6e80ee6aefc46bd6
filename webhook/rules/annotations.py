"""autowrap's own annotations on a workload: nproc, master task, master port."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook import names
from webhook.fields import ANNOTATIONS, Violation, error
from webhook.plumbing.env import parse_positive


def check(annotations: Mapping[str, str], group_names: Iterable[str]) -> list[Violation]:
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
