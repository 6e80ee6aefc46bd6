"""Self-managed certificates under concurrency and over time: one CA wins when replicas race
on a Secret without ``ca.key``, the caBundles come from the settled Secret, and the serving
certificate is renewed on a timer while the server runs."""

from __future__ import annotations

import asyncio
import base64
import datetime
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import SECRETS
from testbed.redirect import webhook_configurations
from tests.server.test_self_managed import (
    install_empty_secret,
    install_secret,
    under_self_managed_rbac,
)
from webhook.model import names
from webhook.shell import certs, selfmanaged
from webhook.shell.kube import CertificateStore, sync_api_client
from webhook.shell.metrics import Metrics

SECRET = "autowrap-serving-cert"
CONFIGURATIONS = "autowrap-mutating,autowrap-validating"
NS = names.SERVICE_NAMESPACE


@pytest.fixture
def fake_kube(fake_kube: FakeCluster) -> FakeCluster:
    """autowrap under the grants of the self-managed overlay."""
    under_self_managed_rbac(fake_kube)
    return fake_kube


def _args(cert_dir: Path, kubeconfig: Path) -> Namespace:
    return Namespace(cert_dir=str(cert_dir), kubeconfig=str(kubeconfig), cert_secret=SECRET,
                     webhook_configurations=CONFIGURATIONS)  # fmt: skip


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _cert_manager_secret(days: int = 90) -> dict[str, str]:
    """What cert-manager leaves: a CA certificate and a serving pair, no ``ca.key``."""
    ca = certs.make_ca("cert-manager-ca")
    serving = certs.make_serving(ca, certs.dns_names(names.SERVICE_NAME, NS), days=days)
    return {certs.CA_CERT: _b64(ca.cert_pem), certs.TLS_CERT: _b64(serving.cert_pem),
            certs.TLS_KEY: _b64(serving.key_pem)}  # fmt: skip


def _ca_bundles(fake: FakeCluster) -> set[str]:
    return {
        hook["clientConfig"].get("caBundle", "")
        for configuration in fake.webhook_configurations()
        for hook in configuration["webhooks"]
    }


class _Interleaved(CertificateStore):
    """A replica that reads the Secret, then lets another replica run to completion before
    its own write: the window in which both would make a CA."""

    def __init__(self, api_client: Any, other: Any) -> None:
        super().__init__(api_client)
        self._other = other

    def write_secret(self, *args: Any, **kwargs: Any) -> bool:
        other, self._other = self._other, None
        if other is not None:
            other()
        return super().write_secret(*args, **kwargs)


async def test_two_replicas_on_a_secret_without_ca_key_settle_on_one_ca(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    await asyncio.to_thread(install_secret, admin_kubeconfig, _cert_manager_secret())
    api_client = sync_api_client(str(fake_kubeconfig))
    plain = CertificateStore(api_client)
    results: dict[str, dict[str, str]] = {}

    def replica_a() -> None:
        results["a"] = selfmanaged.ensure(plain, namespace=NS, secret=SECRET,
                                          service=names.SERVICE_NAME)  # fmt: skip

    late = _Interleaved(api_client, replica_a)
    results["b"] = await asyncio.to_thread(
        selfmanaged.ensure, late, namespace=NS, secret=SECRET, service=names.SERVICE_NAME
    )
    api_client.close()

    stored = fake_kube.objects(SECRETS)[(NS, SECRET)]["data"]
    assert results["a"] == results["b"] == stored, "both replicas use what settled"
    assert certs.CA_KEY in stored
    first, late_put = fake_kube.requests_to("PUT", "/secrets/")
    assert first.body["data"] == stored
    assert late_put.body["metadata"]["resourceVersion"], "a replace with a precondition"
    assert late_put.body["data"] != stored, "the late replica's CA was refused"


async def test_racing_replicas_point_every_webhook_at_the_one_ca_in_the_secret(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    await asyncio.to_thread(install_secret, admin_kubeconfig, _cert_manager_secret())

    await asyncio.gather(*(asyncio.to_thread(selfmanaged.prepare,
                                             _args(tmp_path / str(i), fake_kubeconfig))
                           for i in range(4)))  # fmt: skip

    ca_pem = base64.b64decode(fake_kube.objects(SECRETS)[(NS, SECRET)]["data"][certs.CA_CERT])
    assert _ca_bundles(fake_kube) == {certs.ca_bundle(ca_pem)}
    for i in range(4):
        assert (tmp_path / str(i) / certs.CA_CERT).read_bytes() == ca_pem


async def test_two_replicas_on_the_shipped_empty_secret_keep_the_first_ca(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig)
    api_client = sync_api_client(str(fake_kubeconfig))
    plain = CertificateStore(api_client)
    results: dict[str, dict[str, str]] = {}

    def replica_a() -> None:
        results["a"] = selfmanaged.ensure(plain, namespace=NS, secret=SECRET,
                                          service=names.SERVICE_NAME)  # fmt: skip

    results["b"] = await asyncio.to_thread(
        selfmanaged.ensure, _Interleaved(api_client, replica_a), namespace=NS, secret=SECRET,
        service=names.SERVICE_NAME,
    )  # fmt: skip
    api_client.close()

    assert results["a"] == results["b"] == fake_kube.objects(SECRETS)[(NS, SECRET)]["data"]
    first, late_put = fake_kube.requests_to("PUT", "/secrets/")
    assert first.body["data"] == fake_kube.objects(SECRETS)[(NS, SECRET)]["data"]
    assert late_put.body["metadata"]["resourceVersion"], "a replace with a precondition"
    assert late_put.body["data"] != first.body["data"], "the late replica's CA was refused"
    assert len(fake_kube.requests_to("POST", "/secrets$")) == 1, "only the install's create"


def test_serving_certificates_are_issued_for_90_days_and_renewed_at_two_thirds() -> None:
    ca = certs.make_ca()
    serving = certs.make_serving(ca, ["autowrap"], days=selfmanaged.SERVING_DAYS)
    data = {certs.TLS_CERT: _b64(serving.cert_pem)}
    cert = x509.load_pem_x509_certificate(serving.cert_pem)
    start = cert.not_valid_before_utc

    due = selfmanaged.renew_time(data)

    # Issued with five minutes of clock skew allowed before now: 60 days after that, give or take.
    assert abs(due - (start + datetime.timedelta(days=60))) < datetime.timedelta(minutes=5)
    assert selfmanaged.next_check(data, now=due - datetime.timedelta(minutes=10)) == 600.0
    assert selfmanaged.next_check(data, now=start) == selfmanaged.CHECK_EVERY.total_seconds()
    assert selfmanaged.next_check(data, now=due + datetime.timedelta(days=1)) == 1.0


async def test_the_timer_renews_a_due_certificate_while_the_server_runs(
    fake_kube: FakeCluster,
    fake_kubeconfig: Path,
    admin_kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig)
    args = _args(tmp_path, fake_kubeconfig)
    first = await asyncio.to_thread(selfmanaged.prepare, args)
    # Time passes: the certificate in the Secret is now one with days to go.
    ca = certs.Pair(base64.b64decode(first[certs.CA_CERT]), base64.b64decode(first[certs.CA_KEY]))
    short = certs.make_serving(ca, certs.dns_names(names.SERVICE_NAME, NS), days=5)
    secret = fake_kube.objects(SECRETS)[(NS, SECRET)]
    secret["data"].update(
        {certs.TLS_CERT: _b64(short.cert_pem), certs.TLS_KEY: _b64(short.key_pem)}
    )
    fake_kube.store.update(SECRETS, secret)
    monkeypatch.setattr(selfmanaged, "next_check", lambda data, now=None: 0.01)
    renewal = selfmanaged.Renewal(args, first)

    task = asyncio.create_task(renewal.run())
    for _ in range(200):
        await asyncio.sleep(0.05)
        if renewal.data[certs.TLS_CERT] not in (first[certs.TLS_CERT], _b64(short.cert_pem)):
            break
    task.cancel()

    on_disk = x509.load_pem_x509_certificate((tmp_path / certs.TLS_CERT).read_bytes())
    left = on_disk.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert left > datetime.timedelta(days=selfmanaged.SERVING_DAYS - 1)
    assert fake_kube.objects(SECRETS)[(NS, SECRET)]["data"][certs.CA_CERT] == first[certs.CA_CERT]
    assert (tmp_path / certs.TLS_CERT).read_bytes() == base64.b64decode(
        fake_kube.objects(SECRETS)[(NS, SECRET)]["data"][certs.TLS_CERT]
    )
    metrics = Metrics(in_flight=lambda: 0)
    metrics.follow_certificate(lambda: tmp_path / certs.TLS_CERT)
    exposed = {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
    }
    expiry = exposed["autowrap_certificate_expiry_timestamp_seconds"]
    assert expiry == on_disk.not_valid_after_utc.timestamp(), "the metric follows the renewal"


async def test_a_blanked_serving_pair_is_reissued_under_the_ca_in_the_secret(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    # Upgrading from a release that created the Secret itself: `kubectl apply` of the shipped,
    # empty Secret over it blanks tls.crt and tls.key and keeps ca.crt and ca.key.
    ca = certs.make_ca()
    blanked = {certs.CA_CERT: _b64(ca.cert_pem), certs.CA_KEY: _b64(ca.key_pem),
               certs.TLS_CERT: "", certs.TLS_KEY: ""}  # fmt: skip
    await asyncio.to_thread(install_secret, admin_kubeconfig, blanked)
    api_client = sync_api_client(str(fake_kubeconfig))
    store = CertificateStore(api_client)

    settled = await asyncio.to_thread(
        selfmanaged.ensure, store, namespace=NS, secret=SECRET, service=names.SERVICE_NAME
    )
    api_client.close()

    assert settled[certs.CA_CERT] == blanked[certs.CA_CERT], "the caBundle stays"
    served = x509.load_pem_x509_certificate(base64.b64decode(settled[certs.TLS_CERT]))
    assert served.issuer == x509.load_pem_x509_certificate(ca.cert_pem).subject
    assert fake_kube.objects(SECRETS)[(NS, SECRET)]["data"] == settled
