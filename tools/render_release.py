"""Render the release manifests: one `kubectl apply -f` ready file per kustomize variant.

    python -m tools.render_release          # rewrite deploy/release/autowrap-<variant>.yaml
    python -m tools.render_release --check  # exit 1 if any file differs from the rendering

Each file in deploy/release is exactly the output of `kubectl kustomize deploy/<variant>`
(tests/deploy checks that byte for byte), so run this after every change under deploy/base,
deploy/overlays or deploy/components.

The same files for your cluster, written to a directory of your choice (deploy/release is left
alone):

    python -m tools.render_release --out my-release \\
        [--namespace platform-webhooks] [--image registry.example/autowrap:0.5.0] \\
        [--policies my-policies/] [--variant self-managed ...]

--namespace installs into that namespace, and carries it everywhere it is written (through
kustomize's `namespace:` field and deploy/install-namespace); --image names the image to run
(a tag or a digest is required); --policies installs the policy files of a directory instead
of the default policy (checked with the same loader the server uses).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
RELEASE = DEPLOY / "release"
IMAGE = "ghcr.io/autowrap/autowrap"
POLICIES_CONFIGMAP = "autowrap-policies"
DEFAULT_NAMESPACE = "autowrap-system"
# Release file name suffix -> kustomization directory, relative to deploy/.
VARIANTS: dict[str, str] = {
    "base": "base",
    "cert-manager": "overlays/cert-manager",
    "self-managed": "overlays/self-managed",
    "without-component-create": "overlays/without-component-create",
}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")


class UsageError(ValueError):
    """A bad option: said in one line, with the fix."""


@dataclass(frozen=True)
class Image:
    name: str
    tag: str = ""
    digest: str = ""

    def kustomize(self) -> str:
        """The `images:` entry of a kustomization."""
        entry = f"- name: {IMAGE}\n  newName: {self.name}\n"
        if self.digest:
            return entry + f"  digest: {self.digest}\n"
        return entry + f"  newTag: {self.tag}\n"


def parse_image(ref: str) -> Image:
    """NAME:TAG or NAME@DIGEST (a registry port, host:5000/name:tag, is not a tag)."""
    name, at, digest = ref.partition("@")
    if at:
        if not _DIGEST.match(digest):
            raise UsageError(f"--image {ref}: {digest!r} is not a digest (sha256:<hex>)")
        return Image(name, digest=digest)
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.match(tag):
            raise UsageError(f"--image {ref}: {tag!r} is not a valid tag")
        if name:
            return Image(name, tag=tag)
    raise UsageError(
        f"--image {ref}: give a tag or a digest (for example {ref}:0.5.0), so that every "
        "replica runs the same build"
    )


def check_namespace(namespace: str) -> str:
    if not _DNS_LABEL.match(namespace):
        raise UsageError(
            f"--namespace {namespace}: not a valid namespace name (lower-case letters, digits "
            "and '-', at most 63 characters, starting and ending with a letter or digit)"
        )
    return namespace


def check_policies(directory: Path) -> list[Path]:
    """The policy files of ``directory``, after the server's own loader accepted them."""
    from webhook.core import policy
    from webhook.shell import policyfiles

    try:
        policy.build(policyfiles.read(directory))
    except policy.PolicyError as exc:
        raise UsageError(f"--policies {directory}: {exc}") from None
    return sorted(
        p for p in directory.iterdir() if policyfiles.is_policy_file(p.name) and p.is_file()
    )


def release_path(variant: str) -> Path:
    return RELEASE / f"autowrap-{variant}.yaml"


def _kustomize(directory: Path, what: str) -> str:
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {what} failed:\n{done.stderr}")
    return done.stdout


def render(variant: str) -> str:
    """`kubectl kustomize` of one variant, as kubectl prints it."""
    return _kustomize(DEPLOY / VARIANTS[variant], variant)


def render_custom(
    variant: str,
    *,
    namespace: str | None = None,
    image: Image | None = None,
    policies: list[Path] | None = None,
) -> str:
    """One variant for a chosen namespace, image and policy set: an overlay of the variant
    built in a scratch copy of deploy/ (kustomize loads nothing from outside its root)."""
    with tempfile.TemporaryDirectory(prefix="autowrap-release-") as scratch:
        root = Path(scratch)
        shutil.copytree(DEPLOY, root / "deploy", ignore=shutil.ignore_patterns("release"))
        install = root / "install"
        install.mkdir()
        lines = [
            "apiVersion: kustomize.config.k8s.io/v1beta1",
            "kind: Kustomization",
            "resources:",
            f"- ../deploy/{VARIANTS[variant]}",
        ]
        if namespace:
            lines += [f"namespace: {namespace}", "transformers:", "- ../deploy/install-namespace"]
        text = "\n".join(lines) + "\n"
        if image:
            text += "images:\n" + image.kustomize()
        (install / "kustomization.yaml").write_text(text, encoding="utf-8")
        top = install
        if policies is not None:
            # A second layer, so that the namespace change (above) never rewrites your files.
            top = root / "policies"
            top.mkdir()
            for path in policies:
                shutil.copyfile(path, top / path.name)
            files = "".join(f"  - {path.name}\n" for path in policies)
            (top / "kustomization.yaml").write_text(
                "apiVersion: kustomize.config.k8s.io/v1beta1\n"
                "kind: Kustomization\n"
                "resources:\n- ../install\n"
                "configMapGenerator:\n"
                f"- name: {POLICIES_CONFIGMAP}\n"
                f"  namespace: {namespace or DEFAULT_NAMESPACE}\n"
                "  behavior: replace\n"
                "  options:\n    disableNameSuffixHash: true\n"
                f"  files:\n{files}",
                encoding="utf-8",
            )
        return _kustomize(top, variant)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.render_release",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--check", action="store_true", help="only compare deploy/release; exit 1 if stale"
    )
    parser.add_argument("--out", type=Path, help="write customised release files here")
    parser.add_argument("--namespace", help="install into this namespace")
    parser.add_argument("--image", help="the image to run, NAME:TAG or NAME@sha256:DIGEST")
    parser.add_argument(
        "--policies", type=Path, help="a directory of policy files to install instead"
    )
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(VARIANTS),
        help="render only this variant (repeatable; default: all)",
    )
    return parser


def _custom(args: argparse.Namespace) -> int:
    if args.out is None:
        raise UsageError(
            "--namespace, --image, --policies and --variant write customised files: "
            "give --out DIR (deploy/release keeps the published defaults)"
        )
    namespace = check_namespace(args.namespace) if args.namespace else None
    image = parse_image(args.image) if args.image else None
    policies = check_policies(args.policies) if args.policies else None
    if namespace and policies and namespace != DEFAULT_NAMESPACE:
        for path in policies:
            if DEFAULT_NAMESPACE in path.read_text(encoding="utf-8"):
                print(
                    f"note: {path} names {DEFAULT_NAMESPACE}; your policy files are installed "
                    f"as they are (exclude {namespace} there if it should be)",
                    file=sys.stderr,
                )
    args.out.mkdir(parents=True, exist_ok=True)
    for variant in args.variant or VARIANTS:
        text = render_custom(variant, namespace=namespace, image=image, policies=policies)
        path = args.out / f"autowrap-{variant}.yaml"
        path.write_text(text, encoding="utf-8")
        print(f"written: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    customised = args.out or args.namespace or args.image or args.policies or args.variant
    if customised:
        if args.check:
            parser.error("--check compares deploy/release only; drop the other options")
        try:
            return _custom(args)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
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
