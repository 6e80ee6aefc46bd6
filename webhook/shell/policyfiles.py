"""Reading policy files from disk: the shell around the pure ``webhook.policy``.

A path is a file or a directory of ``*.yaml``/``*.yml`` files (a mounted ConfigMap, whose
entries are symlinks into a ``..data`` directory that kubelet swaps atomically; hidden
entries are skipped). The digest lets the server notice a change by content, since mounted
ConfigMaps send no reliable filesystem events.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from webhook import policy

ENV_VAR = "AUTOWRAP_POLICY"
DEFAULT_DIR = Path("policies")


def default_path() -> Path | None:
    """``$AUTOWRAP_POLICY``, else ``./policies`` when present, else None (built-in policy)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return Path(configured)
    return DEFAULT_DIR if DEFAULT_DIR.is_dir() else None


def read(path: Path) -> list[tuple[str, str]]:
    """(source, text) pairs; raises PolicyError when the path cannot be read."""
    try:
        if path.is_dir():
            files = sorted(
                p
                for p in path.iterdir()
                if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
            )
            if not files:
                raise policy.PolicyError(f"{path}: no *.yaml policy files in this directory")
            return [(str(p), p.read_text(encoding="utf-8")) for p in files]
        return [(str(path), path.read_text(encoding="utf-8"))]
    except OSError as exc:
        raise policy.PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise policy.PolicyError(f"{path}: not UTF-8 text") from None


def load(path: Path | None) -> policy.PolicySet:
    if path is None:
        return policy.PolicySet((policy.BUILTIN,))
    return policy.build(read(path))


def digest(files: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for source, text in files:
        h.update(source.encode())
        h.update(b"\0")
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()
