"""The package's floors, checked by reading imports (docs/architecture.md draws them).

From the ground up: ``model`` (the Kubernetes vocabulary), ``core`` (the pure decisions and the
ports they ask of the cluster), ``admission``, ``shell`` (all I/O), ``controller``, ``app``
(the composition root of ``serve``), ``cli``. A floor imports only floors below it. The pure
floors do no I/O, and the plumbing and rules never depend on a workload kind, so adding a kind
touches neither."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "webhook"

# Each floor, and the floors it may import (besides itself and the package root, which holds
# only the version).
FLOORS: dict[str, set[str]] = {
    "model": set(),
    "core": {"model"},
    "admission": {"core", "model"},
    "shell": {"admission", "core", "model"},
    "controller": {"shell", "core", "model"},
    "app": {"controller", "shell", "admission", "core", "model"},
    "cli": {"app", "shell", "admission", "core", "model"},
    "__main__": {"cli"},
}
# What the floors are made of: a folder, or one module flat in webhook/.
FOLDERS = {"model", "core", "shell", "controller", "cli"}
FLAT = {"__init__.py", "__main__.py", "admission.py", "app.py"}
MAX_FLAT = 8
# Pure: no network, clock, files or processes (the CLI's views are pure too: they only read
# what was fetched or parsed).
PURE = ["model", "core", "cli/podview.py", "cli/summary.py", "cli/status.py", "cli/policytests.py",
        "cli/clusterview.py"]  # fmt: skip
# The shell's business: network, clocks, files, processes, the Kubernetes client.
SHELL_ONLY = {"aiohttp", "kubernetes", "time", "asyncio", "socket", "ssl", "os", "subprocess",
              "pathlib", "shutil", "tempfile", "logging", "urllib3", "prometheus_client"}  # fmt: skip
# Calls that read or write files.
FILE_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes"}
# autowrap doctor's checks judge what was read, and read nothing themselves.
PURE.append("cli/doctor")


def _modules(names: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in names:
        path = PACKAGE / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


ALL = sorted(PACKAGE.rglob("*.py"))


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


def _floor_of_path(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def _floor_of_import(name: str) -> str | None:
    """The floor an imported name belongs to: None for the package root (``webhook``, its
    ``__version__``) and for what is not autowrap's."""
    parts = name.split(".")
    if parts[0] != "webhook" or len(parts) == 1 or parts[1] == "__version__":
        return None
    return parts[1]


def test_every_module_stands_on_a_floor_and_few_stand_flat() -> None:
    flat = {p.name for p in PACKAGE.glob("*.py")}
    assert len(flat) <= MAX_FLAT, f"{len(flat)} modules flat in webhook/: {sorted(flat)}"
    assert flat <= FLAT, f"{sorted(flat - FLAT)}: give it a floor (FLOORS) or put it in one"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= FOLDERS, f"{sorted(folders - FOLDERS)}: a folder without a floor"
    for path in ALL:
        floor = _floor_of_path(path)
        assert floor in FLOORS or path.name == "__init__.py", _name(path)


@pytest.mark.parametrize("module", ALL, ids=_name)
def test_a_floor_imports_only_the_floors_below_it(module: Path) -> None:
    floor = _floor_of_path(module)
    if floor == "__init__":  # the package root: the version only
        assert not {n for n in _imports(module) if n.startswith("webhook")}
        return
    allowed = FLOORS[floor] | {floor}
    above = {
        name
        for name in _imports(module)
        if (target := _floor_of_import(name)) is not None and target not in allowed
    }
    assert not above, f"{_name(module)} ({floor}) imports {sorted(above)}"


def test_no_relative_imports() -> None:
    """Relative imports would slip past the floor check; autowrap names modules in full."""
    for path in ALL:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
        assert not relative, f"{_name(path)}: relative import on lines {relative}"


@pytest.mark.parametrize("module", _modules(PURE), ids=_name)
def test_the_pure_floors_do_no_io(module: Path) -> None:
    imported = {name.split(".")[0] for name in _imports(module)}
    assert not imported & SHELL_ONLY, f"{module.name} imports {sorted(imported & SHELL_ONLY)}"
    assert not _calls(module) & FILE_CALLS, f"{module.name} reads or writes files"


@pytest.mark.parametrize("module", _modules(["core/plumbing", "core/rules"]), ids=_name)
def test_plumbing_and_rules_never_import_a_kind(module: Path) -> None:
    kinds = {name for name in _imports(module) if name.startswith("webhook.core.kinds")}
    assert not kinds, f"{module.name} imports {sorted(kinds)}"


def test_the_network_is_in_the_shell() -> None:
    """What touches the network lives in webhook/shell/; nothing flat in webhook/ does."""
    top_level_io = {
        path.name
        for path in PACKAGE.glob("*.py")
        if {n.split(".")[0] for n in _imports(path)} & {"aiohttp", "kubernetes", "ssl", "socket"}
    }
    assert not top_level_io, top_level_io


def test_only_the_kube_module_imports_the_kubernetes_client() -> None:
    users = {
        _name(path) for path in ALL if any(n.split(".")[0] == "kubernetes" for n in _imports(path))
    }
    assert users == {"shell/kube.py"}, users


def test_only_the_composition_root_starts_the_controller() -> None:
    """The controller uses the core and the client; of the floors above it only the composition
    root builds it (the command line reaches it through ``app``), and it never imports
    admission or the webhooks' transport."""
    importers = {
        _name(path)
        for path in ALL
        if _floor_of_path(path) != "controller"
        and any(name.startswith("webhook.controller") for name in _imports(path))
    }
    assert importers <= {"app.py"}, importers
    for path in _modules(["controller"]):
        transport = {
            n for n in _imports(path) if n.startswith(("webhook.shell.server", "webhook.admission"))
        }
        assert not transport, f"{path.name} imports {sorted(transport)}"
