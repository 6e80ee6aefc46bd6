"""Generate ``webhook/model/crdschema_data.py`` from the upstream CRDs in ``../shared/crds``.

    python -m tools.crd_schema            # rewrite webhook/model/crdschema_data.py
    python -m tools.crd_schema --check    # exit 1 if it differs from what the CRDs give

``autowrap check`` reports the fields a Volcano Job or an AppWrapper has that its CRD's
structural schema does not know, as ``kubectl apply`` (strict field validation) refuses them.
The product ships no CRD, so it carries this digest of their schemas: which fields each object
may have, nothing else (types are judged by the engine's own rules). Subtrees that are not
judged here are ``*``: ``x-kubernetes-preserve-unknown-fields`` and embedded resources, and a
Volcano task's pod ``spec``, which admission checks against the PodSpec schema
(``webhook/model/podschema.py``) with the same unknown-field refusal.
``tests/test_crd_schemas.py`` fails when this file is not what the CRDs give.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO.parent / "shared" / "crds"
DATA = REPO / "webhook" / "model" / "crdschema_data.py"
# The CRDs autowrap judges, and the kinds a user submits of them.
CRDS = ("batch.volcano.sh_jobs.yaml", "workload.codeflare.dev_appwrappers.yaml")
# Paths (property names, "[]" for list items) left to another check.
DELEGATED = {("spec", "tasks", "[]", "template", "spec")}
# ObjectMeta's fields (metav1.ObjectMeta's JSON names): a root ``metadata`` of any kind.
OBJECT_META = {
    **dict.fromkeys(
        (
            "creationTimestamp",
            "deletionGracePeriodSeconds",
            "deletionTimestamp",
            "finalizers",
            "generateName",
            "generation",
            "managedFields",
            "name",
            "namespace",
            "ownerReferences",
            "resourceVersion",
            "selfLink",
            "uid",
        ),
        "*",
    ),  # fmt: skip
    "labels": "{s}",
    "annotations": "{s}",
}

HEADER = '''"""The fields of the CRDs autowrap judges, generated from their structural schemas; do not edit.

Regenerate with ``python -m tools.crd_schema`` (the CRDs are read from ../shared/crds; see
tools/crd_schema.py). ``NODES`` holds one object schema a line, ``ID field:TYPE ...``; a TYPE
is ``-`` (a scalar), ``*`` (anything: not judged here), ``s`` (a string), an ID, ``[TYPE]`` (a
list) or ``{TYPE}`` (a map). ``ROOTS`` gives the node of each ``apiVersion kind``, ``SERVED``
the versions each ``group kind`` serves, ``OBJECT_META`` the node of a root ``metadata``.
"""
'''


class _Nodes:
    """Object schemas numbered once each: equal subtrees share a line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._ids: dict[str, int] = {}

    def add(self, fields: dict[str, str]) -> str:
        body = " ".join(f"{name}:{kind}" for name, kind in sorted(fields.items()))
        if body not in self._ids:
            self._ids[body] = len(self.lines)
            self.lines.append(f"{len(self.lines)} {body}".rstrip())
        return str(self._ids[body])

    def type_of(self, schema: dict[str, Any], path: tuple[str, ...]) -> str:
        if path in DELEGATED:
            return "*"
        if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get(
            "x-kubernetes-embedded-resource"
        ):
            return "*"
        if schema.get("x-kubernetes-int-or-string"):
            return "-"
        kind = schema.get("type")
        if kind == "array":
            items = schema.get("items")
            return f"[{self.type_of(items, (*path, '[]'))}]" if isinstance(items, dict) else "[*]"
        if kind == "object" or "properties" in schema:
            if path == ("metadata",):
                return self.add(OBJECT_META)
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                return "{" + self.type_of(extra, (*path, "{}")) + "}"
            if extra is True:
                return "{*}"
            properties = schema.get("properties") or {}
            return self.add(
                {name: self.type_of(sub, (*path, name)) for name, sub in properties.items()}
            )
        return "s" if kind == "string" else "-"


def generate(crd_dir: Path = CRD_DIR) -> str:
    nodes = _Nodes()
    object_meta = nodes.add(OBJECT_META)
    roots: list[str] = []
    served: list[str] = []
    for file in CRDS:
        crd = yaml.safe_load((crd_dir / file).read_text(encoding="utf-8"))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        versions = [v for v in crd["spec"]["versions"] if v.get("served")]
        names = "".join(f'"{v["name"]}", ' for v in versions).rstrip()
        served.append(f'    "{group} {kind}": ({names}),')
        for version in versions:
            root = nodes.type_of(version["schema"]["openAPIV3Schema"], ())
            roots.append(f'    "{group}/{version["name"]} {kind}": {root},')
    return "\n".join(
        [
            HEADER,
            f"OBJECT_META = {object_meta}",
            "",
            "ROOTS = {",
            *roots,
            "}",
            "",
            "SERVED = {",
            *served,
            "}",
            "",
            'NODES = """',
            *nodes.lines,
            '"""',
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--crds", type=Path, default=CRD_DIR, help=f"default: {CRD_DIR}")
    args = parser.parse_args(argv)
    if not args.crds.is_dir():
        print(f"error: {args.crds}: no such directory (the upstream CRDs)", file=sys.stderr)
        return 2
    text = generate(args.crds)
    if args.check:
        if DATA.read_text(encoding="utf-8") != text:
            print(f"{DATA.relative_to(REPO)} is stale: run python -m tools.crd_schema")
            return 1
        return 0
    DATA.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
