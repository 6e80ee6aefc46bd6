"""docs/security.md lists every write autowrap's identity can make: its table holds exactly the
write verbs that deploy/ grants autowrap's ServiceAccount (base, the self-managed overlay and the
owner-references-enforcement component together)."""

from __future__ import annotations

import re

import yaml

from tests.deploy.test_manifests import DEPLOY, REPO, rbac_grants, render
from webhook.model import names

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
HEADING = "## What autowrap's identity can write"


def _documented() -> set[tuple[str, str]]:
    text = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "the table of writes is missing"
    found: set[tuple[str, str]] = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        resources = re.findall(r"`([^`]+)`", cells[0])
        verbs = [v for v in re.findall(r"`([^`]+)`", cells[1]) if v in WRITE_VERBS]
        assert resources and verbs, row
        found |= {(resource, verb) for resource in resources for verb in verbs}
    return found


def _granted() -> set[tuple[str, str]]:
    component = DEPLOY / "components" / "owner-references-enforcement" / "rbac.yaml"
    # The self-managed overlay is the base plus its own grants.
    objs = [
        *render("self-managed"),
        *(d for d in yaml.safe_load_all(component.read_text(encoding="utf-8")) if d),
    ]
    grants = rbac_grants(objs, names.SERVICE_NAMESPACE, names.SERVICE_NAME)
    return {
        (f"{resource}.{group}" if group else resource, verb)
        for group, resource, verb, _, _ in grants
        if verb in WRITE_VERBS
    }


def test_the_security_page_lists_every_write_and_no_other() -> None:
    documented, granted = _documented(), _granted()
    assert documented == granted, (
        f"granted but not in docs/security.md: {sorted(granted - documented)}; "
        f"documented but not granted: {sorted(documented - granted)}"
    )
