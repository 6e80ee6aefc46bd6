"""Certificates: a CA and a serving certificate for ``<service>.<namespace>.svc``, and a
TLS context that picks up replaced certificate files without a restart.

Mounted Secrets are updated by kubelet through a symlink swap that sends no reliable file
events, so the files are re-read and hashed on a timer (as kopf and controller-runtime do),
and the new pair is loaded into the *live* server context: new handshakes use it, open
connections finish with the old one.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ssl
import tempfile
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"


@dataclass(frozen=True)
class Pair:
    cert_pem: bytes
    key_pem: bytes


def dns_names(service: str, namespace: str) -> list[str]:
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(common_name: str = "autowrap-ca", days: int = 3650) -> Pair:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def make_serving(ca: Pair, names: list[str], days: int = 365) -> Pair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def write(out: Path, ca: Pair, serving: Pair, *, ca_key: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = {CA_CERT: ca.cert_pem, TLS_CERT: serving.cert_pem, TLS_KEY: serving.key_pem}
    if ca_key:
        files[CA_KEY] = ca.key_pem
    for file_name, data in files.items():
        path = out / file_name
        path.write_bytes(data)
        if file_name.endswith(".key"):
            path.chmod(0o600)


def ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode()


def main(args: Namespace, out: TextIO) -> int:
    """``autowrap certs``: write the four files and print the caBundle."""
    ca = make_ca()
    serving = make_serving(ca, dns_names(args.service, args.namespace))
    write(Path(args.out), ca, serving)
    print(ca_bundle(ca.cert_pem), file=out)
    return 0


def development_pair(service: str, namespace: str) -> Path:
    """A throwaway CA and serving pair for ``autowrap serve`` without ``--cert-dir``."""
    directory = Path(tempfile.mkdtemp(prefix="autowrap-certs-"))
    ca = make_ca("autowrap-development-ca", days=30)
    serving = make_serving(ca, [*dns_names(service, namespace), "localhost"], days=30)
    write(directory, ca, serving, ca_key=False)
    return directory


class ReloadingContext:
    """A server SSLContext (TLS ≥ 1.2) whose certificate follows the files on disk."""

    def __init__(self, cert_dir: Path) -> None:
        self.cert_dir = cert_dir
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.digest = ""
        self.reloads = 0
        self.reload()

    def _files(self) -> tuple[Path, Path]:
        return self.cert_dir / TLS_CERT, self.cert_dir / TLS_KEY

    def reload(self) -> bool:
        """Load the pair if it changed; raises OSError/ssl.SSLError when it cannot be loaded
        (the previous pair stays in use).

        The bytes read once are checked in a scratch context before the live one loads them:
        OpenSSL drops the live key when a certificate that does not match it is loaded, so a
        pair caught mid-rotation (new certificate, old key) would fail every new handshake.
        """
        cert, key = self._files()
        cert_pem, key_pem = cert.read_bytes(), key.read_bytes()
        digest = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if digest == self.digest:
            return False
        with tempfile.TemporaryDirectory(prefix="autowrap-tls-") as scratch:
            cert_copy, key_copy = Path(scratch) / TLS_CERT, Path(scratch) / TLS_KEY
            cert_copy.write_bytes(cert_pem)
            key_copy.touch(mode=0o600)
            key_copy.write_bytes(key_pem)
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_copy, key_copy)
            self.context.load_cert_chain(cert_copy, key_copy)
        self.digest = digest
        self.reloads += 1
        return True


class ClientCA:
    """The CAs whose client certificates may call the admission routes (``--client-ca-file``),
    followed on disk like the serving pair.

    The handshake verifies the chain in OpenSSL (the server context asks for a certificate,
    ``CERT_OPTIONAL``, so that kubelet's probes without one still reach /healthz and /readyz).
    OpenSSL's store only grows, so a CA removed from the file would stay trusted by the
    handshake until a restart: each admission request therefore also checks that its peer's
    certificate was issued directly by a CA that is in the file *now*.
    """

    def __init__(self, path: Path, context: ssl.SSLContext) -> None:
        self.path = path
        self.context = context
        self.digest = ""
        self.reloads = 0
        self.authorities: tuple[x509.Certificate, ...] = ()
        self._verified: dict[bytes, str] = {}
        context.verify_mode = ssl.CERT_OPTIONAL
        self.reload()

    def reload(self) -> bool:
        """Load the file if it changed; raises OSError/ValueError/ssl.SSLError when it cannot
        be used (the previous CAs stay in use)."""
        pem = self.path.read_bytes()
        digest = hashlib.sha256(pem).hexdigest()
        if digest == self.digest:
            return False
        authorities = tuple(x509.load_pem_x509_certificates(pem))
        self.context.load_verify_locations(cadata=pem.decode("ascii"))
        self.authorities = authorities
        self._verified = {}
        self.digest = digest
        self.reloads += 1
        return True

    def verify(self, peer_der: bytes | None) -> str | None:
        """Why a peer certificate (DER, from the handshake) may not call; None when it may."""
        if not peer_der:
            return (
                "a client certificate is required (autowrap serve --client-ca-file): "
                "kube-apiserver presents one when its AdmissionConfiguration gives a "
                "kubeconfig for this webhook"
            )
        if self._verified.get(peer_der) == self.digest:
            return None
        cert = x509.load_der_x509_certificate(peer_der)
        now = datetime.datetime.now(datetime.UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            return "the client certificate is not valid now"
        for authority in self.authorities:
            try:
                cert.verify_directly_issued_by(authority)
            except (ValueError, TypeError, InvalidSignature):
                continue
            if len(self._verified) >= 1024:
                self._verified.clear()
            self._verified[peer_der] = self.digest
            return None
        return "the client certificate was not issued by a CA in --client-ca-file"
