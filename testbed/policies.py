"""Policy folders for tests that exercise one wrapping mode."""

from __future__ import annotations

from pathlib import Path

import yaml


def in_mode(source: Path, target: Path, mode: str) -> Path:
    """A copy of the policy folder ``source`` at ``target`` with every policy in ``mode``."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if path.suffix not in (".yaml", ".yml"):
            continue
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for document in documents:
            document.setdefault("spec", {})["mode"] = mode
        (target / path.name).write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return target
