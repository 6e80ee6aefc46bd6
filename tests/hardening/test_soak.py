"""A short soak of ``python -m webhook serve`` (the full one, timed, is ``python -m
bench.soak``): a fixed amount of sustained load, however long this machine takes for it, fails
no request and leaves memory bounded."""

from __future__ import annotations

from pathlib import Path

from testbed.cluster.cluster import FakeCluster
from testbed.pki import ServingPki
from testbed.scenarios import soak, start_serve

REQUESTS = 300
RSS_GROWTH_BOUND_KIB = 64 * 1024


async def test_sustained_load_fails_no_request_and_memory_stays_bounded(
    webhook_pki: ServingPki, fake_kube: FakeCluster, tmp_path: Path
) -> None:
    served = await start_serve(webhook_pki, fake_kube, tmp_path)
    try:
        figures = await soak(served, requests=REQUESTS, clients=3)
    finally:
        served.process.terminate()
        served.process.wait(timeout=30)

    assert figures["alive"]
    assert figures["requests"] == REQUESTS
    assert figures["errors"] == 0, figures["error_samples"]
    # From a quarter of the load on to the end.
    assert figures["rss_growth_kib"] < RSS_GROWTH_BOUND_KIB, figures
    # Each wrap answered as wrapped created one AppWrapper (how many are refused for time, the
    # API being slow on a loaded machine, is bench.soak's measurement).
    assert figures["wrapped"] <= len(fake_kube.appwrappers()) <= figures["wraps"], figures
    assert figures["wrapped"] > 0, figures
