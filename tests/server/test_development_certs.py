"""``serve`` without ``--cert-dir`` generates a development pair; its keys go with the server."""

from __future__ import annotations

from pathlib import Path

from webhook import app
from webhook.shell import certs, server


async def test_the_development_pair_is_removed_when_the_server_stops(tmp_path: Path) -> None:
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=None, use_cluster=False,
        controller=False, watch_caches=False, drain_timeout=1.0,
    )  # fmt: skip
    running = await app.start(options)
    assert running.state.tls is not None
    directory = running.state.tls.cert_dir
    assert (directory / certs.TLS_KEY).is_file()
    await running.drain()
    assert not directory.exists()


async def test_a_given_cert_dir_is_left_alone(tmp_path: Path) -> None:
    cert_dir = tmp_path / "mine"
    ca = certs.make_ca()
    certs.write(cert_dir, ca, certs.make_serving(ca, ["localhost"]))
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir, use_cluster=False,
        controller=False, watch_caches=False, drain_timeout=1.0,
    )  # fmt: skip
    running = await app.start(options)
    await running.drain()
    assert (cert_dir / certs.TLS_KEY).is_file()
