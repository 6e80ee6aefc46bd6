"""Who may call: client certificates on the admission routes (``--client-ca-file``), bearer
tokens on /metrics (``--metrics-auth``), and where /metrics listens (``--metrics-host``)."""

from __future__ import annotations

import datetime
import logging
import shutil
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.common import service_account_user
from testbed.pki import ServingPki
from testbed.policies import in_mode
from testbed.redirect import Cluster
from tests.server.test_e2e import vcjob
from webhook import app
from webhook.core.policy import PolicySet
from webhook.model import names
from webhook.shell import certs, kube, policyfiles, server

REPO = Path(__file__).resolve().parents[2]
APISERVER = "kube-apiserver-webhook-client"


def client_pair(ca: certs.Pair, common_name: str, directory: Path) -> tuple[Path, Path]:
    """A clientAuth certificate issued by ``ca``, as kube-apiserver's webhook kubeconfig holds."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "client.crt", directory / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )  # fmt: skip
    )
    return cert_path, key_path


def tls_client(pki: ServingPki, pair: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = pki.client_context()
    context.check_hostname = False  # served on 127.0.0.1; the chain is still verified
    if pair is not None:
        context.load_cert_chain(*pair)
    return context


def review(kind: str = "ConfigMap") -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "namespace": "ml"}}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": obj,
        },
    }


async def status_of(
    running: server.Running, path: str, context: ssl.SSLContext, *, method: str = "POST"
) -> tuple[int, str]:
    url = f"https://127.0.0.1:{running.port}{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            url,
            ssl=context,
            data=orjson.dumps(review()),
            headers={"Content-Type": "application/json"},
        ) as resp,  # fmt: skip
    ):
        return resp.status, await resp.text()


@pytest.fixture
async def guarded(
    webhook_pki: ServingPki, tmp_path: Path
) -> AsyncIterator[tuple[server.Running, Path, certs.Pair]]:
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    for source in (webhook_pki.cert_path, webhook_pki.key_path):
        shutil.copy(source, cert_dir / source.name)
    client_ca = certs.make_ca("apiserver-client-ca")
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(client_ca.cert_pem)
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir, use_cluster=False,
        controller=False, watch_caches=False, reload_interval=60.0, client_ca_file=ca_file,
    )  # fmt: skip
    running = await app.start(options)
    try:
        yield running, ca_file, client_ca
    finally:
        await running.drain()


async def test_admission_without_a_client_certificate_is_401_and_probes_stay_open(
    guarded: tuple[server.Running, Path, certs.Pair], webhook_pki: ServingPki
) -> None:
    running, _, _ = guarded
    anonymous = tls_client(webhook_pki)
    for path in (names.MUTATE_PATH, names.VALIDATE_PATH):
        status, text = await status_of(running, path, anonymous)
        assert status == 401, text
        assert "client certificate is required" in text
    for path in (names.HEALTHZ_PATH, names.READYZ_PATH):
        status, text = await status_of(running, path, anonymous, method="GET")
        assert status == 200, text


async def test_admission_with_the_apiservers_client_certificate_is_answered(
    guarded: tuple[server.Running, Path, certs.Pair], webhook_pki: ServingPki, tmp_path: Path
) -> None:
    running, _, client_ca = guarded
    pair = client_pair(client_ca, APISERVER, tmp_path / "client")
    status, text = await status_of(running, names.MUTATE_PATH, tls_client(webhook_pki, pair))
    assert status == 200, text
    assert orjson.loads(text)["response"]["allowed"] is True


async def test_a_certificate_from_another_ca_fails_the_handshake(
    guarded: tuple[server.Running, Path, certs.Pair], webhook_pki: ServingPki, tmp_path: Path
) -> None:
    running, _, _ = guarded
    stranger = client_pair(certs.make_ca("someone-else"), "mallory", tmp_path / "stranger")
    with pytest.raises(aiohttp.ClientError):
        await status_of(running, names.MUTATE_PATH, tls_client(webhook_pki, stranger))


async def test_the_client_ca_file_is_reloaded_and_a_removed_ca_no_longer_admits(
    guarded: tuple[server.Running, Path, certs.Pair], webhook_pki: ServingPki, tmp_path: Path
) -> None:
    running, ca_file, old_ca = guarded
    old_pair = client_pair(old_ca, APISERVER, tmp_path / "old")
    new_ca = certs.make_ca("apiserver-client-ca-2")
    new_pair = client_pair(new_ca, APISERVER, tmp_path / "new")
    ca_file.write_bytes(new_ca.cert_pem)
    server.reload_certificates(running.state)

    assert running.state.client_ca is not None and running.state.client_ca.reloads == 2
    status, text = await status_of(running, names.MUTATE_PATH, tls_client(webhook_pki, new_pair))
    assert status == 200, text
    # OpenSSL's store still trusts the old CA; the per-request check does not.
    status, text = await status_of(running, names.MUTATE_PATH, tls_client(webhook_pki, old_pair))
    assert status == 403, text
    assert "not issued by a CA in --client-ca-file" in text


def test_redirect_without_client_ca_is_warned_about(tmp_path: Path) -> None:
    redirect = policyfiles.load(in_mode(REPO / "policies", tmp_path / "redirect", "Redirect"))
    adopt = policyfiles.load(in_mode(REPO / "policies", tmp_path / "adopt", "Adopt"))
    warning = server.redirect_unguarded_warning(redirect, None)
    assert warning is not None
    assert "reachable by anyone who can reach the Service unless the NetworkPolicy" in warning
    assert server.redirect_unguarded_warning(redirect, tmp_path / "ca.crt") is None
    assert server.redirect_unguarded_warning(adopt, None) is None
    assert server.redirect_unguarded_warning(PolicySet(()), None) is None


async def test_start_up_logs_the_redirect_warning_once(
    webhook_pki: ServingPki, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="autowrap")
    logger = logging.getLogger("autowrap")
    added = not logger.propagate  # `serve`'s configure_logging ran in this process
    if added:
        logger.addHandler(caplog.handler)
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=webhook_pki.directory,
        policy_path=in_mode(REPO / "policies", tmp_path / "p", "Redirect"), use_cluster=False,
        controller=False, watch_caches=False,
    )  # fmt: skip
    running = await app.start(options)
    try:
        said = [r for r in caplog.records if "redirect side effect" in r.getMessage()]
        assert len(said) == 1
    finally:
        if added:
            logger.removeHandler(caplog.handler)
        await running.drain()


# --- /metrics ----------------------------------------------------------------------------------


@pytest.fixture
async def scraped(
    webhook_pki: ServingPki, fake_kube: FakeCluster, fake_kubeconfig: Path
) -> AsyncIterator[server.Running]:
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=webhook_pki.directory,
        kubeconfig=str(fake_kubeconfig), controller=False, watch_caches=False,
        metrics_auth=True,
    )  # fmt: skip
    running = await app.start(options)
    try:
        yield running
    finally:
        await running.drain()


async def scrape(running: server.Running, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    url = f"http://127.0.0.1:{running.metrics_port}{names.METRICS_PATH}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
        return resp.status, await resp.text()


async def test_metrics_auth_reviews_the_token_and_asks_may_it_get_metrics(
    scraped: server.Running, fake_kube: FakeCluster
) -> None:
    prometheus = service_account_user("prometheus", "monitoring")
    nosy = service_account_user("nosy", "ml")
    fake_kube.users.update({"prom-token": prometheus, "nosy-token": nosy})
    fake_kube.allow(prometheus.username, verb="get", path=names.METRICS_PATH)

    assert (await scrape(scraped, None))[0] == 401
    assert (await scrape(scraped, "made-up"))[0] == 401
    status, text = await scrape(scraped, "nosy-token")
    assert status == 403 and "may not get /metrics" in text
    status, text = await scrape(scraped, "prom-token")
    assert status == 200 and "autowrap_" in text

    reviews = fake_kube.token_reviews
    assert (await scrape(scraped, "prom-token"))[0] == 200
    assert fake_kube.token_reviews == reviews, "an allowed token is remembered for a while"
    url_reviews = [s for s in fake_kube.sars if "nonResourceAttributes" in s["spec"]]
    assert {(s["spec"]["user"], s["spec"]["nonResourceAttributes"]["path"],
             s["spec"]["nonResourceAttributes"]["verb"]) for s in url_reviews} == {
        (nosy.username, "/metrics", "get"), (prometheus.username, "/metrics", "get")
    }  # fmt: skip


async def test_metrics_auth_needs_api_access(webhook_pki: ServingPki) -> None:
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=webhook_pki.directory,
        use_cluster=False, controller=False, watch_caches=False, metrics_auth=True,
    )  # fmt: skip
    with pytest.raises(kube.NoConfiguration, match="--metrics-auth"):
        await app.start(options)


async def test_metrics_host_binds_metrics_apart_from_the_webhook(webhook_pki: ServingPki) -> None:
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, metrics_host="127.0.0.2",
        cert_dir=webhook_pki.directory, use_cluster=False, controller=False, watch_caches=False,
    )  # fmt: skip
    running = await app.start(options)
    try:
        assert running.metrics_runner.addresses[0][0] == "127.0.0.2"
        assert running.runner.addresses[0][0] == "127.0.0.1"
    finally:
        await running.drain()


# --- the ClusterRole without COMPONENT_CREATE --------------------------------------------------


async def test_without_component_create_rbac_the_dry_run_is_skipped_not_a_refusal(
    cluster: Cluster,
) -> None:
    # deploy/overlays/without-component-create: the authorizer forbids autowrap's dry runs.
    forbidden = cluster.kube.inject(
        "POST", r"/namespaces/[^/]+/jobs$", status=403, times=None, reason="Forbidden",
        message='jobs.batch.volcano.sh "train" is forbidden: User '
        '"system:serviceaccount:autowrap-system:autowrap" cannot create resource "jobs" in '
        'API group "batch.volcano.sh" in the namespace "ml"',
    )  # fmt: skip

    first = await cluster.create(vcjob("first"))
    second = await cluster.create(vcjob("second"))

    assert "wrapped" in first.message and "wrapped" in second.message, first.message
    assert len(cluster.appwrappers()) == 2
    assert forbidden.hits == 1, "a kind autowrap may not dry-run is not tried on every request"
