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
from tests.support.waiting import eventually
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
    await eventually(lambda: len(recording.events) == 2, what="both Events written")
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
    await eventually(lambda: len(recording.events) == 3, what="renewal and two repairs")
    reasons = [reason for _, reason, _, _ in recording.events]
    assert reasons.count("CertificateRenewed") == 1
    assert reasons.count("CABundleRepaired") == 2  # the mutating and the validating configuration
    repaired = [m for _, r, m, _ in recording.events if r == "CABundleRepaired"]
    assert any("autowrap-mutating" in m for m in repaired)

    # A settled Secret and current caBundles: nothing to say.
    recording.events.clear()
    await asyncio.to_thread(selfmanaged.prepare, _args(tmp_path / "b", fake_kubeconfig))
    # What the thread emitted was handed to the loop before the thread's own result was (both
    # by call_soon_threadsafe, run in order): every Event it raised is under way or written.
    await events.flush()
    assert recording.events == []


def _operator_event(cluster: Any, reason: str) -> dict[str, Any] | None:
    """The Event of this reason on autowrap's Deployment, once written."""
    for event in cluster.api.store.list(EVENTS, names.SERVICE_NAMESPACE):
        if event["reason"] == reason:
            involved = event["involvedObject"]
            assert (involved["kind"], involved["name"], involved["namespace"]) == (
                "Deployment", names.SERVICE_NAME, names.SERVICE_NAMESPACE
            )  # fmt: skip
            return event  # type: ignore[no-any-return]
    return None


async def test_a_failed_policy_reload_raises_a_warning_event(
    webhook_pki: ServingPki, tmp_path: Path
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

        event = await eventually(
            lambda: _operator_event(cluster, "PolicyReloadFailed"), what="PolicyReloadFailed"
        )
        assert event["type"] == "Warning"
        assert event["reportingComponent"] == "autowrap.io/server"
        assert "last good set stays in use" in event["message"]
    assert opevents.installed() is None  # the drain takes the sink down


async def test_a_certificate_reload_raises_a_normal_event(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, upstream=False) as cluster:
        state = cluster.running.state
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

        event = await eventually(
            lambda: _operator_event(cluster, "CertificateReloaded"), what="CertificateReloaded"
        )
        assert event["type"] == "Normal"
        assert _operator_event(cluster, "PolicyReloadFailed") is None


async def test_a_controller_error_raises_an_event(
    webhook_pki: ServingPki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_cluster(webhook_pki, tmp_path, upstream=False) as cluster:
        # The controller fails on a key: an internal error, retried.
        controller = await eventually(
            lambda: (
                cluster.controller is not None
                and cluster.controller.leading.is_set()
                and cluster.controller
            ),
            what="a leading controller",
        )

        async def broken(key: Any) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(controller.reconciler, "reconcile", broken)
        controller.queue.add(("ml", "train"))
        await eventually(lambda: controller.errors, what="the reconcile error counted")

        event = await eventually(
            lambda: _operator_event(cluster, "ReconcileError"), what="ReconcileError"
        )
        assert "RuntimeError('boom')" in event["message"]
