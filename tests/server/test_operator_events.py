"""Events for operators: a failed policy reload, a certificate reload or renewal, a caBundle
repair and a controller error each raise an Event on the autowrap Deployment in its namespace."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import EVENTS
from testbed.pki import ServingPki
from testbed.redirect import webhook_configurations
from tests.adopt.cluster import running_cluster
from tests.server.test_self_managed import _args, install_empty_secret, under_self_managed_rbac
from webhook.model import names
from webhook.shell import certs, opevents, selfmanaged, server


class _Recording:
    def __init__(self) -> None:
        self.events: list[tuple[dict[str, Any], str, str, bool]] = []

    async def emit(
        self, obj: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        self.events.append((obj, reason, message, warning))


@pytest.fixture
def recording() -> Iterator[_Recording]:
    recorder = _Recording()
    yield recorder
    opevents.install(None)


async def test_events_go_to_the_deployment_from_the_loop_and_from_threads(
    recording: _Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAME", "autowrap-7c9-x2")
    events = opevents.OperatorEvents(recording, "ops")
    opevents.install(events)
    opevents.emit("PolicyReloadFailed", "bad", warning=True)
    await asyncio.to_thread(opevents.emit, "CertificateRenewed", "new pair")
    await asyncio.sleep(0.05)
    await events.flush()
    subject = {"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": names.SERVICE_NAME, "namespace": "ops"}}  # fmt: skip
    assert recording.events == [
        (subject, "PolicyReloadFailed", "bad (replica autowrap-7c9-x2)", True),
        (subject, "CertificateRenewed", "new pair (replica autowrap-7c9-x2)", False),
    ]
    opevents.install(None)
    opevents.emit("PolicyReloadFailed", "nowhere")  # no sink: nothing, no error
    assert len(recording.events) == 2


async def test_self_managed_renewal_and_cabundle_repair_raise_events(
    recording: _Recording,
    fake_kube: FakeCluster,
    fake_kubeconfig: Path,
    admin_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    under_self_managed_rbac(fake_kube)
    for configuration in webhook_configurations():
        fake_kube.add_webhook_configuration(configuration)
    events = opevents.OperatorEvents(recording, names.SERVICE_NAMESPACE)
    opevents.install(events)
    await asyncio.to_thread(install_empty_secret, admin_kubeconfig)
    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path / "a", fake_kubeconfig))
    await asyncio.sleep(0.05)
    await events.flush()
    reasons = [reason for _, reason, _, _ in recording.events]
    assert reasons.count("CertificateRenewed") == 1
    assert reasons.count("CABundleRepaired") == 2  # the mutating and the validating configuration
    repaired = [m for _, r, m, _ in recording.events if r == "CABundleRepaired"]
    assert any("autowrap-mutating" in m for m in repaired)

    # A settled Secret and current caBundles: nothing to say.
    recording.events.clear()
    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path / "b", fake_kubeconfig))
    await asyncio.sleep(0.05)
    await events.flush()
    assert recording.events == []


async def test_policy_reload_certificate_reload_and_controller_errors_raise_events(
    webhook_pki: ServingPki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_cluster(webhook_pki, tmp_path, upstream=False) as cluster:
        state = cluster.running.state
        events = opevents.installed()
        assert events is not None and events.namespace == names.SERVICE_NAMESPACE

        # A policy file broken by an edit: the last good set stays, the operator hears of it.
        assert state.policy_path is not None
        (state.policy_path / "broken.yaml").write_text("apiVersion: autowrap.io/v1alpha1\n")
        server.reload_policies(state)
        assert state.policy_error

        # A renewed serving certificate appears on disk (cert-manager rewrites the files).
        assert state.tls is not None
        other = tmp_path / "renewed"
        pair = certs.make_serving(certs.make_ca(), ["autowrap.autowrap-system.svc"], days=30)
        other.mkdir()
        (other / certs.TLS_CERT).write_bytes(pair.cert_pem)
        (other / certs.TLS_KEY).write_bytes(pair.key_pem)
        for name in (certs.TLS_CERT, certs.TLS_KEY):
            shutil.copy(other / name, state.tls.cert_dir / name)
        server.reload_certificates(state)

        # The controller fails on a key: an internal error, retried.
        while cluster.controller is None or not cluster.controller.leading.is_set():
            await asyncio.sleep(0.01)
        controller = cluster.controller

        async def broken(key: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(controller.reconciler, "reconcile", broken)
        controller.queue.add(("ml", "train"))
        for _ in range(200):
            if controller.errors:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        await events.flush()

        stored = cluster.api.store.list(EVENTS, names.SERVICE_NAMESPACE)
        by_reason = {e["reason"]: e for e in stored}
        assert {"PolicyReloadFailed", "CertificateReloaded", "ReconcileError"} <= set(by_reason)
        for event in by_reason.values():
            assert event["involvedObject"]["kind"] == "Deployment"
            assert event["involvedObject"]["name"] == names.SERVICE_NAME
            assert event["involvedObject"]["namespace"] == names.SERVICE_NAMESPACE
        assert by_reason["PolicyReloadFailed"]["type"] == "Warning"
        assert by_reason["PolicyReloadFailed"]["reportingComponent"] == "autowrap.io/server"
        assert "last good set stays in use" in by_reason["PolicyReloadFailed"]["message"]
        assert by_reason["CertificateReloaded"]["type"] == "Normal"
        assert "RuntimeError('boom')" in by_reason["ReconcileError"]["message"]
    assert opevents.installed() is None  # the drain takes the sink down
