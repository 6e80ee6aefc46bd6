"""``autowrap test``: the shipped policy tests pass, and a wrong expectation fails, saying why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from webhook.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "policy-tests"


def _run(capsys, *args):
    capsys.readouterr()
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_shipped_policy_tests_pass(capsys):
    code, out, err = _run(capsys, "test", str(SUITE))
    assert code == 0, out
    assert out.splitlines()[-1].endswith(" passed, 0 failed") and err == ""


def test_the_shipped_policy_tests_are_not_loaded_as_policies():
    assert not (REPO / "policies" / "tests").exists()
    assert not list((REPO / "policies").rglob("autowrap-test.yaml"))


def _suite(tmp_path: Path, **case_changes) -> Path:
    shutil.copytree(SUITE / "manifests", tmp_path / "manifests")
    doc = yaml.safe_load((SUITE / "autowrap-test.yaml").read_text())
    doc["policies"] = str(REPO / "policies")
    doc["cases"] = [{**doc["cases"][0], **case_changes}]
    (tmp_path / "autowrap-test.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


@pytest.mark.parametrize(
    ("expect", "says"),
    [
        pytest.param({"result": "rejected"}, "result: expected rejected, got wrapped", id="result"),
        pytest.param(
            {"result": "wrapped", "policy": "team-a"}, "policy: expected team-a", id="policy"
        ),
        pytest.param(
            {"result": "wrapped", "queue": "q9"}, "queue: expected q9, got ml-queue", id="queue"
        ),
        pytest.param(
            {"result": "wrapped", "warnings": ["spec.x"]},
            "warnings: expected at spec.x, got none there",
            id="a missing warning",
        ),
        pytest.param(
            {"result": "wrapped", "object": "Job/other"}, "the document is Job/train", id="object"
        ),
    ],
)
def test_a_wrong_expectation_fails_and_says_what_differs(tmp_path, capsys, expect, says):
    code, out, _ = _run(capsys, "test", str(_suite(tmp_path, expect=[expect])))
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL  shipped-policies / ")
    assert says in out and out.splitlines()[-1] == "0 passed, 1 failed"


def test_an_unexpected_violation_is_listed_with_its_message(tmp_path, capsys):
    path = _suite(
        tmp_path,
        manifest="manifests/partition-mismatch.yaml",
        expect=[{"result": "rejected", "violations": []}],
    )
    code, out, _ = _run(capsys, "test", str(path))
    assert code == 1 and "violations: not expected: spec.tasks[0].replicas: replicas 6" in out


def test_one_expectation_per_document(tmp_path, capsys):
    path = _suite(tmp_path, manifest="manifests/cpu-master.yaml")
    code, _, err = _run(capsys, "test", str(path))
    assert code == 2 and "has 2 document(s) but expect lists 1" in err


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"kind": "Test"}, "kind", id="a wrong kind"),
        pytest.param({"cases": []}, "cases", id="no cases"),
        pytest.param({"colour": "red"}, "colour", id="an unknown field"),
    ],
)
def test_a_broken_test_file_exits_2_naming_the_field(tmp_path, capsys, change, field):
    path = _suite(tmp_path)
    doc = yaml.safe_load((path / "autowrap-test.yaml").read_text())
    (path / "autowrap-test.yaml").write_text(yaml.safe_dump({**doc, **change}))
    code, _, err = _run(capsys, "test", str(path))
    assert code == 2 and err.startswith(f"error: {path / 'autowrap-test.yaml'}: ")
    assert field in err and len(err.splitlines()) == 1


def test_a_directory_without_tests_exits_2(tmp_path, capsys):
    code, _, err = _run(capsys, "test", str(tmp_path))
    assert code == 2 and "no autowrap-test.yaml" in err
