"""Reading policy files from disk: the shell around the pure ``webhook.core.policy``.

A path is a file or a directory of ``*.yaml``/``*.yml`` files; hidden entries are skipped.
A mounted ConfigMap is kubelet's atomic-writer layout: each entry is a symlink to
``..data/<entry>``, and ``..data`` is a symlink to a timestamped directory (``..2024_…``)
that kubelet replaces in one rename. Reading the entries one by one through their own links
could mix two versions when the swap lands between two reads, so ``..data`` is resolved once
per read and every file is read from the directory it pointed to: one consistent snapshot.
The digest lets the server notice a change by content, since mounted ConfigMaps send no
reliable filesystem events.
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path

from webhook.core import policy

ENV_VAR = "AUTOWRAP_POLICY"
DEFAULT_DIR = Path("policies")
# The policy set deploy/ installs, in a checkout (relative to the working directory), and the
# copy of it shipped inside the package (webhook/shell/policies).
CHECKOUT_DIR = Path("deploy/base/policies")
PACKAGED_DIR = "policies"


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
            snapshot = _snapshot(path)
            files = sorted(p for p in snapshot.iterdir() if is_policy_file(p.name) and p.is_file())
            if not files:
                raise policy.PolicyError(f"{path}: no *.yaml policy files in this directory")
            # Named by the mounted path, not the timestamped directory (stable across swaps).
            return [(str(path / p.name), p.read_text(encoding="utf-8")) for p in files]
        return [(str(path), path.read_text(encoding="utf-8"))]
    except OSError as exc:
        raise policy.PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise policy.PolicyError(f"{path}: not UTF-8 text") from None


def is_policy_file(name: str) -> bool:
    """A ``*.yaml``/``*.yml`` entry that is not hidden (kubelet's ``..data`` and friends are)."""
    return name.endswith((".yaml", ".yml")) and not name.startswith(".")


def _snapshot(directory: Path) -> Path:
    """The directory to read: where kubelet's ``..data`` points now, resolved once; the
    directory itself when it is not a mounted ConfigMap."""
    data = directory / "..data"
    if data.is_symlink() or data.is_dir():
        return data.resolve(strict=True)
    return directory


def from_config_map(data: dict[str, str]) -> list[tuple[str, str]]:
    """(source, text) pairs of a ConfigMap's ``data``, picked as the mounted directory would be
    read (the same entries, in the same order), so that a check of the ConfigMap before it is
    stored says what loading it would say."""
    return [(key, data[key]) for key in sorted(data) if is_policy_file(key)]


def packaged() -> list[tuple[str, str]]:
    """(source, text) pairs of the policy set shipped inside the package: the one deploy/
    installs, for a CLI installed without a checkout."""
    folder = resources.files("webhook.shell") / PACKAGED_DIR
    files = sorted((f for f in folder.iterdir() if is_policy_file(f.name)), key=lambda f: f.name)
    return [(f"{f.name} (shipped with autowrap)", f.read_text(encoding="utf-8")) for f in files]


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
