"""The offline CLI answers as the cluster would: what kubectl and the API server refuse before
any webhook, what the webhooks' selectors never send to autowrap, and the input as kubectl
reads it (kustomizations, typed lists, tabs)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builders import pod, volcano_job
from webhook.cli import main as cli
from webhook.shell import certs

REPO = Path(__file__).resolve().parents[1]
POLICIES = str(REPO / "policies")
ALWAYS = "autowrap.io/wrap=Always"


def _run(capsys, *args):
    capsys.readouterr()
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _file(tmp_path: Path, text: str, name: str = "in.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _dump(tmp_path: Path, *docs, name: str = "in.yaml") -> str:
    built = [d.build() if hasattr(d, "build") else d for d in docs]
    return _file(tmp_path, yaml.safe_dump_all(built), name)


def _lines(err: str, level: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(f"{level}: ")]


TORCHRUN = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: llama-ft
  namespace: ml
  labels:
{labels}
  annotations:
{annotations}
spec:
{spec}  tasks:
    - name: master
      replicas: 1
      template: {{spec: {{containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: 4}}}}}}]}}}}
    - name: worker
      {replicas}: 2
      template: {{spec: {{containers: [{{name: c, image: i, resources: {{limits: {{nvidia.com/gpu: 4}}}}}}]}}}}
"""


def _torchrun(
    labels: str = '    autowrap.io/wrap: "true"\n    kueue.x-k8s.io/queue-name: gpu-queue',
    annotations: str = '    autowrap.io/master-port: "29500"',
    spec: str = "",
    replicas: str = "replicas",
) -> str:
    return TORCHRUN.format(labels=labels, annotations=annotations, spec=spec, replicas=replicas)


# --- T01: label and annotation values YAML reads as booleans or numbers ----------------------


def test_t01_an_unquoted_label_or_annotation_is_refused_at_its_field_as_kubectl_refuses_it(
    tmp_path, capsys
):
    text = _torchrun(
        labels="    autowrap.io/wrap: true\n    kueue.x-k8s.io/queue-name: gpu-queue",
        annotations="    autowrap.io/nproc-per-node: 8\n    autowrap.io/master-port: 29500",
    )
    code, out, err = _run(capsys, "check", _file(tmp_path, text), "--policy", POLICIES)
    assert code == 1
    assert out == f"Job ml/llama-ft: rejected (3 errors{BEFORE}\n"
    errors = _lines(err, "error")
    assert [line.split(": ")[2] for line in errors] == [
        "metadata.labels[autowrap.io/wrap]",
        "metadata.annotations[autowrap.io/nproc-per-node]",
        "metadata.annotations[autowrap.io/master-port]",
    ]
    assert "cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type " in err
    assert 'quote it: "true"' in errors[0] and 'quote it: "8"' in errors[1]
    # No verdict built on the values read as absent: render prints nothing.
    code, out, _ = _run(capsys, "render", "--pods", _file(tmp_path, text), "--policy", POLICIES)
    assert code == 1 and out == ""


def test_t01_quoted_values_pass_and_are_used(tmp_path, capsys):
    text = _torchrun(annotations='    autowrap.io/nproc-per-node: "8"')
    code, out, err = _run(capsys, "render", "--pods", _file(tmp_path, text), "--policy", POLICIES)
    assert code == 0 and _lines(err, "error") == []
    assert " 8 " in out.splitlines()[2]  # NPROC column


# --- T02: fields the Volcano Job CRD does not name -------------------------------------------

BEFORE = (
    "; kubectl and the API server refuse it before any webhook sees it; autowrap judges it once "
    "these are fixed)"
)


def test_every_field_kubectl_refuses_is_said_at_once_container_fields_included(tmp_path, capsys):
    """The strict decoding that refuses a misspelt Job field refuses a misspelt container field
    of its pod template in the same answer: all three in one run, not in rounds."""
    job = volcano_job("typo").queue("q1").task("master", replicas=1).task("worker", replicas=2)
    obj = job.build()
    obj["spec"]["schedulerNmae"] = "volcano"
    obj["spec"]["tasks"][1]["replica"] = obj["spec"]["tasks"][1].pop("replicas")
    obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resource"] = {"limits": {}}
    code, out, err = _run(capsys, "check", _dump(tmp_path, obj), "-n", "ml", "--policy", POLICIES)
    assert code == 1 and out == f"Job ml/typo: rejected (3 errors{BEFORE}\n"
    paths = [line.split(": ")[2] for line in _lines(err, "error")]
    assert paths == [
        "spec.schedulerNmae",
        "spec.tasks[1].replica",
        "spec.tasks[0].template.spec.containers[0].resource",
    ]


def test_a_container_field_alone_is_said_with_autowrap_s_own_findings(tmp_path, capsys):
    job = volcano_job("typo").queue("q1").task("w", replicas=2).env("w", "RANK", "0")
    obj = job.build()
    obj["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resource"] = {"limits": {}}
    code, out, err = _run(capsys, "check", _dump(tmp_path, obj), "-n", "ml", "--policy", POLICIES)
    assert code == 1 and out == "Job ml/typo: rejected (2 errors)\n"
    paths = sorted(line.split(": ")[2] for line in _lines(err, "error"))
    assert paths == [
        "spec.tasks[0].template.spec.containers[0].env[0]",
        "spec.tasks[0].template.spec.containers[0].resource",
    ]


def test_t02_misspelled_volcano_job_fields_are_refused_with_the_name_meant(tmp_path, capsys):
    text = _torchrun(spec="  minAvaliable: 3\n", replicas="replica")
    code, out, err = _run(capsys, "check", _file(tmp_path, text), "--policy", POLICIES)
    assert code == 1 and out == f"Job ml/llama-ft: rejected (2 errors{BEFORE}\n"
    errors = _lines(err, "error")
    assert len(errors) == 2 and _lines(err, "warning") == []  # no derived "replicas: not set"
    assert errors[0].startswith("error: Job ml/llama-ft: spec.minAvaliable: unknown field;")
    assert 'strict decoding error: unknown field "spec.minAvaliable"' in errors[0]
    assert errors[0].endswith("did you mean minAvailable?")
    assert errors[1].startswith("error: Job ml/llama-ft: spec.tasks[1].replica: unknown field;")
    assert errors[1].endswith("did you mean replicas?")


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param(
            {"metadata": {"name": "x", "lables": {"a": "b"}}}, "metadata.lables", id="metadata"
        ),
        pytest.param(
            {"spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": {}}}], "q": 1}},
            "spec.q",
            id="spec",
        ),
        pytest.param(
            {"spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"metdata": {}}}]}},
            "spec.tasks[0].template.metdata",
            id="task template",
        ),
    ],
)
def test_t02_every_level_the_crd_names_is_judged(tmp_path, capsys, obj, path):
    job = volcano_job("j").queue("q1").task("w", replicas=1).build()
    for key, value in obj.items():
        job[key] = {**job.get(key, {}), **value}
    code, _, err = _run(capsys, "check", _dump(tmp_path, job), "--policy", POLICIES)
    assert code == 1
    assert [line.split(": ")[2] for line in _lines(err, "error")] == [path]


def test_t02_an_appwrapper_s_unknown_fields_are_refused_too(tmp_path, capsys):
    appwrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw"},
        "spec": {"component": []},
    }
    code, _, err = _run(capsys, "check", _dump(tmp_path, appwrapper), "--policy", POLICIES)
    assert code == 1 and "spec.component: unknown field;" in err
    assert "did you mean components?" in err


# --- T03: wrap: Always needs the namespace label ---------------------------------------------

PLAIN = volcano_job("plain").task("w", replicas=2)


def test_t03_check_under_wrap_always_names_the_namespace_label_the_webhooks_need(tmp_path, capsys):
    path = _dump(tmp_path, PLAIN)
    code, out, err = _run(capsys, "check", path, "-n", "team-a", "--policy", POLICIES)
    assert code == 0 and "would be wrapped" in out
    [warning] = _lines(err, "warning")
    assert "metadata.namespace: policy 'team-a' says wrap: Always" in warning
    assert f"kubectl label namespace team-a {ALWAYS}" in warning and f"-l {ALWAYS}" in warning
    code, _, _ = _run(capsys, "check", path, "-n", "team-a", "--policy", POLICIES,
                      "--warn-exit-code", "3")  # fmt: skip
    assert code == 3
    _, out, _ = _run(capsys, "check", path, "-n", "team-a", "--policy", POLICIES, "-o", "json")
    [document] = json.loads(out)["documents"]
    assert [w["path"] for w in document["warnings"]] == ["metadata.namespace"]
    code, _, err = _run(capsys, "check", path, "-n", "team-a", "-l", ALWAYS, "--policy", POLICIES)
    assert code == 0 and _lines(err, "warning") == []


def test_t03_an_object_that_opts_in_itself_needs_no_namespace_label(tmp_path, capsys):
    labelled = PLAIN.clone().label("autowrap.io/wrap", "true")
    code, _, err = _run(capsys, "check", _dump(tmp_path, labelled), "-n", "team-a",
                        "--policy", POLICIES)  # fmt: skip
    assert code == 0 and _lines(err, "warning") == []


def test_t03_explain_says_the_namespace_label_under_wrap_always(capsys):
    code, out, _ = _run(capsys, "explain", "-n", "team-a", "--policy", POLICIES)
    assert code == 0
    assert f"takes effect only where the namespace is labelled {ALWAYS}" in out
    assert f"kubectl label namespace team-a {ALWAYS}" in out
    _, out, _ = _run(capsys, "explain", "-n", "team-a", "-l", ALWAYS, "--policy", POLICIES)
    assert f"the namespace label {ALWAYS} is given" in out
    _, out, _ = _run(capsys, "explain", "-n", "ml", "--policy", POLICIES)  # OptIn: no word
    assert ALWAYS not in out


def test_t03_autowrap_test_notes_a_case_without_the_namespace_label(tmp_path, capsys):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(PLAIN.build()))
    case = {"name": "plain", "manifest": "job.yaml", "namespace": "team-a",
            "expect": [{"result": "wrapped"}]}  # fmt: skip
    suite = {"apiVersion": "autowrap.io/v1alpha1", "kind": "PolicyTest", "name": "s",
             "policies": POLICIES, "cases": [case]}  # fmt: skip
    (tmp_path / "autowrap-test.yaml").write_text(yaml.safe_dump(suite))
    code, out, _ = _run(capsys, "test", str(tmp_path))
    assert code == 0 and out.splitlines()[-1] == "1 passed, 0 failed"
    [note] = [line for line in out.splitlines() if line.startswith("note")]
    assert f"namespaces labelled {ALWAYS}" in note and "namespaceLabels" in note
    case["namespaceLabels"] = {"autowrap.io/wrap": "Always"}
    (tmp_path / "autowrap-test.yaml").write_text(yaml.safe_dump(suite))
    _, out, _ = _run(capsys, "test", str(tmp_path))
    assert out == "1 passed, 0 failed\n"


# --- T04: a labelled object autowrap does not wrap --------------------------------------------


def test_t04_a_labelled_kind_autowrap_does_not_wrap_is_warned_with_what_it_wraps(tmp_path, capsys):
    batch_job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "k8sjob", "namespace": "ml",
                     "labels": {"autowrap.io/wrap": "true", "kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }  # fmt: skip
    code, out, err = _run(capsys, "check", _dump(tmp_path, batch_job), "--policy", POLICIES,
                          "--warn-exit-code", "4")  # fmt: skip
    assert code == 4
    assert out == "Job ml/k8sjob: left unchanged (autowrap does not wrap batch/v1 Job)\n"
    [warning] = _lines(err, "warning")
    assert "metadata.labels[autowrap.io/wrap]: asks to be wrapped" in warning
    assert "batch.volcano.sh/v1alpha1 Job, v1 Pod" in warning and "not batch/v1 Job" in warning


def test_t04_a_volcano_job_at_a_version_the_crd_does_not_serve_is_warned(tmp_path, capsys):
    job = volcano_job("j").task("w", replicas=1).build()
    job["apiVersion"] = "batch.volcano.sh/v1beta1"
    code, out, err = _run(capsys, "check", _dump(tmp_path, job), "--policy", POLICIES)
    assert code == 0
    assert "autowrap does not wrap batch.volcano.sh/v1beta1 Job" in out
    [warning] = _lines(err, "warning")
    assert "apiVersion: batch.volcano.sh serves Job only as v1alpha1" in warning
    assert warning.endswith("use apiVersion: batch.volcano.sh/v1alpha1")


def test_t04_an_unlabelled_object_of_another_kind_gets_no_warning(tmp_path, capsys):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    code, out, err = _run(capsys, "check", _dump(tmp_path, config_map), "--policy", POLICIES)
    assert code == 0 and err == ""
    assert out == "ConfigMap default/c: left unchanged (autowrap does not wrap v1 ConfigMap)\n"


# --- T05: near-miss opt-in labels ----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("autowrap.io/wrapp", "true", "did you mean autowrap.io/wrap?"),
        ("autowrap/wrap", "true", "did you mean autowrap.io/wrap?"),
        ("kueue.x-k8s.io/queue", "gpu-queue", "did you mean kueue.x-k8s.io/queue-name?"),
        ("autowrap.io/wrap", "True", 'did you mean autowrap.io/wrap: "true"?'),
        ("autowrap.io/wrap", "yes", 'did you mean autowrap.io/wrap: "true"?'),
        ("autowrap.io/wrap", "no", 'did you mean autowrap.io/wrap: "false"?'),
    ],
)
def test_t05_a_near_miss_opt_in_label_gets_a_did_you_mean(tmp_path, capsys, key, value, says):
    job = volcano_job("j").task("w", replicas=1).label(key, value)
    code, out, err = _run(capsys, "check", _dump(tmp_path, job), "-n", "ml", "--policy", POLICIES)
    assert code == 0 and "left unchanged" in out
    [warning] = _lines(err, "warning")
    assert warning.startswith(f"warning: Job ml/j: metadata.labels[{key}]: ")
    assert warning.endswith(says)


@pytest.mark.parametrize(
    "key", ["autowrap.io/tier", "kueue.x-k8s.io/pod-group-name", "app", "autowrap.io/adoption"]
)
def test_t05_other_labels_are_no_near_misses(tmp_path, capsys, key):
    job = volcano_job("j").task("w", replicas=1).label(key, "x")
    _, _, err = _run(capsys, "check", _dump(tmp_path, job), "-n", "ml", "--policy", POLICIES)
    assert _lines(err, "warning") == []


def test_t05_a_near_miss_annotation_gets_a_did_you_mean(tmp_path, capsys):
    job = volcano_job("j").queue("q1").task("w", replicas=1).annotate("autowrap.io/nproc", "8")
    _, _, err = _run(capsys, "check", _dump(tmp_path, job), "-n", "ml", "--policy", POLICIES)
    [warning] = _lines(err, "warning")
    assert "metadata.annotations[autowrap.io/nproc]" in warning
    assert warning.endswith("did you mean autowrap.io/nproc-per-node?")


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("autowrap.io/masterport", "autowrap.io/master-port"),
        ("autowrap.io/master-tsk", "autowrap.io/master-task"),
        ("autowrap.io/exclude-task", "autowrap.io/exclude-tasks"),
        ("autowrap.io/nproc-per-nod", "autowrap.io/nproc-per-node"),
    ],
)
def test_a_near_miss_names_the_closest_key_not_the_first_close_one(tmp_path, capsys, key, meant):
    job = volcano_job("j").queue("q1").task("w", replicas=1).annotate(key, "1")
    _, _, err = _run(capsys, "check", _dump(tmp_path, job), "-n", "ml", "--policy", POLICIES)
    [warning] = _lines(err, "warning")
    assert warning.endswith(f"did you mean {meant}?"), warning


# --- T06: a Namespace in the same input ----------------------------------------------------

NS_STREAM = """\
apiVersion: v1
kind: Namespace
metadata: {name: lab, labels: {autowrap.io/tier: research}}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: exp, namespace: lab, labels: {autowrap.io/wrap: "true"}}
spec: {tasks: [{name: worker, replicas: 2, template: {spec: {containers: [{name: c, image: img,
  env: [{name: RANK, value: "0"}], resources: {limits: {nvidia.com/gpu: 1}}}]}}}]}
"""


def test_t06_a_namespace_in_the_input_selects_the_policy_of_its_objects(tmp_path, capsys):
    code, out, err = _run(capsys, "check", _file(tmp_path, NS_STREAM), "--policy", POLICIES)
    assert code == 0  # research-audit (Audit), as in the cluster, not default (Enforce)
    assert out.splitlines() == [
        "Namespace lab: left unchanged (autowrap does not wrap v1 Namespace)",
        "Job lab/exp: would be wrapped into AppWrapper lab/exp",
    ]
    assert "note: Namespace lab is in the input: its labels (autowrap.io/tier=research)" in err
    assert "(audit)" in err
    code, out, _ = _run(capsys, "explain", _file(tmp_path, NS_STREAM), "--policy", POLICIES)
    assert code == 0 and "research-audit" in out


def test_t06_a_namespace_labelled_always_in_the_input_satisfies_wrap_always(tmp_path, capsys):
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "team-a", "labels": {"autowrap.io/wrap": "Always"}}}  # fmt: skip
    job = PLAIN.clone().namespace("team-a")
    code, _, err = _run(capsys, "check", _dump(tmp_path, namespace, job), "--policy", POLICIES)
    assert code == 0 and _lines(err, "warning") == []


# --- L: polish ---------------------------------------------------------------------------


def test_l01_a_tab_in_the_indentation_is_named(tmp_path, capsys):
    text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels:\n\tapp: y\n"
    code, _, err = _run(capsys, "check", _file(tmp_path, text, "tabs.yaml"))
    assert code == 2
    assert err.startswith(f"error: {tmp_path / 'tabs.yaml'}:6:1: not valid YAML: ")
    assert "line 6 has a tab at column 1: YAML indents with spaces only" in err


@pytest.mark.parametrize("point_at", ["directory", "kustomization.yaml"])
def test_l02_a_kustomization_is_pointed_to_kubectl_kustomize(tmp_path, capsys, point_at):
    kust = tmp_path / "kust"
    kust.mkdir()
    (kust / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    (kust / "job.yaml").write_text(yaml.safe_dump(PLAIN.build()))
    target = kust if point_at == "directory" else kust / "kustomization.yaml"
    code, _, err = _run(capsys, "check", str(target))
    assert code == 2
    assert f"kubectl kustomize {kust} | autowrap check -" in err


def test_l03_a_typed_list_is_unrolled_as_kubectl_does(tmp_path, capsys):
    listed = pod("nb").label("autowrap.io/wrap", "true").build()
    del listed["apiVersion"], listed["kind"]  # as the API returns a PodList's items
    pod_list = {"apiVersion": "v1", "kind": "PodList", "items": [listed]}
    code, out, _ = _run(capsys, "check", _dump(tmp_path, pod_list), "-n", "ml",
                        "--policy", POLICIES)  # fmt: skip
    assert out.startswith("Pod ml/nb: ") and "PodList" not in out
    assert code == 1  # judged: no queue in namespace ml


def test_l04_a_policy_duration_is_named_to_its_key(tmp_path, capsys):
    policy_file = tmp_path / "p.yaml"
    policy_file.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "autowrap.io/v1alpha1",
                "kind": "Policy",
                "metadata": {"name": "p"},
                "spec": {"faultTolerance": {"defaults": {"warmupGracePeriodDuration": "1d"}}},
            }
        )  # fmt: skip
    )
    code, _, err = _run(capsys, "explain", "-n", "ml", "--policy", str(policy_file))
    assert code == 2
    assert "spec.faultTolerance.defaults.warmupGracePeriodDuration: missing or unknown unit" in err


def test_l06_a_mistyped_replicas_is_one_error_without_a_derived_one(tmp_path, capsys):
    job = volcano_job("j").queue("q1").task("m", replicas=1).task("w", replicas=2).build()
    job["spec"]["minAvailable"] = 3
    job["spec"]["tasks"][1]["replicas"] = "2"
    job["spec"]["tasks"][1]["minAvailable"] = 2
    code, out, err = _run(capsys, "check", _dump(tmp_path, job), "--policy", POLICIES)
    assert code == 1 and out == "Job default/j: rejected (1 error)\n"
    assert [line.split(": ")[2] for line in _lines(err, "error")] == ["spec.tasks[1].replicas"]
    assert _lines(err, "warning") == []


def test_l07_a_cluster_scoped_object_is_shown_without_a_namespace(tmp_path, capsys):
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lab"}}
    path = _dump(tmp_path, namespace)
    _, out, _ = _run(capsys, "check", path, "--policy", POLICIES)
    assert out == "Namespace lab: left unchanged (autowrap does not wrap v1 Namespace)\n"
    _, out, _ = _run(capsys, "check", path, "--policy", POLICIES, "-o", "json")
    assert json.loads(out)["documents"][0]["namespace"] is None


def test_l08_a_pod_with_only_the_queue_label_is_said_to_be_left_to_kueue(tmp_path, capsys):
    notebook = pod("nb").label("kueue.x-k8s.io/queue-name", "gpu-queue")
    code, out, _ = _run(capsys, "check", _dump(tmp_path, notebook), "--policy", POLICIES)
    assert code == 0
    assert "kueue.x-k8s.io/queue-name alone leaves a Pod to Kueue's own pod integration" in out


# --- the certs/ folder --------------------------------------------------------------------


def test_the_certs_folder_says_how_each_file_autowrap_certs_writes_is_used(tmp_path, capsys):
    readme = (REPO / "certs" / "README.md").read_text()
    code, out, _ = _run(capsys, "certs", "--out", str(tmp_path / "certs"))
    assert code == 0 and out.strip()
    written = sorted(p.name for p in (tmp_path / "certs").iterdir())
    assert written == sorted([certs.CA_CERT, certs.CA_KEY, certs.TLS_CERT, certs.TLS_KEY])
    for name in written:
        assert f"| `{name}` |" in readme, f"certs/README.md says nothing of {name}"
    for doc in ("docs/install.md", "docs/operations.md"):
        assert "certs/README.md" in (REPO / doc).read_text(), f"{doc} does not point to it"


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout"
)
def test_keys_and_certificates_in_certs_are_ignored_by_git():
    names = [f"certs/{n}" for n in (certs.CA_KEY, certs.TLS_KEY, certs.CA_CERT, certs.TLS_CERT)]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *names],
        cwd=REPO, capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert ignored == names
    readme = subprocess.run(
        ["git", "check-ignore", "--no-index", "certs/README.md"], cwd=REPO, check=False
    )
    assert readme.returncode == 1  # committed


def test_t06_a_namespace_s_wrap_label_other_than_always_is_warned(tmp_path, capsys):
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "team-a", "labels": {"autowrap.io/wrap": "true"}}}  # fmt: skip
    _, _, err = _run(capsys, "check", _dump(tmp_path, namespace), "--policy", POLICIES)
    [warning] = _lines(err, "warning")
    assert warning.startswith("warning: Namespace team-a: metadata.labels[autowrap.io/wrap]: ")
    assert warning.endswith("did you mean autowrap.io/wrap: Always?")
