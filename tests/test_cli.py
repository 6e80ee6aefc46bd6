"""The ``autowrap`` command line: render, check and explain, their exit codes and formats."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
import yaml

from tests.builders import pod, policy, volcano_job
from webhook.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
POLICIES = str(REPO / "policies")
# These tests are about the command's mechanics, shown on the AppWrapper (the redirect view);
# the adopt-mode view has tests of its own below.
REDIRECT = ("--mode", "Redirect")


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
    code, out, err = _run(capsys, "render", *REDIRECT, _write(tmp_path, GOOD), "--policy", POLICIES)
    assert code == 0 and err == ""
    docs = list(yaml.safe_load_all(out))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [("AppWrapper", "good")]


def test_a_rejection_exits_1_with_one_line_per_violation_on_stderr(tmp_path, capsys):
    bad = BAD.clone().env("w", "NNODES", "7")
    code, out, err = _run(capsys, "render", *REDIRECT, _write(tmp_path, bad), "--policy", POLICIES)
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
        "Job default/bad: rejected (1 error)",
    ]


def test_check_of_valid_input_exits_0(tmp_path, capsys):
    code, out, _ = _run(capsys, "check", _write(tmp_path, GOOD), "--policy", POLICIES)
    assert code == 0 and "would be wrapped" in out


def test_stdin_is_read_for_dash(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(GOOD.build())))
    code, out, _ = _run(capsys, "render", *REDIRECT, "-", "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out)["kind"] == "AppWrapper"


def test_json_output_is_one_object_for_one_document(tmp_path, capsys):
    code, out, _ = _run(
        capsys, "render", *REDIRECT, _write(tmp_path, GOOD), "-o", "json", "--policy", POLICIES
    )
    assert code == 0 and json.loads(out)["kind"] == "AppWrapper"


def test_json_output_is_a_list_for_several_documents(tmp_path, capsys):
    other = volcano_job("other").queue("q1")
    path = _write(tmp_path, GOOD, other)
    code, out, _ = _run(capsys, "render", *REDIRECT, path, "-o", "json", "--policy", POLICIES)
    value = json.loads(out)
    assert code == 0
    assert (value["kind"], [i["metadata"]["name"] for i in value["items"]]) == (
        "List",
        ["good", "other"],
    )


def test_multi_document_input_renders_every_document_in_order(tmp_path, capsys):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}
    path = _write(tmp_path, GOOD, cm, pod("p").wrap().queue("q1"))
    code, out, _ = _run(capsys, "render", *REDIRECT, path, "--policy", POLICIES)
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
    code, out, _ = _run(capsys, "render", *REDIRECT, _write(tmp_path, listed), "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out)["kind"] == "AppWrapper"


def test_namespace_flag_applies_to_objects_without_one(tmp_path, capsys):
    path = _write(tmp_path, volcano_job("j").task("w", replicas=2))
    code, out, _ = _run(
        capsys, "render", *REDIRECT, path, "--namespace", "team-a", "--policy", POLICIES
    )
    result = yaml.safe_load(out)
    assert code == 0
    assert result["metadata"]["namespace"] == "team-a"
    assert result["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a-queue"


def test_policy_flag_takes_a_single_file(tmp_path, capsys):
    pol = tmp_path / "p.yaml"
    pol.write_text(policy("only").queues(default="from-file").yaml())
    path = _write(tmp_path, volcano_job("j"))
    code, out, _ = _run(capsys, "render", *REDIRECT, path, "--policy", str(pol))
    assert code == 0
    assert yaml.safe_load(out)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "from-file"


def test_an_object_that_is_not_a_candidate_is_printed_unchanged(tmp_path, capsys):
    plain = volcano_job("plain").task("w", replicas=2)
    code, out, _ = _run(capsys, "render", *REDIRECT, _write(tmp_path, plain), "--policy", POLICIES)
    assert code == 0 and yaml.safe_load(out) == plain.build()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such file or directory", id="a file that does not exist"),
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
    code, _, err = _run(capsys, "render", *REDIRECT, _write(tmp_path, GOOD), "--policy", str(pol))
    assert code == 2 and str(pol) in err and "spec.wrap" in err


def test_warnings_are_printed_but_do_not_fail(tmp_path, capsys):
    warned = GOOD.clone().spec(minSuccess=1)
    code, out, err = _run(
        capsys, "render", *REDIRECT, _write(tmp_path, warned), "--policy", POLICIES
    )
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
    assert lines[0] == "Job default/good: wrapped into AppWrapper default/good"
    assert lines[1].startswith("  policy 'default'")
    assert lines[2].startswith("  mode: Adopt (autowrap's default), enforcement: Enforce (policy")
    assert lines[3].startswith("Job default/plain: unchanged: no label autowrap.io/wrap=true")
    assert lines[4].startswith("  policy 'default'")
    assert lines[5].startswith("  mode: Adopt")
    assert len(lines) == 6


def test_render_explain_reports_on_stderr(tmp_path, capsys):
    args = ["render", *REDIRECT, _write(tmp_path, GOOD), "--policy", POLICIES, "--explain"]
    code, out, err = _run(capsys, *args)
    assert code == 0 and out
    assert err.splitlines()[0] == "explain: Job default/good: wrapped into AppWrapper default/good"
    assert err.count("policy 'default'") == 1


def test_python_dash_m_webhook_works():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "webhook", "render", *REDIRECT, "-", "--policy", POLICIES],
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


# --- explain and check tell the same story (issue 13, item 1) --------------------------------


def test_explain_of_a_rejected_job_says_rejected_and_exits_1(tmp_path, capsys):
    code, out, _ = _run(capsys, "explain", _write(tmp_path, BAD), "--policy", POLICIES)
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith("Job default/bad: rejected: 1 error")
    assert lines[1].startswith("  error: spec.tasks[0].template.spec.containers[0].env[0]: RANK")
    assert "wrapped" not in out
    assert [line for line in lines if "policy 'default'" in line] == [
        lines[2],
        "  mode: Adopt (autowrap's default), enforcement: Enforce (policy 'default') "
        "(autowrap explain -n default lists every value and its policy)",
    ]
    assert lines[2].startswith("  policy 'default'")


def test_check_explain_never_says_wrapped_for_a_rejected_job(tmp_path, capsys):
    args = ["check", _write(tmp_path, BAD), "--policy", POLICIES, "--explain"]
    code, _, err = _run(capsys, *args)
    assert code == 1 and "wrapped" not in err
    assert "explain: Job default/bad: rejected: 1 error" in err


# --- namespace labels for render and check (item 2) ------------------------------------------

RESEARCH = ["-n", "lab", "-l", "autowrap.io/tier=research", "--policy", POLICIES]


def test_render_takes_namespace_labels_for_label_selected_policies(tmp_path, capsys):
    code, out, _ = _run(
        capsys, "render", *REDIRECT, _write(tmp_path, volcano_job("j").wrap()), *RESEARCH
    )
    labels = yaml.safe_load(out)["metadata"]["labels"]
    assert code == 0 and labels["kueue.x-k8s.io/queue-name"] == "research"


def test_check_takes_namespace_labels_and_audits(tmp_path, capsys):
    code, out, err = _run(capsys, "check", _write(tmp_path, BAD), *RESEARCH)
    assert code == 0 and "would be wrapped" in out
    assert err.startswith("warning: Job lab/bad: (audit) spec.tasks[0]")


def test_a_label_must_be_key_equals_value(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["check", _write(tmp_path, GOOD), "-l", "novalue"])
    assert info.value.code == 2 and "KEY=VALUE" in capsys.readouterr().err


# --- which policy set is in use (item 3) -----------------------------------------------------


def test_outside_a_checkout_the_default_install_s_set_is_used_and_named(
    tmp_path, capsys, monkeypatch
):
    """The copy of deploy/base/policies shipped inside the package: what a cluster installed
    from deploy/ applies, so a job in namespace ml gets the default's fault-tolerance."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOWRAP_POLICY", raising=False)
    code, out, err = _run(capsys, "render", *REDIRECT, _write(tmp_path, GOOD), "-n", "ml")
    assert code == 0
    assert err == (
        "note: no --policy given: using the policy set autowrap installs by default (default); "
        "--policy-from-cluster judges with your cluster's policies, --policy PATH with others\n"
    )
    annotations = yaml.safe_load(out)["metadata"]["annotations"]
    assert annotations["workload.codeflare.dev.appwrapper/warmupGracePeriodDuration"] == "5m"


def test_the_shipped_copy_is_the_set_deploy_installs():
    from webhook.shell import policyfiles

    installed = sorted((REPO / "deploy" / "base" / "policies").glob("*.yaml"))
    assert [(f"{p.name} (shipped with autowrap)", p.read_text()) for p in installed] == (
        policyfiles.packaged()
    ), "webhook/shell/policies differs from deploy/base/policies: copy deploy/base/policies over"


def test_in_a_checkout_the_set_deploy_installs_is_used_not_the_examples(
    tmp_path, capsys, monkeypatch
):
    """From the repository, team-a is an example in policies/: no installed cluster applies
    it, so a job in team-a is judged by the default (opt-in: a plain job is left alone)."""
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("AUTOWRAP_POLICY", raising=False)
    plain = volcano_job("plain").task("w", replicas=1)
    code, out, err = _run(capsys, "check", _write(tmp_path, plain), "-n", "team-a")
    assert code == 0 and "left unchanged" in out and "policy 'default' wraps only on request" in out
    assert err.startswith(
        "note: no --policy given: using ./deploy/base/policies (default), the set "
    )


def test_an_implicit_policies_directory_is_not_used(tmp_path, capsys, monkeypatch):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "only.yaml").write_text(policy("only").yaml())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOWRAP_POLICY", raising=False)
    _, _, err = _run(capsys, "explain", "-n", "ml")
    assert "(default)" in err and "only" not in err


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_policy_the_user_points_at_is_used_silently(tmp_path, capsys, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    args = ["check", _write(tmp_path, GOOD)]
    if how == "flag":
        args += ["--policy", POLICIES]
    else:
        monkeypatch.setenv("AUTOWRAP_POLICY", POLICIES)
    code, _, err = _run(capsys, *args)
    assert code == 0 and err == ""


# --- all or nothing on stdout (item 6) -------------------------------------------------------


def test_render_prints_nothing_when_any_document_is_rejected(tmp_path, capsys):
    code, out, err = _run(
        capsys, "render", *REDIRECT, _write(tmp_path, GOOD, BAD), "--policy", POLICIES
    )
    assert code == 1 and out == ""
    assert "note: nothing printed: 1 of 2 documents are rejected" in err and "--partial" in err


def test_render_partial_prints_the_accepted_documents(tmp_path, capsys):
    path = _write(tmp_path, GOOD, BAD)
    code, out, _ = _run(capsys, "render", *REDIRECT, path, "--partial", "--policy", POLICIES)
    assert code == 1
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["good"]


# --- the per-pod view (item 7) ---------------------------------------------------------------


def test_render_pods_prints_one_row_per_pod_resolved(capsys):
    example = str(REPO / "examples" / "master-worker.yaml")
    code, out, _ = _run(capsys, "render", *REDIRECT, "--pods", example, "--policy", POLICIES)
    rows = [line.split() for line in out.splitlines()]
    assert code == 0
    assert rows[0] == ["Job", "ml/mw-train"]
    assert rows[1] == list(cli.POD_COLUMNS)
    master = "mw-train-master-0.mw-train:23456"
    assert rows[2:] == [
        ["mw-train-master-0", "master", "0", master, "4", "8", "32", "no"],
        ["mw-train-worker-0", "worker", "1", master, "4", "8", "32", "no"],
        ["mw-train-worker-1", "worker", "2", master, "4", "8", "32", "no"],
        ["mw-train-worker-2", "worker", "3", master, "4", "8", "32", "no"],
    ]


def test_render_pods_shows_helper_tasks_outside_the_world(tmp_path, capsys):
    job = (
        volcano_job("j")
        .queue("q1")
        .task("worker", replicas=2, gpus=4)
        .task("ps", replicas=1)
        .annotate("autowrap.io/exclude-tasks", "ps")
    )
    code, out, _ = _run(
        capsys, "render", *REDIRECT, "--pods", _write(tmp_path, job), "--policy", POLICIES
    )
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert code == 0
    assert rows["j-worker-1"][2:] == ["1", "j-worker-0.j:23456", "2", "4", "8", "no"]
    assert rows["j-ps-0"][2:] == ["-", "j-worker-0.j:23456", "-", "-", "-", "no"]


# --- machine-readable checks (item 9) --------------------------------------------------------


def test_check_json_reports_every_document(tmp_path, capsys):
    warned = GOOD.clone().spec(minSuccess=1)
    path = _write(tmp_path, warned, BAD)
    code, out, err = _run(capsys, "check", path, "-o", "json", "--policy", POLICIES)
    docs = json.loads(out)["documents"]
    assert code == 1 and err == ""
    assert [(d["name"], d["result"], d["policy"]) for d in docs] == [
        ("good", "wrapped", "default"),
        ("bad", "rejected", "default"),
    ]
    assert docs[0]["appwrapper"] == "default/good" and docs[0]["violations"] == []
    assert [w["path"] for w in docs[0]["warnings"]] == ["spec.minSuccess"]
    assert docs[1]["violations"][0]["path"] == "spec.tasks[0].template.spec.containers[0].env[0]"
    assert "RANK is set by autowrap" in docs[1]["violations"][0]["message"]


def test_check_json_marks_audited_violations(tmp_path, capsys):
    code, out, _ = _run(capsys, "check", _write(tmp_path, BAD), "-o", "json", *RESEARCH)
    (doc,) = json.loads(out)["documents"]
    assert code == 0 and doc["result"] == "wrapped" and doc["violations"] == []
    assert doc["warnings"][0]["audit"] is True


@pytest.mark.parametrize(
    ("where", "policy"),
    [
        pytest.param(("-n", "ml", "--policy", POLICIES), "default", id="the catch-all"),
        pytest.param(RESEARCH, "research-audit", id="an audit policy: still rejected"),
    ],
)
def test_check_json_names_the_policy_of_a_document_kubectl_refuses(tmp_path, capsys, where, policy):
    typo = GOOD.clone().spec(schedulerNmae="volcano")
    code, out, _ = _run(capsys, "check", _write(tmp_path, typo), "-o", "json", *where)
    (doc,) = json.loads(out)["documents"]
    assert code == 1 and doc["result"] == "rejected" and doc["policy"] == policy
    assert [v["path"] for v in doc["violations"]] == ["spec.schedulerNmae"]
    assert doc["reason"].startswith("rejected: 1 error")


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        pytest.param([GOOD], 0, id="clean: 0"),
        pytest.param([GOOD.clone().spec(minSuccess=1)], 3, id="warnings only: N"),
        pytest.param([GOOD.clone().spec(minSuccess=1), BAD], 1, id="a rejection: 1"),
    ],
)
def test_warn_exit_code(tmp_path, capsys, docs, expected):
    path = _write(tmp_path, *docs)
    for command in ("check", "render"):
        code, _, _ = _run(capsys, command, path, "--warn-exit-code", "3", "--policy", POLICIES)
        assert code == expected


# --- start-up and usage errors, help, colour (item 11) ---------------------------------------


def _subcommands():
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_is_documented_with_its_default(command):
    for action in _subcommands()[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{command} {action.dest} has no help"
        if action.option_strings and not action.required:
            assert "default" in action.help, f"{command} {action.option_strings[0]}"


def test_a_port_in_use_is_one_line_without_a_traceback(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(
            ["serve", "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0"]
        )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "Traceback" not in err
    assert len(lines) == 1 and "address already in use" in lines[0] and "--port" in lines[0]


def test_an_unusable_certificate_is_one_line(tmp_path, capsys):
    (tmp_path / "tls.crt").write_text("junk")
    (tmp_path / "tls.key").write_text("junk")
    code = cli.main(["serve", "--port", "0", "--metrics-port", "0", "--cert-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"error: the serving certificate in {tmp_path} cannot be used" in err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_errors_are_coloured_on_a_terminal_unless_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = _Terminal()
    cli.say(terminal, "error", "x")
    assert terminal.getvalue() == "\x1b[1;31merror\x1b[0m: x\n"
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Terminal()
    cli.say(plain, "error", "x")
    assert plain.getvalue() == "error: x\n"


def test_never_colour_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    stream = io.StringIO()
    cli.say(stream, "warning", "x")
    assert stream.getvalue() == "warning: x\n"


def test_render_in_adopt_mode_prints_the_stored_object_and_the_appwrapper_to_come(tmp_path, capsys):
    code, out, _ = _run(capsys, "render", _write(tmp_path, GOOD), "--policy", POLICIES)

    assert code == 0
    stored, appwrapper = list(yaml.safe_load_all(out))
    assert stored["kind"] == GOOD.build()["kind"]
    assert stored["metadata"]["labels"]["autowrap.io/adoption"] == "pending"
    assert "autowrap.io/adoption" in stored["metadata"]["finalizers"]
    assert appwrapper["kind"] == "AppWrapper"
    assert appwrapper["metadata"]["annotations"]["kueue.x-k8s.io/admission-gated-by"]


def test_render_pods_in_adopt_mode_shows_every_pod_gated_until_admitted(tmp_path, capsys):
    example = str(REPO / "examples" / "master-worker.yaml")

    code, out, _ = _run(capsys, "render", "--pods", example, "--policy", POLICIES)

    rows = [line for line in out.splitlines() if line.startswith("mw-train-")]
    assert code == 0 and len(rows) == 4
    assert all("yes (autowrap.io/admission)" in row for row in rows)


# --- names: required, and generated ones are placeholders --------------------------------------


def _unnamed(builder):
    obj = builder.build()
    del obj["metadata"]["name"]
    return obj


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(_unnamed(volcano_job("x").queue("q1").task("w", replicas=1)), id="job"),
        pytest.param(_unnamed(pod("x").queue("q1").wrap()), id="pod"),
    ],
)
def test_an_object_with_neither_name_nor_generate_name_is_rejected(tmp_path, capsys, obj):
    code, out, err = _run(capsys, "check", _write(tmp_path, obj), "--policy", POLICIES)
    assert code == 1
    assert f"{obj['kind']} default/<unnamed>: rejected (1 error)" in out
    assert "metadata.name: required" in err and "name or generateName is required" in err


def _generated(builder, prefix):
    obj = _unnamed(builder)
    obj["metadata"]["generateName"] = prefix
    return obj


def test_generated_names_are_marked_as_placeholders(tmp_path, capsys):
    path = _write(tmp_path, _generated(volcano_job("x").queue("q1").task("w", replicas=2), "ft-"))
    code, out, _ = _run(capsys, "render", "--pods", path, "--policy", POLICIES)
    assert code == 0
    assert "placeholder names: the object has generateName 'ft-'" in out
    code, out, _ = _run(capsys, "check", path, "--policy", POLICIES)
    assert code == 0 and out.startswith("Job default/ft-<generated>: would be wrapped")
    assert "a placeholder name" in out


def test_a_named_object_s_pods_are_not_placeholders(tmp_path, capsys):
    code, out, _ = _run(capsys, "render", "--pods", _write(tmp_path, GOOD), "--policy", POLICIES)
    assert code == 0 and "placeholder" not in out


def test_render_pods_json(tmp_path, capsys):
    job = GOOD.clone().env("w", "URL", "tcp://$(MASTER_ADDR):$(MASTER_PORT)")
    path = _write(tmp_path, job)
    code, out, _ = _run(capsys, "render", "--pods", "-o", "json", path, "--policy", POLICIES)
    assert code == 0
    (table,) = json.loads(out)["workloads"]
    assert table["workload"] == "Job default/good" and table["placeholderName"] is False
    assert [(p["name"], p["nodeRank"], p["worldSize"]) for p in table["pods"]] == [
        ("good-w-0", "0", "2"),
        ("good-w-1", "1", "2"),
    ]
    assert table["pods"][1]["expandedEnv"] == {"URL": "tcp://good-w-0.good:23456"}


def test_no_output_speaks_of_violations(tmp_path, capsys):
    audited = volcano_job("aud").queue("q1").task("w", replicas=1).env("w", "RANK", "1")
    path = _write(tmp_path, BAD)
    for command in (
        ["check", path],
        ["render", path],
        ["explain", path],
        ["check", "--explain", path],
    ):
        _, out, err = _run(capsys, *command, "--policy", POLICIES)
        assert "violation" not in out + err
    audit_policy = tmp_path / "audit.yaml"
    audit_policy.write_text(policy("audit").audit().yaml())
    _, out, err = _run(
        capsys,
        "check",
        "--explain",
        _write(tmp_path, audited, name="a.yaml"),
        "--policy",
        str(audit_policy),
    )
    assert "reported as warnings" in err and "violation" not in out + err


# --- input as kubectl apply -f reads it ---------------------------------------------------------


def _dump_to(path: Path, *docs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all([d.build() if hasattr(d, "build") else d for d in docs]))
    return path


def _named(name):
    return volcano_job(name).queue("q1").task("w", replicas=1)


def test_check_reads_directories_and_several_files_in_order(tmp_path, capsys):
    manifests = tmp_path / "manifests"
    _dump_to(manifests / "b.yml", _named("b"))
    _dump_to(manifests / "a.yaml", _named("a1"), _named("a2"))
    (manifests / "c.json").write_text(json.dumps(_named("c").build()))
    (manifests / "notes.txt").write_text("not a manifest")
    _dump_to(manifests / "nested" / "deeper.yaml", _named("nested"))
    extra = _dump_to(tmp_path / "extra.yaml", _named("extra"))
    code, out, _ = _run(capsys, "check", str(manifests), str(extra), "--policy", POLICIES)
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "Job default/a1",
        "Job default/a2",
        "Job default/b",
        "Job default/c",
        "Job default/extra",
    ]


def test_the_upgrade_guide_s_check_command_works(tmp_path, capsys, monkeypatch):
    # docs/upgrading.md: `autowrap check --policy policies/ manifests/`
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "default.yaml").write_text(
        (REPO / "policies/default.yaml").read_text()
    )
    _dump_to(tmp_path / "manifests" / "job.yaml", _named("job"))
    assert (
        "autowrap check --policy policies/ manifests/" in (REPO / "docs/upgrading.md").read_text()
    )
    code, out, err = _run(capsys, "check", "--policy", "policies/", "manifests/")
    assert code == 0 and out.startswith("Job default/job: would be wrapped"), err


@pytest.mark.parametrize(
    "content",
    [pytest.param("", id="an empty file"), pytest.param("---\n# c\n---\n", id="comments")],
)
def test_no_objects_is_an_error(tmp_path, capsys, content):
    path = tmp_path / "empty.yaml"
    path.write_text(content)
    for command in ("render", "check"):
        code, out, err = _run(capsys, command, str(path), "--policy", POLICIES)
        assert code == 2 and out == ""
        assert err.startswith("error: no objects passed") and str(path) in err


def test_an_empty_directory_is_an_error(tmp_path, capsys):
    (tmp_path / "only.txt").write_text("x")
    code, _, err = _run(capsys, "check", str(tmp_path), "--policy", POLICIES)
    assert code == 2 and "no objects passed" in err and "*.yaml" in err


def test_invalid_yaml_is_one_line_with_file_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n   labels: {a: b}\n")
    code, _, err = _run(capsys, "check", str(path), "--policy", POLICIES)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}:5:")
    assert "not valid YAML" in err


def test_namespace_flag_that_disagrees_with_the_document_is_an_error(tmp_path, capsys):
    path = _write(tmp_path, volcano_job("j", ns="ml").queue("q1").task("w", replicas=1))
    for command in ("render", "check", "explain"):
        code, out, err = _run(capsys, command, path, "-n", "team-b", "--policy", POLICIES)
        assert code == 2 and out == ""
        assert "'ml'" in err and "'team-b'" in err and err.count("\n") == 1
    code, out, _ = _run(capsys, "check", path, "-n", "ml", "--policy", POLICIES)
    assert code == 0 and out.startswith("Job ml/j")


# --- kubeconfig problems are one line ---------------------------------------------------------


def test_status_with_a_missing_kubeconfig_is_one_line(tmp_path, capsys):
    missing = tmp_path / "nope"
    code, out, err = _run(capsys, "status", "vcjob/x", "--kubeconfig", str(missing))
    assert code == 2 and out == ""
    assert err == f"error: {missing}: no such file; pass --kubeconfig with your kubeconfig\n"


def test_status_without_any_kubeconfig_names_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = _run(capsys, "status", "vcjob/x")
    assert code == 2 and err.count("\n") == 1
    assert f"$KUBECONFIG ({tmp_path / 'nope'}) does not exist" in err


@pytest.mark.parametrize("command", [["status", "vcjob/x"], ["serve", "--port", "0"]])
def test_a_broken_kubeconfig_is_one_line(tmp_path, capsys, command):
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nclusters: [\n")
    code, out, err = _run(capsys, *command, "--kubeconfig", str(broken))
    assert code == 2 and out == ""
    assert err.startswith(f"error: kubeconfig {broken}:3:") and err.count("\n") == 1


def test_the_client_s_config_not_found_warning_is_silenced(capsys):
    from kubernetes.aio.config import kube_config as aio_kube_config
    from kubernetes.config import kube_config

    cli.quiet_kube_client()
    for module in (kube_config, aio_kube_config):
        module.KubeConfigMerger("/nonexistent/kubeconfig")
    assert "Config not found" not in capsys.readouterr().err


def test_manifests_parse_alike_with_libyaml_and_without(monkeypatch):
    from webhook.cli import inputs

    if yaml.__with_libyaml__:
        assert inputs.LOADER is yaml.CSafeLoader
    files = sorted((REPO / "examples").rglob("*.yaml")) + sorted(
        (REPO / "tests/golden").rglob("*.yaml")
    )
    fast = [d.obj for f in files for d in inputs.read_documents(str(f), io.StringIO())]
    monkeypatch.setattr(inputs, "LOADER", yaml.SafeLoader)
    slow = [d.obj for f in files for d in inputs.read_documents(str(f), io.StringIO())]
    assert fast == slow and len(fast) > 40


# --- certs never silently replaces a CA ---------------------------------------------------------


def test_certs_refuses_to_overwrite_an_existing_ca_unless_forced(tmp_path, capsys):
    out_dir = tmp_path / "pki"
    code, bundle, _ = _run(capsys, "certs", "--out", str(out_dir))
    assert code == 0 and bundle.strip()
    ca_before = (out_dir / "ca.crt").read_bytes()
    code, out, err = _run(capsys, "certs", "--out", str(out_dir))
    assert code == 2 and out == ""
    assert "already holds ca.crt, ca.key, tls.crt, tls.key" in err and "--force" in err
    assert (out_dir / "ca.crt").read_bytes() == ca_before
    code, bundle_after, _ = _run(capsys, "certs", "--out", str(out_dir), "--force")
    assert code == 0 and bundle_after != bundle
    assert (out_dir / "ca.crt").read_bytes() != ca_before
