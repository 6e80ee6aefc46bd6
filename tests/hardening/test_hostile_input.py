"""Hostile AdmissionReviews over TLS to the running server, and the same objects through
``autowrap render``/``check``: never a 5xx, a dropped connection or a traceback; a review for
every well-formed request (with its uid) and a 4xx with a reason for everything else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from testbed.redirect import REPO, Cluster
from testbed.scenarios import (
    Hostile,
    admission_request,
    encode,
    hostile_inputs,
    judge,
    labelled_pod,
    labelled_vcjob,
    post,
    review,
    send_all,
)
from webhook.cli import main as cli
from webhook.model import names

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                  max_size=4),
    max_leaves=20,
)  # fmt: skip
paths = st.lists(st.sampled_from(["metadata", "spec", "tasks", 0, 1, "template", "containers",
                                  "env", "labels", "annotations", "name", "replicas", "kind",
                                  "apiVersion", "value", "policies", "plugins"]),
                 min_size=1, max_size=6)  # fmt: skip


def _graft(obj: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    """``obj`` with ``value`` written as far along ``path`` as the object allows."""
    node: Any = obj
    for step in path[:-1]:
        if (
            isinstance(node, dict)
            and step in node
            or isinstance(node, list)
            and isinstance(step, int)
            and step < len(node)
        ):
            node = node[step]
        else:
            break
    last = path[-1]
    if isinstance(node, dict):
        node[last if isinstance(last, str) else str(last)] = value
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    return obj


objects = st.builds(
    _graft,
    st.sampled_from(["job", "pod"]).map(
        lambda k: labelled_vcjob("hyp") if k == "job" else labelled_pod("hyp")
    ),
    paths,
    json_values,
)


async def _answer(cluster: Cluster, case: Hostile, path: str) -> str | None:
    async with aiohttp.ClientSession() as session:
        answer = await post(session, cluster.running.port, path, case.body,
                            cluster.pki.client_context(), content_type=case.content_type)  # fmt: skip
    return judge(case, answer)


@given(obj=objects, dry_run=st.booleans())
async def test_a_well_formed_review_of_any_object_gets_a_review_with_its_uid(
    cluster: Cluster, obj: dict[str, Any], dry_run: bool
) -> None:
    request = admission_request(obj, dry_run=dry_run)
    case = Hostile("hypothesis-object", encode(review(request)), review_uid=request["uid"])

    for path in (names.MUTATE_PATH, names.VALIDATE_PATH):
        assert await _answer(cluster, case, path) is None


@given(request=st.dictionaries(st.sampled_from(["uid", "kind", "operation", "userInfo", "object",
                                                "dryRun", "name", "namespace", "resource"]),
                               json_values, max_size=9))  # fmt: skip
async def test_any_request_envelope_gets_a_review_or_a_4xx_with_a_reason(
    cluster: Cluster, request: dict[str, Any]
) -> None:
    case = Hostile("hypothesis-envelope", encode(review(request)))

    assert await _answer(cluster, case, names.VALIDATE_PATH) is None


@given(body=st.binary(max_size=2000))
async def test_arbitrary_bytes_get_a_4xx_with_a_reason(cluster: Cluster, body: bytes) -> None:
    assert await _answer(cluster, Hostile("hypothesis-bytes", body), names.MUTATE_PATH) is None


async def test_mutated_reviews_never_get_a_5xx_a_dropped_connection_or_an_internal_error(
    cluster: Cluster,
) -> None:
    cases = hostile_inputs(seed=20240611, count=160)

    tally = await send_all(cluster.running.port, cluster.pki.client_context(), cases)

    assert tally.problems == []
    assert tally.sent == len(cases)
    assert not any(status.startswith("5") for status in tally.by_status)
    assert tally.by_status["413"] == 1, "the body over 7 MiB is refused with 413"
    assert tally.by_status["200"] > 0 and tally.by_status["400"] > 0


@pytest.mark.parametrize(
    ("label", "body", "content_type", "status"),
    [
        ("empty body", b"", "application/json", 400),
        ("not JSON", b"\x00\x01garbage", "application/json", 400),
        ("a JSON array", b"[]", "application/json", 400),
        ("wrong content type", b"{}", "text/plain", 415),
        ("an AdmissionReview v1beta1", encode({"apiVersion": "admission.k8s.io/v1beta1",
                                               "kind": "AdmissionReview", "request": {}}),
         "application/json", 400),
        ("nested 100000 deep", b"[" * 100000 + b"]" * 100000, "application/json", 400),
    ],
)  # fmt: skip
async def test_a_body_that_is_not_an_admission_review_gets_a_4xx_with_a_reason(
    cluster: Cluster, label: str, body: bytes, content_type: str, status: int
) -> None:
    async with aiohttp.ClientSession() as session:
        answer = await post(session, cluster.running.port, names.VALIDATE_PATH, body,
                            cluster.pki.client_context(), content_type=content_type)  # fmt: skip

    assert answer.status == status, label
    assert isinstance(answer.body, dict) and answer.body["message"]
    assert "Traceback" not in answer.body["message"]


async def test_a_body_over_7_mib_gets_413_and_the_server_keeps_serving(cluster: Cluster) -> None:
    big = encode(review(admission_request({"apiVersion": "v1", "kind": "Pod",
                                           "metadata": {"name": "big", "annotations": {
                                               "x": "y" * (names.MAX_BODY_BYTES + 10)}}})))  # fmt: skip
    small_request = admission_request(labelled_pod("after"))
    async with aiohttp.ClientSession() as session:
        tls = cluster.pki.client_context()
        port = cluster.running.port
        over = await post(session, port, names.VALIDATE_PATH, big, tls)
        after = await post(session, port, names.VALIDATE_PATH, encode(review(small_request)), tls)

    assert over.status == 413
    assert str(names.MAX_BODY_BYTES) in over.body["message"]
    assert after.status == 200
    assert after.body["response"]["uid"] == small_request["uid"]


async def test_a_review_just_under_7_mib_is_answered_with_its_uid(cluster: Cluster) -> None:
    request = admission_request(labelled_pod("large"))
    body = encode(review(request))
    request["object"]["metadata"]["annotations"] = {
        "bulk": "z" * (names.MAX_BODY_BYTES - len(body) - 200)}  # fmt: skip
    body = encode(review(request))
    assert len(body) < names.MAX_BODY_BYTES

    async with aiohttp.ClientSession() as session:
        answer = await post(session, cluster.running.port, names.VALIDATE_PATH, body,
                            cluster.pki.client_context())  # fmt: skip

    assert answer.status == 200
    assert answer.body["response"]["uid"] == request["uid"]


# --- the CLI -----------------------------------------------------------------------------------

CLI_FILES: dict[str, bytes] = {
    "not-utf8.yaml": b"\xff\xfe\x00garbage",
    "not-yaml.yaml": b"apiVersion: v1\nkind: Pod\nmetadata:\n\tname: x\n",
    "a-list.yaml": b"- 1\n- 2\n",
    "nested-deep.yaml": b"a: " + b"[" * 20000 + b"]" * 20000 + b"\n",
    "nested-object.yaml": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: "
        + b"{a: " * 400
        + b"1"
        + b"}" * 400
        + b"\n"
    ),  # fmt: skip
    "binary-value.yaml": b"apiVersion: v1\nkind: Pod\nmetadata: {name: !!binary aGVsbG8=}\n",
    "set-value.yaml": b"apiVersion: v1\nkind: Pod\nmetadata: !!set {a, b}\n",
    "date-name.yaml": (
        b"apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: "
        b"{name: 2024-01-01, labels: {autowrap.io/wrap: 'true'}}\nspec: {}\n"
    ),
    "int-keys.yaml": b"apiVersion: v1\nkind: Pod\nmetadata: {name: x, labels: {1: 2}}\n",
    "kind-int.yaml": b"apiVersion: 1\nkind: 2\n",
    "list-of-junk.yaml": b"apiVersion: v1\nkind: List\nitems: [1]\n",
    "empty.yaml": b"",
    "nul.yaml": b"apiVersion: v1\x00\nkind: Pod\n",
}


def _run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("name", sorted(CLI_FILES))
@pytest.mark.parametrize("command", [["render"], ["render", "-o", "json"], ["check"]])
def test_unreadable_or_strange_files_exit_0_1_or_2_with_a_message_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, command: list[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(CLI_FILES[name])

    code, output = _run_cli(capsys, [*command, str(path)])

    assert code in (0, 1, 2)
    assert "Traceback" not in output
    if code:
        assert output.strip(), "a non-zero exit says why"


@given(obj=objects)
def test_render_and_check_of_any_object_exit_0_1_or_2_without_a_traceback(
    tmp_path_factory: pytest.TempPathFactory, obj: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("cli") / "obj.yaml"
    path.write_text(yaml.safe_dump(obj, allow_unicode=True))
    for command in (["render", "-o", "json"], ["render"], ["check"]):
        out = _Capture()
        code = _call_cli([*command, str(path)], out)
        assert code in (0, 1, 2)
        assert "Traceback" not in out.text


class _Capture:
    text = ""


def _call_cli(argv: list[str], out: _Capture) -> int:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        code = cli.main(argv)
    out.text = buffer.getvalue()
    return code


@pytest.mark.parametrize(
    ("name", "expected"),
    [("not-utf8.yaml", 2), ("nested-deep.yaml", 2), ("binary-value.yaml", 2),
     ("a-list.yaml", 2)],
)  # fmt: skip
def test_python_m_webhook_exits_2_with_a_message_on_unreadable_input(
    tmp_path: Path, name: str, expected: int
) -> None:
    path = tmp_path / name
    path.write_bytes(CLI_FILES[name])

    done = subprocess.run([sys.executable, "-m", "webhook", "check", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip

    assert done.returncode == expected
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.startswith("error: ")
