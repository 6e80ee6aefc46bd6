"""What the tests need beside the repository, and what a run without it does.

Two things live outside the repository: the upstream CRDs in ``../shared/crds`` (schema
validation of every custom resource the fake cluster stores) and ``kubectl`` (``kubectl
kustomize`` renders deploy/ for the deploy tests and the apiserver emulator). Without one, the
tests that need it are skipped with the reason, so a run's summary says what it did not check.
Under ``AUTOWRAP_TESTS_REQUIRE_ALL=1`` (``.ci/run`` sets it: CI always has both) a missing one
fails those tests instead, so a CI runner that lost one cannot pass by skipping.

pytest is imported only when a test is being skipped or failed: the benches import the
testbed without it.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import NoReturn

REQUIRE_ALL = "AUTOWRAP_TESTS_REQUIRE_ALL"
CRD_DIR = Path(__file__).resolve().parents[2] / "shared" / "crds"


class SchemaValidationOff(UserWarning):
    """A fake cluster built without ../shared/crds stores custom resources unchecked."""


def required() -> bool:
    """Whether every prerequisite must be present (CI)."""
    return os.environ.get(REQUIRE_ALL, "") not in ("", "0")


def unavailable(reason: str) -> NoReturn:
    """Skip the current test with ``reason``; fail it instead when every prerequisite is
    required."""
    import pytest

    if required():
        pytest.fail(f"{reason} ({REQUIRE_ALL} is set: CI must have it)", pytrace=False)
    pytest.skip(reason)


def crds() -> Path:
    """The upstream CRD directory, or the current test skipped (failed under CI)."""
    if not CRD_DIR.is_dir():
        unavailable(f"upstream CRDs not found at {CRD_DIR}: CRD schema checks need ../shared/crds")
    return CRD_DIR


def kubectl() -> str:
    """kubectl's path, or the current test skipped (failed under CI)."""
    found = shutil.which("kubectl")
    if found is None:
        unavailable("kubectl is not on PATH: the kustomize renderings of deploy/ cannot be built")
    return found


def helm() -> Path:
    """The helm built from its Go module (``python -m testbed.real build``), or the current
    test skipped (failed under CI). Never a helm from PATH: the chart is checked with the
    pinned version."""
    from testbed.real import build

    binary = build.components()["helm"].binary("helm")
    if not binary.is_file():
        unavailable(f"helm is not built ({binary}): run python -m testbed.real build")
    return binary


def schema_validation(wanted: bool) -> bool:
    """Whether a fake cluster's store can check custom resources against their CRDs. Without
    the CRDs: an error when every prerequisite is required, a warning otherwise (the summary
    also shows tests/test_prerequisites.py skipped)."""
    if not wanted or CRD_DIR.is_dir():
        return wanted
    message = f"upstream CRDs not found at {CRD_DIR}: custom resources are stored unchecked"
    if required():
        raise RuntimeError(f"{message} ({REQUIRE_ALL} is set)")
    warnings.warn(message, SchemaValidationOff, stacklevel=3)
    return False


__all__ = [
    "CRD_DIR",
    "REQUIRE_ALL",
    "SchemaValidationOff",
    "crds",
    "helm",
    "kubectl",
    "required",
    "schema_validation",
    "unavailable",
]
