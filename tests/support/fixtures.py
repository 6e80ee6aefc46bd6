"""Pytest fixtures around the test PKI, TLS listeners and the fake Kubernetes API.

Loaded with ``pytest_plugins = ["tests.support.fixtures"]`` so every test package shares
one definition.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from testbed import redirect
from testbed.cluster.cluster import ADMIN_TOKEN, FakeCluster, for_autowrap
from testbed.pki import ServingPki, service_dns_names, write_pki

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Listener:
    """Where a test server listens."""

    host: str
    port: int


async def start_tls_app(
    app: web.Application, ssl_context: ssl.SSLContext, host: str = LOOPBACK, port: int = 0
) -> tuple[web.AppRunner, Listener]:
    """Serve ``app`` over TLS on loopback; the caller owns ``runner.cleanup()``."""
    runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    return runner, Listener(host, int(runner.addresses[0][1]))


TlsServerFactory = Callable[..., Awaitable[Listener]]


@pytest.fixture(scope="module")
def webhook_pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServingPki]:
    """A CA and a serving certificate for autowrap.autowrap-system.svc (and 127.0.0.1)."""
    yield write_pki(tmp_path_factory.mktemp("pki"), service_dns_names())


@pytest.fixture
async def tls_server(webhook_pki: ServingPki) -> AsyncIterator[TlsServerFactory]:
    """``await tls_server(app)`` serves an aiohttp app with the test PKI's serving cert.

    Pass ``ssl_context=`` to serve with another certificate. Servers stop after the test.
    """
    runners: list[web.AppRunner] = []

    async def start(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> Listener:
        runner, listener = await start_tls_app(app, ssl_context or webhook_pki.server_context())
        runners.append(runner)
        return listener

    yield start
    for runner in reversed(runners):
        await runner.cleanup()


@pytest.fixture
async def fake_kube() -> AsyncIterator[FakeCluster]:
    """A running fake cluster on loopback as autowrap meets it (``for_autowrap``), stopped after
    the test."""
    fake = for_autowrap()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
def fake_kubeconfig(fake_kube: FakeCluster, tmp_path: Path) -> Path:
    """A kubeconfig pointing at ``fake_kube`` with its bearer token."""
    return fake_kube.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def admin_kubeconfig(fake_kube: FakeCluster, tmp_path: Path) -> Path:
    """A kubeconfig for ``fake_kube`` as its administrator: what an install or cert-manager
    writes, which autowrap's own grants do not cover."""
    return fake_kube.write_kubeconfig(tmp_path / "admin-kubeconfig", token=ADMIN_TOKEN)


@pytest.fixture
async def cluster(
    webhook_pki: ServingPki, fake_kube: FakeCluster, fake_kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[redirect.Cluster]:
    """autowrap serving redirect mode behind the apiserver emulator (testbed/redirect.py)."""
    started, stop = await redirect.start_cluster(webhook_pki, fake_kube, fake_kubeconfig, tmp_path)
    try:
        yield started
    finally:
        await stop()
    # Redirect mode creates AppWrappers only; what they wrap it only ever dry-runs.
    created = [
        r.path
        for r in fake_kube.requests
        if r.method == "POST" and redirect.COMPONENTS.search(r.path) and "dryRun" not in r.query
    ]
    assert created == [], f"autowrap created the components themselves: {created}"
