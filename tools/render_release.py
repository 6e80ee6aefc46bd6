"""Render the release manifests: one `kubectl apply -f` ready file per kustomize variant.

    python -m tools.render_release          # rewrite deploy/release/autowrap-<variant>.yaml
    python -m tools.render_release --check  # exit 1 if any file differs from the rendering

Each file is exactly the output of `kubectl kustomize deploy/<variant>` (tests/deploy checks
that byte for byte), so run this after every change under deploy/base, deploy/overlays or
deploy/components.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
RELEASE = DEPLOY / "release"
# Release file name suffix -> kustomization directory, relative to deploy/.
VARIANTS: dict[str, str] = {
    "base": "base",
    "cert-manager": "overlays/cert-manager",
    "self-managed": "overlays/self-managed",
    "without-component-create": "overlays/without-component-create",
}


def release_path(variant: str) -> Path:
    return RELEASE / f"autowrap-{variant}.yaml"


def render(variant: str) -> str:
    """`kubectl kustomize` of one variant, as kubectl prints it."""
    done = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / VARIANTS[variant])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {variant} failed:\n{done.stderr}")
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.render_release", description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="only compare; exit 1 if a file is stale"
    )
    args = parser.parse_args(argv)
    stale: list[str] = []
    for variant in VARIANTS:
        path = release_path(variant)
        text = render(variant)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "written"
    for name in stale:
        print(f"{verb}: {name}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
