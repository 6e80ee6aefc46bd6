"""A short soak of ``python -m webhook serve`` (the full one is ``python -m bench.soak``):
no failed request and no unbounded memory growth."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.cluster import FakeCluster
from testbed.pki import ServingPki
from testbed.scenarios import soak, start_serve

SECONDS = 20.0
RSS_GROWTH_BOUND_KIB = 64 * 1024


async def test_twenty_seconds_of_sustained_load_fail_no_request_and_memory_stays_bounded(
    webhook_pki: ServingPki, fake_kube: FakeCluster, tmp_path: Path
) -> None:
    served = await start_serve(webhook_pki, fake_kube, tmp_path)
    try:
        figures = await soak(served, SECONDS, clients=3)
    finally:
        served.process.terminate()
        served.process.wait(timeout=30)

    assert figures["alive"]
    assert figures["errors"] == 0, figures["error_samples"]
    assert figures["requests"] > 100
    assert figures["rss_growth_kib"] < RSS_GROWTH_BOUND_KIB, figures
    assert figures["wrapped"] <= len(fake_kube.appwrappers()) <= figures["wraps"], figures
    assert figures["wrapped"] > 0.9 * figures["wraps"], figures
