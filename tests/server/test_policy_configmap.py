"""The policy ConfigMap: an invalid set is refused before it is stored (through the rendered
validating webhook entry and the apiserver emulator), and a server that starts on an invalid
set runs not ready, saying why, until a fixed set is reloaded."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from testbed.cluster.cluster import FakeCluster
from testbed.pki import ServingPki
from testbed.redirect import REPO, Cluster, start_cluster
from webhook import app
from webhook.core import policy
from webhook.model import names
from webhook.shell import policyfiles, server

CONFIGMAP = "autowrap-policies"
BROKEN = (
    "apiVersion: autowrap.io/v1alpha1\nkind: Policy\nmetadata: {name: broken}\n"
    "spec: {wrap: Sometimes}\n"
)


def _configmap(data: dict[str, str], name: str = CONFIGMAP) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": names.SERVICE_NAMESPACE}, "data": data}  # fmt: skip


def _shipped() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((REPO / "policies").glob("*.yaml"))}


@pytest.fixture
async def cluster_with_system(
    webhook_pki: ServingPki, fake_kube: FakeCluster, fake_kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[Cluster]:
    started, stop = await start_cluster(
        webhook_pki, fake_kube, fake_kubeconfig, tmp_path,
        namespaces={"ml": {}, names.SERVICE_NAMESPACE: {}},
    )  # fmt: skip
    try:
        yield started
    finally:
        await stop()


async def test_an_invalid_policy_set_is_refused_with_the_loaders_message(
    cluster_with_system: Cluster,
) -> None:
    emulator = cluster_with_system.emulator
    data = {**_shipped(), "broken.yaml": BROKEN}
    with pytest.raises(policy.PolicyError) as raised:
        policy.build(policyfiles.from_config_map(data))
    loader_says = str(raised.value)

    created = await emulator.admit("CREATE", _configmap(data))
    updated = await emulator.admit("UPDATE", _configmap(data), old_object=_configmap(_shipped()))

    for result in (created, updated):
        assert not result.allowed
        assert [c.name for c in result.calls] == ["policies.validate.autowrap.io"]
        assert "broken.yaml" in result.message
        assert "spec.wrap" in result.message, result.message
        assert loader_says in result.message, "the same loader, the same message"


async def test_a_valid_policy_set_is_stored(cluster_with_system: Cluster) -> None:
    result = await cluster_with_system.emulator.admit("CREATE", _configmap(_shipped()))

    assert result.allowed, result.message
    assert [c.name for c in result.calls] == ["policies.validate.autowrap.io"]


async def test_a_configmap_without_policy_files_is_refused(cluster_with_system: Cluster) -> None:
    result = await cluster_with_system.emulator.admit("CREATE", _configmap({"README": "x"}))

    assert not result.allowed
    assert "no *.yaml policy files" in result.message


async def test_other_configmaps_are_not_sent(cluster_with_system: Cluster) -> None:
    for obj in (_configmap({"x.yaml": BROKEN}, name="other"),
                {**_configmap({"x.yaml": BROKEN}), "metadata": {"name": CONFIGMAP,
                                                                "namespace": "ml"}}):  # fmt: skip
        result = await cluster_with_system.emulator.admit("CREATE", obj)
        assert result.allowed
        assert result.calls == ()


# --- starting on an invalid set ----------------------------------------------------------------


async def _get(port: int, path: str, pki: ServingPki) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"https://127.0.0.1:{port}{path}", ssl=pki.client_context(),
                    server_hostname=pki.dns_names[2]) as resp,
    ):  # fmt: skip
        return resp.status, await resp.text()


async def _post_review(port: int, pki: ServingPki) -> dict[str, Any]:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml",
        "operation": "CREATE", "object": {"apiVersion": "v1", "kind": "Pod",
                                          "metadata": {"name": "p", "namespace": "ml"}}}}  # fmt: skip
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"https://127.0.0.1:{port}{names.VALIDATE_PATH}", json=review,
                     ssl=pki.client_context(), server_hostname=pki.dns_names[2]) as resp,
    ):  # fmt: skip
        body: dict[str, Any] = await resp.json()
        return body


async def test_a_server_started_on_an_invalid_set_is_not_ready_until_it_is_fixed(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    cert_dir, policy_dir = tmp_path / "certs", tmp_path / "policies"
    cert_dir.mkdir()
    for source in (webhook_pki.cert_path, webhook_pki.key_path, webhook_pki.ca_path):
        shutil.copy(source, cert_dir / source.name)
    shutil.copytree(REPO / "policies", policy_dir)
    (policy_dir / "broken.yaml").write_text(BROKEN)
    options = server.Options(host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir,
                             policy_path=policy_dir, use_cluster=False, controller=False,
                             watch_caches=False, reload_interval=0.1, drain_timeout=1.0)  # fmt: skip

    running = await app.start(options)
    try:
        ready = await _get(running.port, names.READYZ_PATH, webhook_pki)
        healthy = await _get(running.port, names.HEALTHZ_PATH, webhook_pki)
        answer = await _post_review(running.port, webhook_pki)
        assert not running.state.policies_loaded
        (policy_dir / "broken.yaml").unlink()
        for _ in range(100):
            if running.state.policies_loaded:
                break
            await asyncio.sleep(0.05)
        fixed = await _get(running.port, names.READYZ_PATH, webhook_pki)
    finally:
        await running.drain()

    assert ready[0] == 503
    assert "no valid policy set loaded" in ready[1]
    assert "broken.yaml" in ready[1] and "spec.wrap" in ready[1]
    assert healthy == (200, "ok")
    assert answer["response"]["allowed"] is False
    assert answer["response"]["uid"] == "u-1"
    assert "no valid policy set" in answer["response"]["status"]["message"]
    assert fixed == (200, "ok\n")
    assert {p.name for p in running.state.policies.policies} >= {"default"}
