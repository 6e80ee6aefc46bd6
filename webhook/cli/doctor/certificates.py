"""The serving certificate as the apiserver meets it: every webhook's caBundle against the
certificate each ready replica presents now, and how long that certificate has left."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.x509 import verification

from webhook.cli.doctor.facts import (
    CERT_EXPIRY_WARN_DAYS,
    MUTATING,
    VALIDATING,
    Facts,
    Obj,
    hooks_of,
)
from webhook.cli.doctor.findings import FAIL, OK, WARN, Finding
from webhook.model import names
from webhook.model.objects import as_map


def _bundle(hook: Obj) -> list[x509.Certificate] | str:
    raw = as_map(hook.get("clientConfig")).get("caBundle")
    if not raw:
        return "caBundle is empty"
    try:
        return x509.load_pem_x509_certificates(base64.b64decode(str(raw)))
    except ValueError as exc:
        return f"caBundle is not base64 PEM certificates ({exc})"


def verify(
    bundle: Sequence[x509.Certificate], presented: bytes, host: str, now: datetime.datetime
) -> str:
    """Why ``bundle`` does not verify the presented certificate for ``host``, or "" when it
    does: the chain to a certificate of the bundle, validity at ``now`` and the subjectAltName,
    as kube-apiserver checks a webhook (Go's crypto/x509 Verify). The web PKI's extension rules
    (an authority key identifier, ...) are not the apiserver's, so any extensions pass."""
    permissive = verification.ExtensionPolicy.permit_all()
    # The CA must be one (basicConstraints cA), as Go requires of every issuer in the chain.
    ca_policy = permissive.require_present(
        x509.BasicConstraints, verification.Criticality.AGNOSTIC, None
    )
    # Go matches the host against the subjectAltName only (no common-name fallback).
    ee_policy = permissive.require_present(
        x509.SubjectAlternativeName, verification.Criticality.AGNOSTIC, None
    )
    try:
        leaf = x509.load_der_x509_certificate(presented)
        verifier = (
            verification.PolicyBuilder()
            .store(verification.Store(list(bundle)))
            .time(now)
            .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
            .build_server_verifier(x509.DNSName(host))
        )
        verifier.verify(leaf, [])
    except (ValueError, verification.VerificationError) as exc:
        return str(exc) or type(exc).__name__
    return ""


def ca_bundles(facts: Facts) -> list[Finding]:
    host = f"{names.SERVICE_NAME}.{facts.install_namespace}.svc"
    presented = [r for r in facts.replicas if r.certificate]
    hooks = {f"{cname}/{n}": h for cname, conf in ((MUTATING, facts.mutating),
                                                  (VALIDATING, facts.validating))
             for n, h in hooks_of(conf).items()}  # fmt: skip
    if not hooks:
        return []
    fix_cmd = ("kubectl", "-n", facts.install_namespace, "rollout", "restart",
               f"deployment/{names.SERVICE_NAME}")  # fmt: skip
    fix = ("the self-managed variant rewrites caBundle when a replica starts (restart it); "
           "cert-manager's CA injector rewrites it from the Certificate's CA; with your own "
           "certificate, patch every webhook's clientConfig.caBundle with the base64 CA")  # fmt: skip
    if not presented:
        errors = "; ".join(f"{r.address}:{r.port}: {r.error}" for r in facts.replicas if r.error)
        return [Finding("autowrap", "ca-bundle", WARN,
                        "no serving certificate could be fetched from the Service's endpoints"
                        + (f" ({errors})" if errors else ""),
                        "run doctor where pod IPs are reachable (inside the cluster), or check "
                        "the endpoints below")]  # fmt: skip
    bad: list[str] = []
    for label, hook in hooks.items():
        bundle = _bundle(hook)
        if isinstance(bundle, str):
            bad.append(f"{label}: {bundle}")
            continue
        for replica in presented:
            assert replica.certificate is not None
            why = verify(bundle, replica.certificate, host, facts.now)
            if why:
                bad.append(f"{label}: does not verify the certificate of "
                           f"{replica.pod or replica.address} ({why})")  # fmt: skip
    out = []
    if bad:
        shown_bad = "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
        out.append(Finding("autowrap", "ca-bundle", FAIL,
                           f"{shown_bad}: the apiserver refuses to call these webhooks, and every "
                           "wrapped submission fails closed", fix, fix_cmd))  # fmt: skip
    else:
        out.append(Finding("autowrap", "ca-bundle", OK,
                           f"all {len(hooks)} caBundles verify the certificate each of "
                           f"{len(presented)} replica(s) presents for {host}"))  # fmt: skip
    for replica in presented:
        assert replica.certificate is not None
        try:
            expires = x509.load_der_x509_certificate(replica.certificate).not_valid_after_utc
        except ValueError:
            continue
        left = expires - facts.now
        who = replica.pod or replica.address
        when = expires.strftime("%Y-%m-%d %H:%M UTC")
        if left <= datetime.timedelta(0):
            out.append(Finding("autowrap", "certificate-expiry", FAIL,
                               f"{who}: the serving certificate expired {when}",
                               "renew it (self-managed: restart; cert-manager: kubectl cert-manager "
                               "renew; your own: replace the Secret)", fix_cmd))  # fmt: skip
        elif left < datetime.timedelta(days=CERT_EXPIRY_WARN_DAYS):
            out.append(Finding("autowrap", "certificate-expiry", WARN,
                               f"{who}: the serving certificate expires {when} "
                               f"(in {left.days} days)",
                               "check that renewal works (autowrap_certificate_reloads_total)"))  # fmt: skip
        else:
            out.append(Finding("autowrap", "certificate-expiry", OK,
                               f"{who}: the serving certificate expires {when} "
                               f"(in {left.days} days)"))  # fmt: skip
    return out
