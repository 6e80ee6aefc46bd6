"""A throw-away PKI for TLS between the apiserver emulator and webhook servers under test.

kube-apiserver trusts a webhook only through the ``caBundle`` of its configuration and checks
the serving certificate against the service DNS name ``<svc>.<ns>.svc``; reproducing that
needs a real CA and a real serving certificate, not ``ssl.CERT_NONE``. ECDSA P-256 keys are
the default because they are generated in microseconds; RSA is available for code paths
that care about the key type.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.names import SERVICE_NAME, SERVICE_NAMESPACE

KeyType = Literal["ec", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

CA_CERT_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


def service_dns_names(
    service: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE
) -> tuple[str, ...]:
    """The names a Service is reachable under; kube-apiserver dials ``<svc>.<ns>.svc``."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def service_hostname(service: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE) -> str:
    """The exact host name kube-apiserver uses for SNI and certificate verification."""
    return f"{service}.{namespace}.svc"


def _new_key(key_type: KeyType) -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA that can issue serving certificates, kept in memory so tests can rotate certs."""

    cert: x509.Certificate
    key: PrivateKey

    @classmethod
    def create(
        cls, common_name: str = "autowrap-test-ca", key_type: KeyType = "ec"
    ) -> CertificateAuthority:
        """Self-sign a CA valid from one hour ago (clock skew) for 30 days."""
        key = _new_key(key_type)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert=cert, key=key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        dns_names: Iterable[str],
        ip_addresses: Iterable[str] = (),
        key_type: KeyType = "ec",
        valid_for: datetime.timedelta = datetime.timedelta(days=7),
    ) -> tuple[bytes, bytes]:
        """Issue a serverAuth certificate; returns ``(cert_pem, key_pem)``.

        Names go into the subjectAltName only: modern TLS clients (Go's included) ignore the
        common name for host-name checks, so a certificate that relied on it would be wrong.
        """
        names = list(dns_names)
        if not names:
            raise ValueError("a serving certificate needs at least one DNS name")
        key = _new_key(key_type)
        now = _now()
        san: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        san += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + valid_for)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(san), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


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
    key_type: KeyType = "ec",
) -> ServingPki:
    """Create (or reuse) a CA, issue a serving cert and write ca.crt, tls.crt, tls.key."""
    names = tuple(dns_names) if dns_names is not None else service_dns_names()
    authority = ca or CertificateAuthority.create(key_type=key_type)
    cert_pem, key_pem = authority.issue(names, ip_addresses=("127.0.0.1",), key_type=key_type)
    directory.mkdir(parents=True, exist_ok=True)
    pki = ServingPki(
        directory=directory, ca=authority, cert_pem=cert_pem, key_pem=key_pem, dns_names=names
    )
    pki.ca_path.write_bytes(authority.cert_pem)
    pki.cert_path.write_bytes(cert_pem)
    pki.key_path.write_bytes(key_pem)
    pki.key_path.chmod(0o600)
    return pki


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
