"""What an operator gets from a running server besides admission: the standard and build
series in /metrics, Kubernetes API latency, certificate expiry, the start-up line, log levels
and the warning count on every request line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from testbed.redirect import Cluster
from tests.server.test_e2e import vcjob
from webhook import __version__, app
from webhook.cli import main as cli
from webhook.shell import certs, server
from webhook.shell.metrics import Metrics, api_call_label


async def _exposition(cluster: Cluster) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{cluster.running.metrics_port}/metrics") as resp,
    ):
        return await resp.text()


async def test_metrics_carry_process_build_api_latency_and_certificate_expiry(
    cluster: Cluster,
) -> None:
    await cluster.create(vcjob("measured"))
    text = await _exposition(cluster)
    samples = {
        sample.name: sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds", "python_info", "python_gc_collections_total"):  # fmt: skip
        assert name in samples, name
    assert samples["autowrap_build_info"].labels == {"version": __version__}
    assert not [name for name in samples if name.endswith("_created")]

    cert = x509.load_pem_x509_certificate((cluster.cert_dir / certs.TLS_CERT).read_bytes())
    expiry = samples["autowrap_certificate_expiry_timestamp_seconds"].value
    assert expiry == cert.not_valid_after_utc.timestamp()

    calls = {
        (s.labels["call"], s.labels["code"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "autowrap_kube_api_request_duration_seconds_count"
    }
    # The wrap asked whether the user may create AppWrappers, and created one.
    assert calls[("create subjectaccessreviews", "201")] >= 1
    assert calls[("create appwrappers", "201")] >= 1


def test_api_call_labels_stay_a_bounded_set() -> None:
    assert api_call_label("get localqueues") == "get localqueues"
    assert api_call_label("discover api groups") == "discover api groups"
    assert api_call_label("create widgets.example.com") == "create other"
    metrics = Metrics(in_flight=lambda: 0)
    for n in range(50):
        metrics.api_call(f"create kind{n}", 201, 0.01)
    metrics.api_call("watch pods", None, 0.01)
    text = metrics.exposition().decode()
    assert text.count('autowrap_kube_api_request_duration_seconds_count{call="create other"') == 1
    assert 'call="watch pods",code="none"' in text


def test_certificate_expiry_follows_the_file_and_is_absent_without_one(tmp_path: Path) -> None:
    where: list[Path | None] = [None]
    metrics = Metrics(in_flight=lambda: 0)
    metrics.follow_certificate(lambda: where[0])
    assert b"autowrap_certificate_expiry_timestamp_seconds" not in metrics.exposition()
    ca = certs.make_ca()
    certs.write(tmp_path, ca, certs.make_serving(ca, ["a.b.svc"], days=3))
    where[0] = tmp_path / certs.TLS_CERT
    first = metrics.exposition()
    assert b"autowrap_certificate_expiry_timestamp_seconds " in first
    certs.write(tmp_path, ca, certs.make_serving(ca, ["a.b.svc"], days=90))
    assert metrics.exposition() != first


def test_the_start_up_line_names_the_version_and_the_configuration(cluster: Cluster) -> None:
    fields = server._configuration(cluster.running, cluster.cert_dir)
    assert fields["version"] == __version__
    assert fields["port"] == cluster.running.port
    assert fields["metrics_port"] == cluster.running.metrics_port
    assert fields["cert_dir"] == str(cluster.cert_dir)
    assert fields["development_certificate"] is False
    assert fields["policy_path"] == str(cluster.policy_dir)
    assert fields["policies"]
    assert set(fields["policy_modes"]) == {"Redirect"}  # the harness serves redirect mode
    assert fields["default_mode"] == "Adopt"
    assert fields["api"] is True
    assert fields["controller"] is False and fields["watch_caches"] is False
    orjson.dumps(fields)  # a log line's fields


def test_serve_takes_a_log_level() -> None:
    serve = ["serve"]
    assert cli.parser().parse_args(serve).log_level == "info"
    assert cli.parser().parse_args([*serve, "--log-level", "debug"]).log_level == "debug"
    with pytest.raises(SystemExit):
        cli.parser().parse_args([*serve, "--log-level", "verbose"])
    for level in server.LOG_LEVELS:
        server.configure_logging(level)
        assert server.log.level == getattr(logging, level.upper())
    server.configure_logging("info")


def _failure_line(level: int) -> dict[str, object]:
    server.log.setLevel(level)
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("autowrap", logging.ERROR, __file__, 1, "admission failed",
                                   None, sys.exc_info())  # fmt: skip
    line = orjson.loads(server.JsonFormatter().format(record))
    assert isinstance(line, dict)
    return line


def test_internal_errors_are_one_line_unless_debugging() -> None:
    level = server.log.level
    try:
        quiet = _failure_line(logging.INFO)
        assert quiet["error"] == "ValueError: boom" and "traceback" not in quiet
        loud = _failure_line(logging.DEBUG)
        assert loud["error"] == "ValueError: boom"
        traceback = loud["traceback"]
        assert isinstance(traceback, str)
        assert traceback.startswith("Traceback") and "_failure_line" in traceback
    finally:
        server.log.setLevel(level)


async def test_every_request_line_counts_its_warnings(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="autowrap")
    capsys.readouterr()
    warned = vcjob("warned")
    del warned["spec"]["tasks"][1]["replicas"]  # a task without replicas creates no pods
    result = await cluster.create(warned)
    await cluster.create(vcjob("clean"))
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    requests = [line for line in lines if line.get("msg") == "admission"]
    assert requests and all("warnings" in line for line in requests)
    wraps = {line["name"]: line for line in requests if line.get("decision") == "wrapped"}
    assert result.warnings
    assert wraps["warned"]["warnings"] == len(result.warnings)
    assert wraps["clean"]["warnings"] == 0


def test_log_level_reaches_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(server, "configure_logging", seen.append)
    args = cli.parser().parse_args(
        ["serve", "--log-level", "warning", "--cert-dir", "/nonexistent", "--no-controller"]
    )
    assert app.main(args) == 2  # the missing certificate stops it before serving
    assert seen == ["warning"]
