"""A throw-away PKI for TLS between the apiserver emulator and webhook servers under test.

kube-apiserver trusts a webhook only through the ``caBundle`` of its configuration and checks
the serving certificate against the service DNS name ``<svc>.<ns>.svc``; reproducing that
needs a real CA and a real serving certificate, not ``ssl.CERT_NONE``. The certificates are
the ones ``autowrap certs`` makes (``webhook.shell.certs``), so the tests exercise the product's own
PKI; this module only keeps the CA in memory, so tests can issue and rotate serving pairs.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from webhook.model.names import SERVICE_NAME, SERVICE_NAMESPACE
from webhook.shell import certs

CA_CERT_FILE = certs.CA_CERT
CERT_FILE = certs.TLS_CERT
KEY_FILE = certs.TLS_KEY


def service_dns_names(
    service: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE
) -> tuple[str, ...]:
    """The names a Service is reachable under; kube-apiserver dials ``<svc>.<ns>.svc``."""
    return tuple(certs.dns_names(service, namespace))


def service_hostname(service: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE) -> str:
    """The exact host name kube-apiserver uses for SNI and certificate verification."""
    return f"{service}.{namespace}.svc"


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that can issue serving certificates, kept in memory so tests can rotate certs."""

    pair: certs.Pair

    @classmethod
    def create(cls, common_name: str = "autowrap-test-ca") -> CertificateAuthority:
        return cls(certs.make_ca(common_name, days=30))

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.pair.cert_pem)

    @property
    def cert_pem(self) -> bytes:
        return self.pair.cert_pem

    def issue(self, dns_names: Iterable[str]) -> tuple[bytes, bytes]:
        """A serverAuth certificate for ``dns_names`` (in its subjectAltName); returns
        ``(cert_pem, key_pem)``."""
        names = list(dns_names)
        if not names:
            raise ValueError("a serving certificate needs at least one DNS name")
        serving = certs.make_serving(self.pair, names, days=7)
        return serving.cert_pem, serving.key_pem


@dataclass(frozen=True)
class ServingPki:
    """A CA plus one serving certificate, written as a Kubernetes TLS Secret would mount them."""

    directory: Path
    ca: CertificateAuthority
    cert_pem: bytes
    key_pem: bytes
    dns_names: tuple[str, ...]

    @property
    def ca_path(self) -> Path:
        return self.directory / CA_CERT_FILE

    @property
    def cert_path(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key_path(self) -> Path:
        return self.directory / KEY_FILE

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem

    @property
    def ca_bundle(self) -> str:
        """The value for ``clientConfig.caBundle`` (base64 of the PEM CA certificate)."""
        return base64.b64encode(self.ca_pem).decode("ascii")

    def server_context(self) -> ssl.SSLContext:
        return server_ssl_context(self.cert_path, self.key_path)

    def client_context(self) -> ssl.SSLContext:
        return client_ssl_context(self.ca_pem)


def write_pki(
    directory: Path,
    dns_names: Iterable[str] | None = None,
    ca: CertificateAuthority | None = None,
) -> ServingPki:
    """Create (or reuse) a CA, issue a serving cert and write ca.crt, tls.crt, tls.key."""
    names = tuple(dns_names) if dns_names is not None else service_dns_names()
    authority = ca or CertificateAuthority.create()
    cert_pem, key_pem = authority.issue(names)
    serving = certs.Pair(cert_pem, key_pem)
    certs.write(directory, authority.pair, serving, ca_key=False)
    return ServingPki(
        directory=directory, ca=authority, cert_pem=cert_pem, key_pem=key_pem, dns_names=names
    )


def server_ssl_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    """TLS ≥ 1.2 server context, the floor the admission service promises."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_path), str(key_path))
    return ctx


def client_ssl_context(ca_pem: bytes | str) -> ssl.SSLContext:
    """Verify peers against ``ca_pem`` only, never the system store, like a caBundle does."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    pem = ca_pem.decode("ascii") if isinstance(ca_pem, bytes) else ca_pem
    ctx.load_verify_locations(cadata=pem)
    return ctx
