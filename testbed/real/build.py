"""Build the upstream components of the real-control-plane tier from their Go modules.

Each component gets a *builder module* outside the repository: a go.mod that requires the
component at its pinned version (``versions.toml``) and names its commands as ``tool``s, with
the replace lines the component's own go.mod needs to build as a dependency (a local path such
as Kubernetes' ``./staging`` is replaced by the served tag). Binaries land in a directory keyed
by component and version, so a warm cache rebuilds nothing and a version bump rebuilds one
component. Nothing here is downloaded but Go modules through the ordinary Go proxy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

VERSIONS = Path(__file__).with_name("versions.toml")


def cache_root() -> Path:
    """Where builds live: ``$AUTOWRAP_UPSTREAM_CACHE``, else ``~/.cache/autowrap-upstream``."""
    configured = os.environ.get("AUTOWRAP_UPSTREAM_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "autowrap-upstream"


@dataclass(frozen=True)
class Component:
    """One upstream project: its module, pinned version and the commands built from it."""

    name: str
    module: str
    version: str
    binaries: dict[str, str]
    ldflags: tuple[str, ...] = ()
    staging: str | None = None
    apis: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def bin_dir(self) -> Path:
        return cache_root() / "bin" / f"{self.name}-{self.version}"

    @property
    def builder_dir(self) -> Path:
        return cache_root() / "builders" / f"{self.name}-{self.version}"

    def binary(self, command: str) -> Path:
        return self.bin_dir / command

    def built(self) -> bool:
        return all(self.binary(command).is_file() for command in self.binaries)


def components() -> dict[str, Component]:
    """The pinned components, in build order (Kubernetes first: everything needs it)."""
    table = tomllib.loads(VERSIONS.read_text())
    out: dict[str, Component] = {}
    for name, entry in table.items():
        out[name] = Component(
            name=name,
            module=entry["module"],
            version=entry["version"],
            binaries=dict(entry["binaries"]),
            ldflags=tuple(
                flag.format(version=entry["version"]) for flag in entry.get("ldflags", ())
            ),
            staging=entry.get("staging"),
            apis=entry.get("apis"),
        )
    order = ["kubernetes", "etcd", "kwok", "appwrapper", "kueue", "volcano", "helm"]
    return {
        name: out[name] for name in sorted(out, key=lambda n: order.index(n) if n in order else 99)
    }


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    return env


def _go(args: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["go", *args], cwd=cwd, env=go_env(), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BuildError(f"go {' '.join(args)} failed in {cwd or '.'}:\n{done.stderr[-4000:]}")
    return done.stdout


class BuildError(RuntimeError):
    """A component did not build; the message carries the go command's output."""


def module_download(module: str, version: str) -> dict[str, str]:
    """``go mod download -json``: the module's source directory and go.mod in the module cache."""
    info: dict[str, str] = json.loads(_go(["mod", "download", "-json", f"{module}@{version}"]))
    if info.get("Error"):
        raise BuildError(f"{module}@{version}: {info['Error']}")
    return info


def source_dir(component: Component) -> Path:
    """The component's module source (its CRDs, webhooks and stages are read from here)."""
    return Path(module_download(component.module, component.version)["Dir"])


def builder_gomod(component: Component) -> str:
    """The builder module's go.mod for ``component``."""
    info = module_download(component.module, component.version)
    upstream = json.loads(_go(["mod", "edit", "-json", info["GoMod"]]))
    lines = [
        f"module local.test/{component.name}-builder",
        "",
        f"go {upstream['Go']}",
        "",
        f"require {component.module} {component.version}",
        "",
    ]
    requires = {r["Path"]: r["Version"] for r in upstream.get("Require") or []}
    for replace in upstream.get("Replace") or []:
        old, new = replace["Old"]["Path"], replace["New"]
        if new.get("Version"):
            lines.append(f"replace {old} => {new['Path']} {new['Version']}")
        elif component.staging and old.startswith("k8s.io/") and requires.get(old) == "v0.0.0":
            lines.append(f"replace {old} => {old} {component.staging}")
        elif component.apis and old == "volcano.sh/apis":
            lines.append(f"replace {old} => {old} {component.apis}")
        # Any other local path names a sibling module that the requires already pin.
    lines.append("")
    lines.extend(f"tool {package}" for package in sorted(set(component.binaries.values())))
    return "\n".join(lines) + "\n"


def build(component: Component, log: TextLog) -> None:
    """Build every command of ``component`` that is missing from its cache directory."""
    if component.built():
        log(f"{component.name} {component.version}: cached")
        return
    started = time.monotonic()
    builder = component.builder_dir
    builder.mkdir(parents=True, exist_ok=True)
    gomod = builder_gomod(component)
    if not (builder / "go.mod").is_file() or (builder / ".source").read_text() != gomod:
        (builder / "go.mod").write_text(gomod)
        (builder / "go.sum").unlink(missing_ok=True)
        _go(["mod", "tidy"], cwd=builder)
        (builder / ".source").write_text(gomod)
    component.bin_dir.mkdir(parents=True, exist_ok=True)
    ldflags = " ".join(["-s", "-w", *component.ldflags])
    for command, package in component.binaries.items():
        target = component.binary(command)
        if target.is_file():
            continue
        partial = target.with_name(f".{command}.partial")
        _go(["build", "-trimpath", f"-ldflags={ldflags}", "-o", str(partial), package], cwd=builder)
        partial.rename(target)
    log(f"{component.name} {component.version}: built in {time.monotonic() - started:.0f} s")


class TextLog:
    """Progress lines on stderr, each with the seconds since the build started."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:6.0f}s] {line}", file=sys.stderr, flush=True)


def build_all(names: list[str] | None = None) -> dict[str, Component]:
    """Build what is missing; return the components by name."""
    if shutil.which("go") is None:
        raise BuildError(
            "go is not on PATH: the real-control-plane tier builds its components with Go"
        )
    log = TextLog()
    wanted = components()
    for name, component in wanted.items():
        if names and name not in names:
            continue
        build(component, log)
    return wanted


def missing() -> list[str]:
    """The components whose binaries are not in the cache."""
    return [name for name, component in components().items() if not component.built()]
