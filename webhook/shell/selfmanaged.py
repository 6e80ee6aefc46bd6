"""Self-managed certificates: autowrap keeps its serving certificate in a Secret of its own
namespace and the caBundle of its webhook configurations current, without cert-manager.

All replicas share one Secret: the first to start creates it, a replica that loses the race
reads the winner's. The serving certificate is renewed at start when it has less than 30 days
left (the CA, valid ten years, is kept, so the caBundle does not change on renewal).
"""

from __future__ import annotations

import base64
import datetime
import logging
from argparse import Namespace
from pathlib import Path

from cryptography import x509

from webhook import names
from webhook.shell import certs
from webhook.shell.kube import CertificateStore, sync_api_client

log = logging.getLogger("autowrap")
RENEW_BEFORE = datetime.timedelta(days=30)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data.get(key, ""))


def _usable(data: dict[str, str] | None) -> bool:
    if not data or not all(
        k in data for k in (certs.CA_CERT, certs.CA_KEY, certs.TLS_CERT, certs.TLS_KEY)
    ):
        return False
    cert = x509.load_pem_x509_certificate(_unb64(data, certs.TLS_CERT))
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > RENEW_BEFORE


def ensure(store: CertificateStore, *, namespace: str, secret: str, service: str) -> dict[str, str]:
    """The Secret's data, creating or renewing the pair where needed."""
    for _ in range(3):
        data = store.read_secret(namespace, secret)
        if _usable(data):
            assert data is not None
            return data
        if data and certs.CA_CERT in data and certs.CA_KEY in data:
            ca = certs.Pair(_unb64(data, certs.CA_CERT), _unb64(data, certs.CA_KEY))
        else:
            ca = certs.make_ca()
        serving = certs.make_serving(ca, certs.dns_names(service, namespace))
        fresh = {
            certs.CA_CERT: _b64(ca.cert_pem),
            certs.CA_KEY: _b64(ca.key_pem),
            certs.TLS_CERT: _b64(serving.cert_pem),
            certs.TLS_KEY: _b64(serving.key_pem),
        }
        if store.write_secret(namespace, secret, fresh, create=data is None):
            return fresh
    raise RuntimeError(f"could not settle Secret {namespace}/{secret} after 3 attempts")


def prepare(args: Namespace) -> None:
    """Before serving: the Secret exists, its files are in --cert-dir, the caBundles match."""
    if not args.cert_dir:
        raise SystemExit("error: --self-managed-certs needs --cert-dir (an emptyDir) to write to")
    api_client = sync_api_client(args.kubeconfig)
    store = CertificateStore(api_client)
    namespace = names.SERVICE_NAMESPACE
    data = ensure(store, namespace=namespace, secret=args.cert_secret, service=names.SERVICE_NAME)
    out = Path(args.cert_dir)
    ca = certs.Pair(_unb64(data, certs.CA_CERT), b"")
    serving = certs.Pair(_unb64(data, certs.TLS_CERT), _unb64(data, certs.TLS_KEY))
    certs.write(out, ca, serving, ca_key=False)
    bundle = _b64(ca.cert_pem)
    for configuration in filter(None, args.webhook_configurations.split(",")):
        changed = store.set_ca_bundle(configuration, bundle)
        log.info(
            "caBundle checked",
            extra={"fields": {"configuration": configuration, "updated": changed}},
        )
    api_client.close()
