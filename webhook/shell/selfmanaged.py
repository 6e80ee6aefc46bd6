"""Self-managed certificates: autowrap keeps its serving certificate in a Secret of its own
namespace and the caBundle of its webhook configurations current, without cert-manager.

The Secret is part of the install (deploy/overlays/self-managed/secret.yaml ships it empty), so
autowrap needs no ``create`` on Secrets: it only reads and replaces that one Secret by name. A
missing Secret is an install error, said as such. All replicas share the Secret, and one CA
wins: the Secret is replaced with its resourceVersion as a precondition (a replica that meets a
Conflict re-reads it), and every replica then uses what the Secret holds after the write
settled: the files in --cert-dir and the caBundles come from that re-read, never from what this
replica generated. So two replicas starting on an empty Secret, or on one without ``ca.key``
(what cert-manager leaves), end with one CA, not two caBundles fighting.

The serving certificate is issued for SERVING_DAYS and renewed at two thirds of its validity,
at start and on a timer while the pod runs (the CA, valid ten years, is kept, so the caBundle
does not change on renewal); the running server picks the new files up from --cert-dir.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
from argparse import Namespace
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from webhook.model import names
from webhook.shell import certs, opevents
from webhook.shell.kube import CertificateStore, sync_api_client

log = logging.getLogger("autowrap")
SERVING_DAYS = 90
# Renewed once two thirds of the validity have passed: 30 days before a 90-day certificate ends.
RENEW_AT = 2 / 3
RENEW_BEFORE = datetime.timedelta(days=SERVING_DAYS * (1 - RENEW_AT))
# How often the timer looks at the Secret at most (another replica may have renewed it, or the
# caBundles may have been overwritten by a re-apply of the manifests).
CHECK_EVERY = datetime.timedelta(hours=1)
ATTEMPTS = 5


class MissingSecret(RuntimeError):
    """The serving Secret the install should have created is not there."""

    def __init__(self, namespace: str, secret: str) -> None:
        super().__init__(
            f"Secret {namespace}/{secret} not found: --self-managed-certs writes the certificate "
            f"into an existing Secret and does not create one (autowrap has no create on "
            f"Secrets). The self-managed manifests ship it empty: re-apply them, or create it "
            f"with kubectl create secret generic {secret} -n {namespace} --type "
            f"kubernetes.io/tls --from-literal=tls.crt= --from-literal=tls.key="
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data.get(key, ""))


def renew_time(data: dict[str, str]) -> datetime.datetime:
    """When the Secret's serving certificate is due for renewal: at two thirds of its validity,
    and never later than RENEW_BEFORE its end (a short-lived certificate someone put there)."""
    cert = x509.load_pem_x509_certificate(_unb64(data, certs.TLS_CERT))
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return min(start + (end - start) * RENEW_AT, end - RENEW_BEFORE)


def _usable(data: dict[str, str] | None) -> bool:
    """A CA pair and a serving pair, the serving certificate readable and not yet due. An empty
    or unreadable serving certificate (the shipped Secret, or one a `kubectl apply` of the
    manifests over a Secret made before it was shipped blanked) is re-issued, under the CA in
    the Secret when there is one, so the caBundle stays."""
    if not data or not all(
        data.get(k) for k in (certs.CA_CERT, certs.CA_KEY, certs.TLS_CERT, certs.TLS_KEY)
    ):
        return False
    try:
        due = renew_time(data)
    except ValueError:
        return False
    return datetime.datetime.now(datetime.UTC) < due


def ensure(store: CertificateStore, *, namespace: str, secret: str, service: str) -> dict[str, str]:
    """The Secret's data once settled, creating or renewing the pair where needed.

    Whatever this replica generates is only a proposal: the write is a replace at the
    resourceVersion read, and the answer is always the Secret as read back. The Secret must
    exist (the install ships it); autowrap does not create it.
    """
    for _ in range(ATTEMPTS):
        found = store.read_secret_version(namespace, secret)
        if found is None:
            raise MissingSecret(namespace, secret)
        data, version = found
        if _usable(data):
            assert data is not None
            return data
        if data.get(certs.CA_CERT) and data.get(certs.CA_KEY):
            ca = certs.Pair(_unb64(data, certs.CA_CERT), _unb64(data, certs.CA_KEY))
        else:
            ca = certs.make_ca()
        serving = certs.make_serving(ca, certs.dns_names(service, namespace), days=SERVING_DAYS)
        fresh = {
            certs.CA_CERT: _b64(ca.cert_pem),
            certs.CA_KEY: _b64(ca.key_pem),
            certs.TLS_CERT: _b64(serving.cert_pem),
            certs.TLS_KEY: _b64(serving.key_pem),
        }
        written = store.write_secret(
            namespace, secret, fresh, create=False, resource_version=version
        )
        if not written:
            log.info("another replica wrote the certificate Secret first; using its contents",
                     extra={"fields": {"secret": f"{namespace}/{secret}"}})  # fmt: skip
        else:
            opevents.emit("CertificateRenewed", f"wrote a new serving certificate to Secret "
                          f"{namespace}/{secret}")  # fmt: skip
        # Written or not, loop to read what settled; a usable Secret is returned above.
    raise RuntimeError(f"could not settle Secret {namespace}/{secret} after {ATTEMPTS} attempts")


def prepare(args: Namespace) -> dict[str, str]:
    """Before serving (and again on each renewal check): the Secret exists and has settled, its
    files are in --cert-dir, the caBundles match its CA. Returns the Secret's data."""
    if not args.cert_dir:
        raise SystemExit("error: --self-managed-certs needs --cert-dir (an emptyDir) to write to")
    # The Secret lives, and the certificate is issued for <service>.<namespace>.svc, in the
    # install namespace: the pod's (POD_NAMESPACE), which `serve` resolves before calling this.
    namespace = getattr(args, "install_namespace", None) or names.SERVICE_NAMESPACE
    service = getattr(args, "service_name", None) or names.SERVICE_NAME
    api_client = sync_api_client(args.kubeconfig)
    try:
        store = CertificateStore(api_client)
        data = ensure(store, namespace=namespace, secret=args.cert_secret, service=service)
        out = Path(args.cert_dir)
        ca = certs.Pair(_unb64(data, certs.CA_CERT), b"")
        serving = certs.Pair(_unb64(data, certs.TLS_CERT), _unb64(data, certs.TLS_KEY))
        if _changed(out, ca, serving):
            certs.write(out, ca, serving, ca_key=False)
        bundle = _b64(ca.cert_pem)
        for configuration in filter(None, args.webhook_configurations.split(",")):
            changed = store.set_ca_bundle(configuration, bundle)
            if changed:
                log.info(
                    "caBundle updated",
                    extra={"fields": {"configuration": configuration, "updated": changed}},
                )
                opevents.emit("CABundleRepaired", f"caBundle of {configuration} set to the "
                              f"self-managed CA ({changed} webhook(s) changed)")  # fmt: skip
    finally:
        api_client.close()
    return data


def _changed(out: Path, ca: certs.Pair, serving: certs.Pair) -> bool:
    try:
        return (
            (out / certs.CA_CERT).read_bytes() != ca.cert_pem
            or (out / certs.TLS_CERT).read_bytes() != serving.cert_pem
            or (out / certs.TLS_KEY).read_bytes() != serving.key_pem
        )
    except OSError:
        return True


def next_check(data: dict[str, str], now: datetime.datetime | None = None) -> float:
    """Seconds until the timer looks again: at the renewal time, and at least every CHECK_EVERY."""
    now = now or datetime.datetime.now(datetime.UTC)
    due = renew_time(data) - now
    return max(1.0, min(due, CHECK_EVERY).total_seconds())


@dataclass
class Renewal:
    """The timer that keeps the self-managed certificate current while the server runs."""

    args: Namespace
    data: dict[str, str]

    async def run(self) -> None:
        while True:
            await asyncio.sleep(next_check(self.data))
            try:
                self.data = await asyncio.to_thread(prepare, self.args)
            except Exception as exc:  # the API may be briefly away; the next check retries
                log.error("self-managed certificate check failed; retrying",
                          extra={"fields": {"error": str(exc)}})  # fmt: skip
                await asyncio.sleep(60.0)
