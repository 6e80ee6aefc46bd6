"""The Events docs/how-it-works.md lists are the Events users see on their object: every reason
the controller can write, and no other (the status Events, one per status it writes, and the
Events it writes by name)."""

from __future__ import annotations

import ast
import itertools
import re

from testbed.redirect import REPO
from webhook.core import adoption

# AppWrapperPhase (api/v1beta2/appwrapper_types.go, AppWrapper v1.2.1).
PHASES = ("", "Suspended", "Resuming", "Running", "Resetting", "Suspending", "Succeeded",
          "Failed", "Terminating")  # fmt: skip


def _status_reasons() -> set[str]:
    found = {adoption.status(None, pending=False).reason}
    for phase, suspend, escaped in itertools.product(PHASES, (True, False), (0, 1)):
        aw = {"metadata": {"name": "train"}, "spec": {"suspend": suspend},
              "status": {"phase": phase}}  # fmt: skip
        found.add(adoption.status(aw, pending=False, escaped_pods=escaped).reason)
    return found


def _named_in_the_controller() -> set[str]:
    """Reasons given by name: ``emit(obj, "Reason", ...)`` and ``Status(text, "Reason", ...)``."""
    tree = ast.parse((REPO / "webhook" / "controller" / "reconcile.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        argument = node.args[1]
        if name in ("emit", "Status") and isinstance(argument, ast.Constant):
            found.add(str(argument.value))
    return found


def _documented() -> set[str]:
    text = (REPO / "docs" / "how-it-works.md").read_text()
    rows = text[text.index("| Event | when |") :].splitlines()[2:]
    rows = list(itertools.takewhile(lambda row: row.strip().startswith("|"), rows))
    return {m for row in rows for m in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_the_events_the_docs_list_are_the_events_the_controller_writes() -> None:
    written = _status_reasons() | _named_in_the_controller()
    assert "Queued" in written and "Adopted" in written
    assert _documented() == written
