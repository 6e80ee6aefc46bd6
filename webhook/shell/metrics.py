"""Prometheus metrics, in a registry of autowrap's own (served on a separate plain-HTTP port).

Names follow controller-runtime's webhook metrics where they overlap, so existing dashboards
need little change; labels are bounded sets (webhook, kind, operation, decision).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

# Admission latency without the API calls is in milliseconds; with them, up to the timeout.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class ControllerStats:
    """What the adopt-mode controller has done, read when metrics are scraped."""

    leading: bool = False
    queue_depth: int = 0
    reconciles: int = 0
    errors: int = 0
    adopted: int = 0
    released: int = 0
    failed: Mapping[str, int] = field(default_factory=dict)


class _ControllerCollector:
    def __init__(self, stats: Callable[[], ControllerStats]) -> None:
        self._stats = stats

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        stats = self._stats()
        yield GaugeMetricFamily("autowrap_controller_leading",
                                "1 while this replica holds the controller Lease.", int(stats.leading))  # fmt: skip
        yield GaugeMetricFamily("autowrap_controller_queue_depth",
                                "Keys waiting in the controller's work queue.", stats.queue_depth)  # fmt: skip
        yield CounterMetricFamily("autowrap_controller_reconciles",
                                  "Reconciles run by the controller.", stats.reconciles)  # fmt: skip
        yield CounterMetricFamily("autowrap_controller_reconcile_errors",
                                  "Reconciles that failed and were retried.", stats.errors)  # fmt: skip
        yield CounterMetricFamily("autowrap_adoptions",
                                  "Objects adopted into an AppWrapper.", stats.adopted)  # fmt: skip
        yield CounterMetricFamily("autowrap_pod_releases",
                                  "Gated pods released after Kueue admitted them.", stats.released)  # fmt: skip
        failures = CounterMetricFamily("autowrap_controller_failures",
                                       "Steps that could not be done, by step.", labels=("step",))  # fmt: skip
        for step, count in sorted(stats.failed.items()):
            failures.add_metric((step,), count)
        yield failures


class Metrics:
    def __init__(self, in_flight: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._answered: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}
        labels = ("webhook", "kind", "operation", "decision")
        self.requests = Counter(
            "autowrap_admission_requests_total", "Admission requests answered.",
            labels, registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "autowrap_admission_duration_seconds", "Time to answer an admission request.",
            labels, buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.bad_requests = Counter(
            "autowrap_bad_requests_total", "Requests that were not a usable AdmissionReview.",
            ("webhook", "status"), registry=self.registry,
        )  # fmt: skip
        # Read from the server's own count when scraped: nothing to update per request.
        self.in_flight = Gauge(
            "autowrap_admission_in_flight", "Admission requests being answered.",
            registry=self.registry,
        )  # fmt: skip
        self.in_flight.set_function(in_flight)
        self.wraps = Counter(
            "autowrap_wraps_total", "Objects wrapped into AppWrappers.",
            ("kind", "dry_run", "repeated"), registry=self.registry,
        )  # fmt: skip
        self.api_errors = Counter(
            "autowrap_kube_api_errors_total", "Failed calls to the Kubernetes API.",
            ("call",), registry=self.registry,
        )  # fmt: skip
        self.policy_reloads = Counter(
            "autowrap_policy_reloads_total", "Policy reloads by result.",
            ("result",), registry=self.registry,
        )  # fmt: skip
        self.policies_stale = Gauge(
            "autowrap_policies_stale", "1 while the newest policy files fail to load and the "
            "last good set is in use.", registry=self.registry,
        )  # fmt: skip
        self.reconcile_latency = Histogram(
            "autowrap_controller_reconcile_duration_seconds", "Time one controller reconcile takes.",
            buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.cert_reloads = Counter(
            "autowrap_certificate_reloads_total", "Serving certificate reloads by result.",
            ("result",), registry=self.registry,
        )  # fmt: skip

    def follow_controller(self, stats: Callable[[], ControllerStats]) -> None:
        """Export the controller's counters, read from it at scrape time."""
        self.registry.register(_ControllerCollector(stats))

    def answered(self, labels: tuple[str, str, str, str], seconds: float) -> None:
        """Count one answered request and its latency (labels: webhook, kind, operation,
        decision). The label children are looked up once per label set and kept: the lookup
        validates and locks, and would otherwise run twice per request."""
        children = self._answered.get(labels)
        if children is None:
            children = self._answered[labels] = (
                self.requests.labels(*labels), self.latency.labels(*labels)
            )  # fmt: skip
        children[0].inc()
        children[1].observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
