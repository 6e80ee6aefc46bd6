"""Self-managed certificates: replicas share one Secret, shipped empty by the install, and the
webhook configurations' caBundle follows the CA in it, through the real Kubernetes client
against the fake API."""

from __future__ import annotations

import asyncio
import base64
import datetime
from argparse import Namespace
from pathlib import Path

import pytest
from cryptography import x509

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.common import DEFAULT_TOKEN
from testbed.cluster.rbac import REPO
from testbed.cluster.resources import SECRETS
from testbed.redirect import webhook_configurations
from webhook.model import names
from webhook.shell import certs, selfmanaged
from webhook.shell.kube import CertificateStore, sync_api_client

SECRET = "autowrap-serving-cert"
CONFIGURATIONS = "autowrap-mutating,autowrap-validating"
SELF_MANAGED = REPO / "deploy" / "overlays" / "self-managed"


def under_self_managed_rbac(fake: FakeCluster, namespace: str = names.SERVICE_NAMESPACE) -> None:
    """autowrap's requests authorized by what deploy/overlays/self-managed grants it (its
    Secret, the webhook configurations' caBundles), installed into ``namespace``."""
    fake.authorize_autowrap(DEFAULT_TOKEN, manifests=SELF_MANAGED, namespace=namespace)


@pytest.fixture
def fake_kube(fake_kube: FakeCluster) -> FakeCluster:
    """autowrap under the grants of the self-managed overlay."""
    under_self_managed_rbac(fake_kube)
    return fake_kube


def _args(cert_dir: Path, kubeconfig: Path) -> Namespace:
    return Namespace(
        cert_dir=str(cert_dir),
        kubeconfig=str(kubeconfig),
        cert_secret=SECRET,
        webhook_configurations=CONFIGURATIONS,
    )


def install_empty_secret(kubeconfig: Path, namespace: str = names.SERVICE_NAMESPACE) -> None:
    """What `kubectl apply` of the self-managed manifests creates
    (deploy/overlays/self-managed/secret.yaml): the TLS Secret with both keys empty.
    ``kubeconfig``: the installer's (autowrap may not create Secrets)."""
    install_secret(kubeconfig, {certs.TLS_CERT: "", certs.TLS_KEY: ""}, namespace)


def install_secret(
    kubeconfig: Path, data: dict[str, str], namespace: str = names.SERVICE_NAMESPACE
) -> None:
    """A Secret written by someone else (cert-manager, an older release, the installer)."""
    api_client = sync_api_client(str(kubeconfig))
    try:
        CertificateStore(api_client).write_secret(namespace, SECRET, data, create=True)
    finally:
        api_client.close()


def _ca_bundles(fake: FakeCluster) -> set[str]:
    return {
        hook["clientConfig"].get("caBundle", "")
        for configuration in fake.webhook_configurations()
        for hook in configuration["webhooks"]
    }


def _secret_pem(fake: FakeCluster, key: str) -> bytes:
    return base64.b64decode(fake.objects(SECRETS)[(names.SERVICE_NAMESPACE, SECRET)]["data"][key])


async def test_the_first_replica_fills_the_shipped_secret_and_points_every_webhook_at_its_ca(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig)
    created = len(fake_kube.requests_to("POST", "/secrets$"))

    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path, fake_kubeconfig))

    assert len(fake_kube.requests_to("POST", "/secrets$")) == created, "autowrap creates none"
    (put,) = fake_kube.requests_to("PUT", "/secrets/")
    assert put.body["metadata"]["resourceVersion"], "a replace with a precondition"

    ca_pem = _secret_pem(fake_kube, certs.CA_CERT)
    assert _ca_bundles(fake_kube) == {certs.ca_bundle(ca_pem)}
    assert (tmp_path / certs.TLS_CERT).read_bytes() == _secret_pem(fake_kube, certs.TLS_CERT)
    assert (tmp_path / certs.CA_CERT).read_bytes() == ca_pem
    assert not (tmp_path / certs.CA_KEY).exists(), "the CA key stays in the Secret"
    served = x509.load_pem_x509_certificate((tmp_path / certs.TLS_CERT).read_bytes())
    dns = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{names.SERVICE_NAME}.{names.SERVICE_NAMESPACE}.svc" in dns.get_values_for_type(
        x509.DNSName
    )


async def test_a_second_replica_reuses_the_secret_and_changes_nothing(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig)
    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path / "a", fake_kubeconfig))
    patches_before = len(fake_kube.requests_to("PATCH", "webhookconfigurations"))

    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path / "b", fake_kubeconfig))

    assert (tmp_path / "a" / certs.TLS_CERT).read_bytes() == (
        tmp_path / "b" / certs.TLS_CERT
    ).read_bytes()
    assert len(fake_kube.requests_to("PATCH", "webhookconfigurations")) == patches_before
    assert len(fake_kube.requests_to("PUT", "/secrets/")) == 1


async def test_a_serving_certificate_close_to_expiry_is_renewed_under_the_same_ca(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    ca = certs.make_ca()
    old = certs.make_serving(ca, certs.dns_names(names.SERVICE_NAME, names.SERVICE_NAMESPACE),
                             days=10)  # fmt: skip
    data = {
        certs.CA_CERT: base64.b64encode(ca.cert_pem).decode(),
        certs.CA_KEY: base64.b64encode(ca.key_pem).decode(),
        certs.TLS_CERT: base64.b64encode(old.cert_pem).decode(),
        certs.TLS_KEY: base64.b64encode(old.key_pem).decode(),
    }
    await asyncio.to_thread(install_secret, admin_kubeconfig, data)
    api_client = sync_api_client(str(fake_kubeconfig))
    store = CertificateStore(api_client)

    renewed = await asyncio.to_thread(
        selfmanaged.ensure, store, namespace=names.SERVICE_NAMESPACE, secret=SECRET,
        service=names.SERVICE_NAME,
    )  # fmt: skip
    api_client.close()

    assert renewed[certs.CA_CERT] == data[certs.CA_CERT]
    assert renewed[certs.TLS_CERT] != data[certs.TLS_CERT]
    cert = x509.load_pem_x509_certificate(base64.b64decode(renewed[certs.TLS_CERT]))
    left = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert left > selfmanaged.RENEW_BEFORE
    assert _secret_pem(fake_kube, certs.TLS_CERT) == base64.b64decode(renewed[certs.TLS_CERT])


async def test_a_missing_secret_is_an_install_error_and_nothing_is_created(
    fake_kube: FakeCluster, fake_kubeconfig: Path, tmp_path: Path
) -> None:
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)

    with pytest.raises(selfmanaged.MissingSecret) as raised:
        await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path, fake_kubeconfig))

    message = str(raised.value)
    assert f"Secret {names.SERVICE_NAMESPACE}/{SECRET} not found" in message
    assert "re-apply" in message and "kubectl create secret" in message
    assert not fake_kube.requests_to("POST", "/secrets"), "autowrap has no create on Secrets"
    assert (names.SERVICE_NAMESPACE, SECRET) not in fake_kube.objects(SECRETS)


async def test_filling_the_secret_keeps_its_installers_labels_and_annotations(
    fake_kube: FakeCluster, fake_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    """The Secret is the installer's: Helm finds its release by these annotations and
    `autowrap uninstall` finds autowrap's objects by the part-of label."""
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig)
    key = (names.SERVICE_NAMESPACE, SECRET)
    stored = fake_kube.objects(SECRETS)[key]
    marks = {
        "labels": {"app.kubernetes.io/part-of": "autowrap",
                   "app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "autowrap",
                        "meta.helm.sh/release-namespace": names.SERVICE_NAMESPACE},
    }  # fmt: skip
    fake_kube.store.update(SECRETS, {**stored, "metadata": {**stored["metadata"], **marks}})

    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path, fake_kubeconfig))

    filled = fake_kube.objects(SECRETS)[key]
    assert filled["data"][certs.TLS_CERT], "the Secret was filled"
    assert filled["metadata"]["labels"] == marks["labels"]
    assert filled["metadata"]["annotations"] == marks["annotations"]
