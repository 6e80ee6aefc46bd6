"""The policy folder the bench serves: the shipped policies, plus one namespace per mode.

Version 0.2 ships adopt mode as the default, so under the shipped policies alone a wrap
candidate is prepared by ``/mutate`` and ``/validate`` creates nothing. The bench measures both
modes, each in a namespace of its own whose policy is the shipped default's, with only the
namespaces and the mode changed:

- ``ml`` (``REDIRECT_NAMESPACE``): ``mode: Redirect``; ``/validate`` creates the AppWrapper and
  denies the create (the ``wrap`` payload);
- ``ml-adopt`` (``ADOPT_NAMESPACE``): ``mode: Adopt`` (the default, written out); ``/mutate``
  prepares the candidate for the controller (the ``adopt-*`` payloads, ``bench.controller``).

The folder is written at run time (nothing under ``policies/`` changes) and read by the server
through its ``--policy`` flag, like any other.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

SHIPPED = Path(__file__).resolve().parent.parent / "policies"
REDIRECT_NAMESPACE = "ml"
ADOPT_NAMESPACE = "ml-adopt"
# A namespace no policy covers: a user's pods there are none of autowrap's business.
UNCOVERED_NAMESPACE = "team-mallory"
FILE_NAME = "bench-modes.yaml"


def _default_spec(source: Path) -> dict[str, Any]:
    document = yaml.safe_load((source / "default.yaml").read_text())
    spec: dict[str, Any] = dict(document["spec"])
    return spec


def _policy(name: str, spec: dict[str, Any], namespace: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "autowrap.io/v1alpha1",
        "kind": "Policy",
        "metadata": {"name": name},
        "spec": {**spec, "namespaces": {"names": [namespace]}, "mode": mode},
    }


def write(target: Path, source: Path = SHIPPED) -> Path:
    """``source``'s policies copied to ``target``, plus the two per-mode namespaces."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.suffix in (".yaml", ".yml"):
            shutil.copyfile(path, target / path.name)
    spec = _default_spec(source)
    documents = [
        _policy("bench-redirect", spec, REDIRECT_NAMESPACE, "Redirect"),
        _policy("bench-adopt", spec, ADOPT_NAMESPACE, "Adopt"),
    ]
    header = "# Written by bench/policies.py: the shipped default, one namespace per mode.\n"
    (target / FILE_NAME).write_text(header + yaml.safe_dump_all(documents, sort_keys=False))
    return target
