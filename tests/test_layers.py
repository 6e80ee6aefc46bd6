"""The package's layering, checked by reading imports: the engine stays pure, and the
plumbing and rules never depend on a workload kind, so adding a kind touches neither."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "webhook"

ENGINE = [
    "core/engine.py",
    "core/adoption.py",
    "core/builder.py",
    "core/policy.py",
    "core/workload.py",
    "model/objects.py",
    "core/provenance.py",
    "model/fields.py",
    "model/names.py",
    "model/dnsnames.py",
    "model/durations.py",
    "model/patches.py",
    "cli/podview.py",
    "cli/summary.py",
    "cli/status.py",
    "cli/policytests.py",
    "core/policyerrors.py",
    "model/yamltext.py",
    "core/kinds",
    "core/plumbing",
    "core/rules",
]
# The shell's business: network, clocks, files, processes, the Kubernetes client.
SHELL_ONLY = {"aiohttp", "kubernetes", "time", "asyncio", "socket", "ssl", "os", "subprocess",
              "pathlib", "shutil", "tempfile", "logging", "urllib3", "prometheus_client"}  # fmt: skip
# Calls that read or write files.
FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes"}


def _modules(names: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in names:
        path = PACKAGE / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def _calls(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


@pytest.mark.parametrize("module", _modules(ENGINE), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_engine_does_no_io(module: Path) -> None:
    imported = {name.split(".")[0] for name in _imports(module)}
    assert not imported & SHELL_ONLY, f"{module.name} imports {sorted(imported & SHELL_ONLY)}"
    assert not _calls(module) & FILE_CALLS, f"{module.name} reads or writes files"


@pytest.mark.parametrize(
    "module", _modules(["core/plumbing", "core/rules"]), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_plumbing_and_rules_never_import_a_kind(module: Path) -> None:
    kinds = {name for name in _imports(module) if name.startswith("webhook.core.kinds")}
    assert not kinds, f"{module.name} imports {sorted(kinds)}"


def test_the_shell_is_a_folder_of_its_own_and_the_engine_never_imports_it() -> None:
    """The folders show the split: what does I/O lives in webhook/shell/."""
    for module in _modules(ENGINE):
        shell = {n for n in _imports(module) if n.startswith("webhook.shell")}
        assert not shell, f"{module.name} imports {sorted(shell)}"
    top_level_io = {
        path.name
        for path in PACKAGE.glob("*.py")
        if {n.split(".")[0] for n in _imports(path)} & {"aiohttp", "kubernetes", "ssl", "socket"}
    }
    # cli.py is the console script's entry point (webhook.cli:main) and says why a server
    # could not start; everything else that touches the network is in shell/.
    assert top_level_io <= {"cli.py"}, top_level_io


def test_only_the_kube_module_imports_the_kubernetes_client() -> None:
    users = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(name.split(".")[0] == "kubernetes" for name in _imports(path))
    }
    assert users == {"shell/kube.py"}, users


def test_the_controller_is_a_layer_above_the_engine_and_the_webhooks() -> None:
    """The controller uses the engine and the client; the engine and the webhooks never import
    it (the server process only starts it), and it never imports the webhooks' transport."""
    controller = {p for p in PACKAGE.rglob("*.py") if p.parent.name == "controller"}
    importers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path not in controller
        and any(name.startswith("webhook.controller") for name in _imports(path))
    }
    assert importers <= {"app.py"}, importers
    for path in controller:
        shell = {
            n
            for n in _imports(path)
            if n.split(".")[:2] in (["webhook", "server"], ["webhook", "admission"])
        }
        assert not shell, f"{path.name} imports {sorted(shell)}"
