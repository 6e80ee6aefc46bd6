"""Prometheus metrics, in a registry of autowrap's own (served on a separate plain-HTTP port).

Names follow controller-runtime's webhook metrics where they overlap, so existing dashboards
need little change; labels are bounded sets (webhook, kind, operation, decision).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from webhook import __version__

# Admission latency without the API calls is in milliseconds; with them, up to the webhook
# timeouts (5, 10 and 15 s in deploy/; 30 s at most): fine below 100 ms, then 80 % of each
# timeout and the timeout itself, where the latency alerts look.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 4.0, 5.0, 8.0,
            10.0, 12.0, 15.0, 30.0)  # fmt: skip
# One call to the API: a few milliseconds in-cluster, up to the budget or the watch timeout.
_API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Series named ..._created double every counter and histogram and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


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
    # The resource of each informer, and whether the cluster serves it (its CRD installed).
    resources: Mapping[str, bool] = field(default_factory=dict)
    # Per informer ("Job" and "Pod": objects to adopt; "pods": pods not released yet;
    # "appwrappers"): watch events received, and those that changed what its cache keeps (the
    # rest wake nothing).
    watch_events: Mapping[str, tuple[int, int]] = field(default_factory=dict)


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
        served = GaugeMetricFamily("autowrap_controller_resource_served",
                                   "1 when the cluster serves a resource the controller follows, "
                                   "0 when it does not (its CRD is not installed).",
                                   labels=("resource",))  # fmt: skip
        for resource, present in sorted(stats.resources.items()):
            served.add_metric((resource,), int(present))
        yield served
        events = CounterMetricFamily("autowrap_controller_watch_events",
                                     "Watch events the controller received, by informer and by "
                                     "whether they changed what it keeps (woke: true) or not.",
                                     labels=("informer", "woke"))  # fmt: skip
        for informer, (received, handled) in sorted(stats.watch_events.items()):
            events.add_metric((informer, "true"), handled)
            events.add_metric((informer, "false"), received - handled)
        yield events


class _CertificateCollector:
    """When the serving certificate on disk expires, read from the file when scraped (parsed
    again only when the file changes)."""

    def __init__(self, cert_file: Callable[[], Path | None]) -> None:
        self._cert_file = cert_file
        self._seen: tuple[Path, int, int] | None = None
        self._expiry: float | None = None

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        expiry = self._read()
        if expiry is not None:
            yield GaugeMetricFamily(
                "autowrap_certificate_expiry_timestamp_seconds",
                "When the serving certificate expires (Unix time).", expiry,
            )  # fmt: skip

    def _read(self) -> float | None:
        path = self._cert_file()
        if path is None:
            return None
        try:
            stat = path.stat()
            seen = (path, stat.st_mtime_ns, stat.st_size)
            if seen != self._seen:
                from cryptography import x509

                cert = x509.load_pem_x509_certificate(path.read_bytes())
                self._expiry = cert.not_valid_after_utc.timestamp()
                self._seen = seen
        except (OSError, ValueError):
            return self._expiry  # mid-rotation: the last one read
        return self._expiry


def api_call_label(call: str) -> str:
    """The ``call`` label of an API call: its verb and resource (``get namespaces``), the
    resource only when it is one autowrap's RBAC names, so that the series stay few."""
    verb, _, resource = call.partition(" ")
    return f"{verb} {resource}" if resource in _RESOURCES else f"{verb} other"


def _resources() -> frozenset[str]:
    from webhook.shell.kube import RBAC

    return frozenset(plural for _, plural, _ in RBAC) | {"api groups"}


_RESOURCES = _resources()


class Metrics:
    def __init__(self, in_flight: Callable[[], float]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # The standard process_* (memory, CPU, file descriptors), python_info and python_gc_*.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        Info("autowrap_build", "The running autowrap's version.",
             registry=self.registry).info({"version": __version__})  # fmt: skip
        self._api_calls: dict[tuple[str, str], Any] = {}
        self.api_latency = Histogram(
            "autowrap_kube_api_request_duration_seconds",
            "Time one Kubernetes API call takes, by call and HTTP status code (none: no answer).",
            ("call", "code"), buckets=_API_BUCKETS, registry=self.registry,
        )  # fmt: skip
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
        self.controller_restarts = Counter(
            "autowrap_controller_process_restarts", "Times the controller process ended and "
            "another was started.", registry=self.registry,
        )  # fmt: skip
        self.reconcile_latency = Histogram(
            "autowrap_controller_reconcile_duration_seconds", "Time one controller reconcile takes.",
            buckets=_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.policy_findings = Counter(
            "autowrap_policy_findings_total", "Policy findings at admission that the policy's "
            "enforcement acts on: denied (Enforce) or let through with a warning (Audit); rule "
            "is the rule family.",
            ("policy", "rule", "enforcement"), registry=self.registry,
        )  # fmt: skip
        self.cert_reloads = Counter(
            "autowrap_certificate_reloads_total", "Serving certificate reloads by result.",
            ("result",), registry=self.registry,
        )  # fmt: skip

    def follow_controller(self, stats: Callable[[], ControllerStats]) -> None:
        """Export the controller's counters, read from it at scrape time."""
        self.registry.register(_ControllerCollector(stats))

    def follow_certificate(self, cert_file: Callable[[], Path | None]) -> None:
        """Export the serving certificate's expiry, read from ``cert_file()`` when scraped."""
        self.registry.register(_CertificateCollector(cert_file))

    def api_call(self, call: str, code: int | None, seconds: float) -> None:
        """Time one Kubernetes API call (``call`` as ``ApiFailure`` names it)."""
        key = (api_call_label(call), str(code) if code else "none")
        child = self._api_calls.get(key)
        if child is None:
            child = self._api_calls[key] = self.api_latency.labels(*key)
        child.observe(seconds)

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
