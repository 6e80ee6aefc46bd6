"""What this run could not check, said in its summary: each prerequisite that lives outside the
repository is one test here, skipped with the reason when it is missing (failed when
AUTOWRAP_TESTS_REQUIRE_ALL is set, as .ci/run sets it), beside the tests that need it."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import prerequisites
from testbed.cluster.store import Store


def test_the_upstream_crds_are_beside_the_repository() -> None:
    assert (prerequisites.crds() / "workload.codeflare.dev_appwrappers.yaml").is_file()
    assert Store().validate_schemas, "the fake cluster checks custom resources against them"


def test_kubectl_is_on_the_path() -> None:
    assert prerequisites.kubectl()


def test_without_the_crds_a_store_warns_and_ci_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prerequisites, "CRD_DIR", prerequisites.CRD_DIR / "missing")
    monkeypatch.delenv(prerequisites.REQUIRE_ALL, raising=False)
    with pytest.warns(prerequisites.SchemaValidationOff):
        assert not Store().validate_schemas
    with pytest.raises(pytest.skip.Exception, match="CRD schema checks need"):
        prerequisites.crds()
    monkeypatch.setenv(prerequisites.REQUIRE_ALL, "1")
    with pytest.raises(RuntimeError, match="stored unchecked"):
        Store()
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        prerequisites.crds()


def test_without_kubectl_the_deploy_tests_skip_and_ci_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(prerequisites.REQUIRE_ALL, raising=False)
    with pytest.raises(pytest.skip.Exception, match="kubectl is not on PATH"):
        prerequisites.kubectl()
    monkeypatch.setenv(prerequisites.REQUIRE_ALL, "1")
    with pytest.raises(pytest.fail.Exception, match="kubectl is not on PATH"):
        prerequisites.kubectl()


def test_helm_is_built() -> None:
    assert prerequisites.helm().is_file()


def test_without_helm_the_chart_tests_skip_and_ci_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AUTOWRAP_UPSTREAM_CACHE", str(tmp_path))
    monkeypatch.delenv(prerequisites.REQUIRE_ALL, raising=False)
    with pytest.raises(pytest.skip.Exception, match="helm is not built"):
        prerequisites.helm()
    monkeypatch.setenv(prerequisites.REQUIRE_ALL, "1")
    with pytest.raises(pytest.fail.Exception, match="helm is not built"):
        prerequisites.helm()
