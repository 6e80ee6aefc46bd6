"""Under sustained load, serving certificates are rotated and policies reloaded (including an
invalid set) without one failed handshake or request."""

from __future__ import annotations

import asyncio

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client.parser import text_string_to_metric_families

from testbed.redirect import Cluster
from testbed.scenarios import LoadTally, load, rotate, served_certificate
from tests.support.waiting import eventually
from webhook.model import names

ROTATIONS = 4
DER = Encoding.DER


async def _metrics(cluster: Cluster) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{cluster.running.metrics_port}/metrics") as resp,
    ):
        return await resp.text()


async def _readyz(cluster: Cluster) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://127.0.0.1:{cluster.running.port}{names.READYZ_PATH}",
                    ssl=cluster.pki.client_context(),
                    server_hostname=cluster.pki.dns_names[2]) as resp,
    ):  # fmt: skip
        return resp.status, await resp.text()


async def _failed_reloads(cluster: Cluster) -> float:
    """autowrap_certificate_reloads_total{result="failed"}, as scraped."""
    for family in text_string_to_metric_families(await _metrics(cluster)):
        for sample in family.samples:
            if (
                sample.name == "autowrap_certificate_reloads_total"
                and sample.labels.get("result") == "failed"
            ):
                return sample.value
    return 0.0


async def test_certificates_rotated_under_load_cause_no_failed_handshake(cluster: Cluster) -> None:
    tls = cluster.pki.client_context()
    port = cluster.running.port
    assert cluster.state.tls is not None
    tally, stop = LoadTally(), asyncio.Event()
    traffic = asyncio.create_task(load(port, tls, stop, tally, clients=3))

    written = await rotate(cluster.pki, cluster.cert_dir, lambda: cluster.state.tls.reloads,
                           ROTATIONS)  # fmt: skip
    served = await served_certificate(port, tls)
    stop.set()
    await traffic

    assert tally.failures == []
    assert tally.handshakes > ROTATIONS * 3, "requests kept opening new connections"
    assert cluster.state.tls.reloads == 1 + ROTATIONS
    last = x509.load_pem_x509_certificate(written[-1])
    assert x509.load_der_x509_certificate(served).serial_number == last.serial_number
    assert last.issuer == cluster.pki.ca.cert.subject, "the CA stays the same across rotations"


async def test_a_pair_caught_mid_rotation_never_breaks_the_live_certificate(
    cluster: Cluster,
) -> None:
    from testbed.pki import write_pki

    tls = cluster.pki.client_context()
    assert cluster.state.tls is not None
    before = cluster.state.tls.reloads
    scratch = write_pki(cluster.cert_dir.parent / "next", cluster.pki.dns_names, ca=cluster.pki.ca)
    (cluster.cert_dir / "tls.crt").write_bytes(scratch.cert_pem)  # the key is not written yet
    # A poll has seen the mismatched pair and refused it (counted), and kept the live one.
    await eventually(lambda: _failed_reloads(cluster), what="the mismatched pair refused")

    mid = await served_certificate(cluster.running.port, tls)
    (cluster.cert_dir / "tls.key").write_bytes(scratch.key_pem)
    await eventually(lambda: cluster.state.tls.reloads > before, what="the new pair served")
    after = await served_certificate(cluster.running.port, tls)

    assert mid == x509.load_pem_x509_certificate(cluster.pki.cert_pem).public_bytes(DER)
    assert x509.load_der_x509_certificate(after).serial_number == (
        x509.load_pem_x509_certificate(scratch.cert_pem).serial_number
    )
    assert 'autowrap_certificate_reloads_total{result="failed"}' in await _metrics(cluster)


async def test_policies_reloaded_mid_run_and_an_invalid_set_fail_no_request(
    cluster: Cluster,
) -> None:
    tls = cluster.pki.client_context()
    tally, stop = LoadTally(), asyncio.Event()
    traffic = asyncio.create_task(load(cluster.running.port, tls, stop, tally, clients=3,
                                       new_connection_every=20))  # fmt: skip
    default = cluster.policy_dir / "default.yaml"
    digest = cluster.state.policy_digest

    default.write_text(default.read_text().replace("masterPort: 23456", "masterPort: 23457"))
    await eventually(lambda: cluster.state.policy_digest != digest, what="the new policies")
    good = cluster.state.policies
    (cluster.policy_dir / "broken.yaml").write_text("apiVersion: autowrap.io/v1alpha1\nkind: Policy\n"
                                                     "metadata: {name: broken}\nspec: {wrap: Sometimes}\n")  # fmt: skip
    await eventually(lambda: cluster.state.policy_error, what="the invalid set refused")
    served = tally.requests
    await eventually(lambda: tally.requests > served + 10, what="requests on the last good set")
    ready_status, ready_text = await _readyz(cluster)
    stale_metrics = await _metrics(cluster)
    served_while_stale = cluster.state.policies
    (cluster.policy_dir / "broken.yaml").unlink()
    await eventually(lambda: not cluster.state.policy_error, what="a valid set again")
    fresh_metrics = await _metrics(cluster)
    stop.set()
    await traffic

    assert tally.failures == []
    assert tally.requests > 20
    assert any(p.spec.master_port == 23457 for p in good.policies)
    assert served_while_stale is good, "the last good set keeps serving"
    assert ready_status == 200
    assert "last reload failed, serving the last good set" in ready_text
    assert "broken" in ready_text
    assert "autowrap_policies_stale 1.0" in stale_metrics
    assert "autowrap_policies_stale 0.0" in fresh_metrics
