"""Self-managed certificates follow the install: the Secret and the certificate's DNS names use
the pod's namespace (POD_NAMESPACE) and the Service name from --service-name."""

from __future__ import annotations

import asyncio
import base64
from argparse import Namespace
from pathlib import Path

import pytest
from cryptography import x509

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import SECRETS
from testbed.redirect import webhook_configurations
from tests.server.test_self_managed import install_empty_secret, under_self_managed_rbac
from webhook.cli import main as cli
from webhook.controller import own_namespace
from webhook.model import names
from webhook.shell import certs, selfmanaged

SECRET = "autowrap-serving-cert"


def _serve_args(*argv: str) -> Namespace:
    return cli.parser().parse_args(["serve", *argv])


def _dns_names(pem: bytes) -> list[str]:
    served = x509.load_pem_x509_certificate(pem)
    san = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return san.get_values_for_type(x509.DNSName)


def test_service_name_defaults_to_autowrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.SERVICE_NAME_ENV_VAR, raising=False)
    assert _serve_args().service_name == names.SERVICE_NAME


def test_service_name_from_the_environment_and_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.SERVICE_NAME_ENV_VAR, "from-env")
    assert _serve_args().service_name == "from-env"
    assert _serve_args("--service-name", "from-flag").service_name == "from-flag"


async def test_the_certificate_follows_the_pod_namespace_and_service_name(
    fake_kube: FakeCluster,
    fake_kubeconfig: Path,
    admin_kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    under_self_managed_rbac(fake_kube, "platform-webhooks")
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    monkeypatch.setenv("POD_NAMESPACE", "platform-webhooks")
    args = Namespace(
        install_namespace=own_namespace(None),
        cert_dir=str(tmp_path),
        kubeconfig=str(fake_kubeconfig),
        cert_secret=SECRET,
        webhook_configurations="autowrap-mutating,autowrap-validating",
        service_name="jobwrap",
    )

    fake_kube.add_namespace("platform-webhooks")
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig, "platform-webhooks")
    await asyncio.to_thread(selfmanaged.prepare, args)

    assert ("platform-webhooks", SECRET) in fake_kube.objects(SECRETS)
    assert (names.SERVICE_NAMESPACE, SECRET) not in fake_kube.objects(SECRETS)
    stored = fake_kube.objects(SECRETS)[("platform-webhooks", SECRET)]["data"][certs.TLS_CERT]
    served = (tmp_path / certs.TLS_CERT).read_bytes()
    assert served == base64.b64decode(stored)
    dns = _dns_names(served)
    assert "jobwrap.platform-webhooks.svc" in dns
    assert not any(n.startswith(f"{names.SERVICE_NAME}.") for n in dns)
    assert not any(names.SERVICE_NAMESPACE in n for n in dns)


def test_serve_resolves_the_install_namespace_from_the_pod_before_preparing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from webhook import app

    seen: list[Namespace] = []

    def stop(args: Namespace) -> dict[str, str]:
        seen.append(args)
        raise RuntimeError("stop here")

    monkeypatch.setenv("POD_NAMESPACE", "platform-webhooks")
    monkeypatch.setattr(selfmanaged, "prepare", stop)
    args = _serve_args("--self-managed-certs", "--cert-dir", "/nonexistent")

    assert app.main(args) == 1

    assert [a.install_namespace for a in seen] == ["platform-webhooks"]
