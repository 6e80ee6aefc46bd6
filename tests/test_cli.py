"""The ``autowrap`` command line: render, check and explain, their exit codes and formats."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from tests.builders import pod, policy, volcano_job
from webhook import cli

REPO = Path(__file__).resolve().parents[1]
POLICIES = str(REPO / "policies")


def _write(tmp_path: Path, *docs, name="in.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all([d.build() if hasattr(d, "build") else d for d in docs]))
    return str(path)


def _run(capsys, *args):
    capsys.readouterr()
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


GOOD = volcano_job("good").queue("q1").task("w", replicas=2)
BAD = volcano_job("bad").queue("q1").task("w", replicas=2).env("w", "RANK", "1")


def test_render_prints_the_appwrapper_and_exits_0(tmp_path, capsys):
    code, out, err = _run(capsys, "render", _write(tmp_path, GOOD), "--policy", POLICIES)
    assert code == 0 and err == ""
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("AppWrapper", "good")]


def test_a_rejection_exits_1_with_one_line_per_violation_on_stderr(tmp_path, capsys):
    bad = BAD.clone().env("w", "NNODES", "7")
    code, out, err = _run(capsys, "render", _write(tmp_path, bad), "--policy", POLICIES)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert [line.split(": ")[2] for line in lines] == [
        "spec.tasks[0].template.spec.containers[0].env[0]",
        "spec.tasks[0].template.spec.containers[0].env[1]",
    ]
    assert all(line.startswith("error: Job default/bad: ") for line in lines)


def test_check_validates_without_rendering(tmp_path, capsys):
    code, out, _ = _run(capsys, "check", _write(tmp_path, GOOD, BAD), "--policy", POLICIES)
    assert code == 1
    assert out.splitlines() == [
        "Job default/good: would be wrapped into AppWrapper default/good",
        "Job default/bad: rejected (1 violation(s))",
    ]


def test_check_of_valid_input_exits_0(tmp_path, capsys):
    code, out, _ = _run(capsys, "check", _write(tmp_path, GOOD), "--policy", POLICIES)
    assert code == 0 and "would be wrapped" in out


def test_stdin_is_read_for_dash(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(GOOD.build())))
    code, out, _ = _run(capsys, "render", "-", "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out)["kind"] == "AppWrapper"


def test_json_output_is_one_object_for_one_document(tmp_path, capsys):
    code, out, _ = _run(
        capsys, "render", _write(tmp_path, GOOD), "-o", "json", "--policy", POLICIES
    )
    assert code == 0 and json.loads(out)["kind"] == "AppWrapper"


def test_json_output_is_a_list_for_several_documents(tmp_path, capsys):
    other = volcano_job("other").queue("q1")
    path = _write(tmp_path, GOOD, other)
    code, out, _ = _run(capsys, "render", path, "-o", "json", "--policy", POLICIES)
    value = json.loads(out)
    assert code == 0
    assert (value["kind"], [i["metadata"]["name"] for i in value["items"]]) == (
        "List",
        ["good", "other"],
    )


def test_multi_document_input_renders_every_document_in_order(tmp_path, capsys):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}
    path = _write(tmp_path, GOOD, cm, pod("p").wrap().queue("q1"))
    code, out, _ = _run(capsys, "render", path, "--policy", POLICIES)
    docs = list(yaml.safe_load_all(out))
    assert code == 0
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("AppWrapper", "good"),
        ("ConfigMap", "cfg"),
        ("AppWrapper", "p"),
    ]
    assert docs[1] == cm


def test_a_kubernetes_list_is_expanded(tmp_path, capsys):
    listed = {"apiVersion": "v1", "kind": "List", "items": [GOOD.build()]}
    code, out, _ = _run(capsys, "render", _write(tmp_path, listed), "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out)["kind"] == "AppWrapper"


def test_namespace_flag_applies_to_objects_without_one(tmp_path, capsys):
    path = _write(tmp_path, volcano_job("j").task("w", replicas=2))
    code, out, _ = _run(capsys, "render", path, "--namespace", "team-a", "--policy", POLICIES)
    result = yaml.safe_load(out)
    assert code == 0
    assert result["metadata"]["namespace"] == "team-a"
    assert result["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"


def test_the_objects_own_namespace_wins_over_the_flag(tmp_path, capsys):
    path = _write(tmp_path, volcano_job("j", ns="ml").queue("q1"))
    code, out, _ = _run(capsys, "render", path, "--namespace", "team-a", "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out)["metadata"]["namespace"] == "ml"


def test_policy_flag_takes_a_single_file(tmp_path, capsys):
    pol = tmp_path / "p.yaml"
    pol.write_text(policy("only").queues(default="from-file").yaml())
    path = _write(tmp_path, volcano_job("j"))
    code, out, _ = _run(capsys, "render", path, "--policy", str(pol))
    assert code == 0
    assert yaml.safe_load(out)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "from-file"


def test_an_object_that_is_not_a_candidate_is_printed_unchanged(tmp_path, capsys):
    plain = volcano_job("plain").task("w", replicas=2)
    code, out, _ = _run(capsys, "render", _write(tmp_path, plain), "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out) == plain.build()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read", id="a file that does not exist"),
        pytest.param("a: [1,\n", "not valid YAML", id="text that is not YAML"),
        pytest.param("- 1\n- 2\n", "is not a Kubernetes object", id="a document that is a list"),
        pytest.param("metadata: {name: x}\n", "has no apiVersion and kind", id="no kind"),
        pytest.param(b"\xff\xfe\x00", "not UTF-8", id="binary input"),
    ],
)
def test_unreadable_input_exits_2_with_a_reason(tmp_path, capsys, content, message):
    path = tmp_path / "input.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    for command in ("render", "check"):
        code, out, err = _run(capsys, command, str(path), "--policy", POLICIES)
        assert code == 2 and out == ""
        assert err.startswith(f"error: {path}") and message in err


def test_a_broken_policy_exits_2(tmp_path, capsys):
    pol = tmp_path / "p.yaml"
    pol.write_text(policy().set(wrap="Sometimes").yaml())
    code, _, err = _run(capsys, "render", _write(tmp_path, GOOD), "--policy", str(pol))
    assert code == 2 and str(pol) in err and "spec.wrap" in err


def test_warnings_are_printed_but_do_not_fail(tmp_path, capsys):
    warned = GOOD.clone().spec(minSuccess=1)
    code, out, err = _run(capsys, "render", _write(tmp_path, warned), "--policy", POLICIES)
    assert code == 0 and out
    assert len(err.splitlines()) == 1
    assert err.startswith("warning: Job default/good: spec.minSuccess: ")


def test_explain_names_the_policy_for_a_namespace(capsys):
    code, out, _ = _run(capsys, "explain", "--namespace", "team-a", "--policy", POLICIES)
    assert code == 0 and out.startswith("policy 'team-a'") and "names 'team-a' explicitly" in out


def test_explain_uses_namespace_labels(capsys):
    args = ["explain", "-n", "lab", "-l", "autowrap.io/tier=research", "--policy", POLICIES]
    code, out, _ = _run(capsys, *args)
    assert code == 0 and out.startswith("policy 'research-audit'")


def test_explain_says_when_nothing_covers_a_namespace(capsys):
    code, out, _ = _run(capsys, "explain", "-n", "kube-system", "--policy", POLICIES)
    assert code == 0 and "no policy covers" in out


def test_explain_of_a_file_says_what_happens_to_each_document(tmp_path, capsys):
    plain = volcano_job("plain")
    code, out, _ = _run(capsys, "explain", _write(tmp_path, GOOD, plain), "--policy", POLICIES)
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith("Job default/good: wrap: ")
    assert lines[2].startswith("Job default/plain: pass: ")


def test_render_explain_reports_on_stderr(tmp_path, capsys):
    args = ["render", _write(tmp_path, GOOD), "--policy", POLICIES, "--explain"]
    code, out, err = _run(capsys, *args)
    assert code == 0 and out
    assert err.startswith("explain: Job default/good: wrap: ") and "policy 'default'" in err


def test_python_dash_m_webhook_works():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "webhook", "render", "-", "--policy", POLICIES],
        input=yaml.safe_dump(GOOD.build()),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["kind"] == "AppWrapper"


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["render"])
    assert info.value.code == 2
