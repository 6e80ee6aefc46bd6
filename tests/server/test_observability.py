"""What operators see of each request: one JSON line on stdout and the Prometheus series."""

from __future__ import annotations

import logging

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.redirect import NAMESPACE, Cluster
from tests.server.test_e2e import vcjob


async def _scrape(cluster: Cluster) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{cluster.running.metrics_port}/metrics") as resp,
    ):
        text = await resp.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


async def test_a_wrap_is_counted_timed_and_logged_once_per_webhook_call(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="autowrap")  # as `autowrap serve` configures it
    capsys.readouterr()
    before = await _scrape(cluster)

    await cluster.create(vcjob("counted"))
    await cluster.create(vcjob("counted-too"))
    after = await _scrape(cluster)
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]

    wrapped = _labels(webhook="validate", kind="Job", operation="CREATE", decision="wrapped")
    count = after[("autowrap_admission_requests_total", wrapped)]
    assert count - before.get(("autowrap_admission_requests_total", wrapped), 0) == 2
    timed = after[("autowrap_admission_duration_seconds_count", wrapped)]
    assert timed - before.get(("autowrap_admission_duration_seconds_count", wrapped), 0) == 2
    assert after[("autowrap_admission_duration_seconds_sum", wrapped)] > 0
    # The AppWrapper a wrap creates does not come back to autowrap's own AppWrapper webhooks.
    assert not [k for k in after if dict(k[1]).get("kind") == "AppWrapper"]
    assert after[("autowrap_admission_in_flight", frozenset())] == 0
    assert after[("autowrap_wraps_total", _labels(kind="Job", dry_run="false",
                                                  repeated="false"))] == 2  # fmt: skip

    requests = [line for line in lines if line.get("msg") == "admission"]
    calls = cluster.emulator.calls
    assert len(requests) == len(calls) >= 4, "one line per call"
    assert sorted(line["uid"] for line in requests) == sorted(c.request_uid for c in calls)
    wraps = [line for line in requests if line.get("decision") == "wrapped"]
    assert [(w["name"], w["namespace"], w["level"]) for w in wraps] == [
        ("counted", NAMESPACE, "info"), ("counted-too", NAMESPACE, "info")
    ]  # fmt: skip
    assert all(isinstance(line["duration_ms"], float | int) for line in requests)


async def test_no_request_line_below_info(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="autowrap")
    capsys.readouterr()

    await cluster.create(vcjob("quiet"))

    assert cluster.emulator.calls
    assert capsys.readouterr().out == ""
