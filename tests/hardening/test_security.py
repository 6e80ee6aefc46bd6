"""Security properties of the running service: autowrap creates only what the requesting user
could create, its log never carries object bodies or env values, and TLS below 1.2 is refused.
(The non-root, read-only-root-filesystem container is checked on the rendered Deployment in
tests/deploy/test_manifests.py.)"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterator

import aiohttp
import orjson
import pytest

from testbed.apiserver import UserInfo
from testbed.redirect import NAMESPACE, Cluster
from testbed.scenarios import (
    SNI,
    Hostile,
    admission_request,
    encode,
    hostile_inputs,
    labelled_pod,
    labelled_vcjob,
    post,
    review,
    send_all,
)
from webhook.model import names
from webhook.shell import server

SECRET = "SECRET-VALUE-123"
NOTE = "note-7f3a9c-unique-annotation-text"
BOB = UserInfo(username="bob", groups=("ml-team", "system:authenticated"))
CAROL = UserInfo(username="carol", groups=("other-team", "system:authenticated"))
# Not in system:masters (UserInfo's default), whom every authorizer allows everything.
DAVE = UserInfo(username="dave", groups=("system:authenticated",))


def _grant_group(cluster: Cluster, group: str = "ml-team") -> None:
    cluster.kube.allow(in_group=group, verb="create", group=names.APPWRAPPER_GROUP,
                       resource=names.APPWRAPPER_PLURAL, namespace=NAMESPACE)  # fmt: skip


async def test_a_member_of_a_group_granted_create_appwrappers_is_wrapped(cluster: Cluster) -> None:
    _grant_group(cluster)

    result = await cluster.create(labelled_vcjob("bob-job"), user=BOB)

    assert "was wrapped into AppWrapper ml/bob-job" in result.message
    sar = cluster.kube.sars[-1]["spec"]
    assert sar["user"] == "bob" and "ml-team" in sar["groups"]
    assert sar["resourceAttributes"]["namespace"] == NAMESPACE
    assert list(cluster.appwrappers()) == [(NAMESPACE, "bob-job")]


async def test_a_user_outside_the_granted_group_is_refused_naming_the_permission(
    cluster: Cluster,
) -> None:
    _grant_group(cluster)

    result = await cluster.create(labelled_vcjob("carol-job"), user=CAROL)

    assert not result.allowed
    assert result.status_code == 403
    assert "'carol' may not create appwrappers (workload.codeflare.dev)" in result.message
    assert "ask for the 'create appwrappers' permission" in result.message
    assert cluster.appwrappers() == {}


async def test_a_grant_in_another_namespace_does_not_let_a_user_wrap_here(
    cluster: Cluster,
) -> None:
    cluster.kube.allow("dave", verb="create", group=names.APPWRAPPER_GROUP,
                       resource=names.APPWRAPPER_PLURAL, namespace="elsewhere")  # fmt: skip

    result = await cluster.create(labelled_vcjob("dave-job"), user=DAVE)

    assert not result.allowed
    assert "'dave' may not create appwrappers" in result.message
    assert cluster.appwrappers() == {}


async def test_an_explicit_deny_wins_over_a_group_grant_and_its_reason_is_shown(
    cluster: Cluster,
) -> None:
    cluster.kube.deny("bob", reason="bob is on leave")
    _grant_group(cluster)

    result = await cluster.create(labelled_vcjob("bob-job"), user=BOB)

    assert not result.allowed
    assert "bob is on leave" in result.message
    assert cluster.appwrappers() == {}


@pytest.mark.parametrize("status", [500, 403, None])
async def test_when_the_access_check_fails_nothing_is_created(
    cluster: Cluster, status: int | None
) -> None:
    cluster.kube.inject("POST", r"/subjectaccessreviews$", status=status, times=None,
                        drop_connection=status is None)  # fmt: skip

    result = await cluster.create(labelled_vcjob("job"))

    assert not result.allowed
    assert "'create subjectaccessreview'" in result.message
    assert cluster.appwrappers() == {}
    assert cluster.kube.requests_to("POST", r"/appwrappers$") == []


@pytest.fixture
def log_lines(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], list[str]]]:
    """Every line the server logs: the request lines it writes to stdout, and the rest, which
    go through the ``autowrap`` logger."""
    logged: list[str] = []
    formatter = server.JsonFormatter()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(formatter.format(record))

    handler = Collect()
    logger = logging.getLogger("autowrap")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: capsys.readouterr().out.splitlines() + logged
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


async def test_no_log_line_carries_object_bodies_or_env_values(
    cluster: Cluster, log_lines: Callable[[], list[str]]
) -> None:
    wrapped = labelled_vcjob("secret-job", env_value=SECRET, annotation=NOTE)
    rejected = labelled_vcjob("bad-job", env_value=SECRET, annotation=NOTE)
    rejected["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "WORLD_SIZE", "value": SECRET})  # fmt: skip
    await cluster.create(wrapped)
    await cluster.create(rejected)
    await cluster.create(labelled_pod("secret-pod", env_value=SECRET, annotation=NOTE))
    await cluster.create(labelled_pod("refused", env_value=SECRET, annotation=NOTE),
                         user=UserInfo(username="nobody"))  # fmt: skip
    cluster.kube.inject("POST", r"/appwrappers$", status=500)
    await cluster.create(labelled_vcjob("api-down", env_value=SECRET, annotation=NOTE))
    hostile = [Hostile("secret", encode(review(admission_request(
        labelled_vcjob(f"h{i}", env_value=SECRET, annotation=NOTE))))[: 200 + i * 40])
        for i in range(10)]  # fmt: skip
    hostile += [c for c in hostile_inputs(seed=7, count=40)]
    await send_all(cluster.running.port, cluster.pki.client_context(), hostile)

    lines = log_lines()
    admissions = [orjson.loads(line) for line in lines if '"msg":"admission"' in line]
    assert len(admissions) >= 5 + len(hostile)
    assert {"uid", "decision", "duration_ms"} <= set(admissions[0])
    assert any(a.get("decision") == "wrapped" and a.get("user") == "alice" for a in admissions)
    assert any(a.get("decision") == "rejected" for a in admissions)
    for line in lines:
        assert SECRET not in line
        assert NOTE not in line
        assert "SECRET" not in line and "torch:2.4" not in line


def _client(maximum: ssl.TLSVersion, cluster: Cluster) -> ssl.SSLContext:
    ctx = cluster.pki.client_context()
    ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    ctx.maximum_version = maximum
    return ctx


async def _handshake(port: int, ctx: ssl.SSLContext) -> str:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=SNI)
    version = str(writer.get_extra_info("ssl_object").version())
    writer.close()
    await writer.wait_closed()
    return version


# The client deliberately asks for deprecated protocol versions.
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize(
    "maximum",
    [
        pytest.param(ssl.TLSVersion.TLSv1_1, id="a TLS 1.1 client"),
        pytest.param(ssl.TLSVersion.TLSv1, id="a TLS 1.0 client"),
    ],
)
async def test_a_client_limited_to_tls_below_1_2_cannot_handshake(
    cluster: Cluster, maximum: ssl.TLSVersion
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(cluster.running.port, _client(maximum, cluster))


async def test_tls_1_2_and_1_3_clients_are_served(cluster: Cluster) -> None:
    port = cluster.running.port
    assert await _handshake(port, _client(ssl.TLSVersion.TLSv1_2, cluster)) == "TLSv1.2"
    assert await _handshake(port, _client(ssl.TLSVersion.TLSv1_3, cluster)) == "TLSv1.3"


async def test_plain_http_to_the_admission_port_is_not_answered_as_admission(
    cluster: Cluster,
) -> None:
    body = encode(review(admission_request(labelled_vcjob("plain"))))
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(f"http://127.0.0.1:{cluster.running.port}/validate",
                                    data=body) as resp:  # fmt: skip
                await resp.read()
    assert cluster.appwrappers() == {}


async def test_request_kinds_cannot_grow_the_metrics_without_bound(cluster: Cluster) -> None:
    async with aiohttp.ClientSession() as session:
        for i in range(25):
            unknown = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": f"u-{i}",
                    "kind": {"group": "example.com", "version": "v1", "kind": f"Kind{i}"},
                    "operation": "CREATE",
                    "namespace": "ml",
                    "object": {"apiVersion": "example.com/v1", "kind": f"Kind{i}"},
                },
            }
            answer = await post(
                session, cluster.running.port, "/validate", orjson.dumps(unknown),
                cluster.pki.client_context(),
            )  # fmt: skip
            assert answer.status == 200

    exposition = cluster.state.metrics.exposition().decode()
    assert "Kind3" not in exposition
    assert 'kind="other"' in exposition
