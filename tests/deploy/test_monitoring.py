"""The Grafana dashboard and the PrometheusRule alerts in deploy/monitoring: valid documents
whose queries are balanced and name only series autowrap's /metrics exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from webhook.shell import certs
from webhook.shell.metrics import ControllerStats, Metrics

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"

_FUNCTIONS = frozenset({
    "abs", "absent", "avg", "clamp_min", "count", "delta", "histogram_quantile", "increase",
    "irate", "label_values", "max", "min", "rate", "sum", "time", "topk",
})  # fmt: skip
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset"})
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
    "info": ("_info",),
}


def exposed_series(tmp_path: Path) -> set[str]:
    """Every sample name autowrap's registry can expose, labelled families without children
    included (their # TYPE line), with the controller and the certificate followed."""
    metrics = Metrics(in_flight=lambda: 0)
    metrics.follow_controller(lambda: ControllerStats(failed={"adopt": 1}))
    ca = certs.make_ca()
    certs.write(tmp_path, ca, certs.make_serving(ca, ["autowrap.autowrap-system.svc"]))
    metrics.follow_certificate(lambda: tmp_path / certs.TLS_CERT)
    names: set[str] = set()
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        names.update(family.name + s for s in _SAMPLE_SUFFIXES.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def balanced(expr: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


def referenced(expr: str) -> set[str]:
    """The series a PromQL expression reads; an unknown function fails the test."""
    assert balanced(expr), f"unbalanced: {expr}"
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers ($job included)
    s = re.sub(r"\[[^\[\]]*\]", " ", s)  # ranges ($__rate_interval included)
    s = _GROUPING.sub(" ", s)
    found = set()
    for match in re.finditer(r"(?<![0-9.\w])[A-Za-z_:][A-Za-z0-9_:]*", s):
        token = match.group()
        if s[match.end() :].lstrip().startswith("("):
            assert token in _FUNCTIONS, f"unknown function {token} in {expr}"
        elif token not in _KEYWORDS:
            found.add(token)
    assert found, f"no series in {expr}"
    return found


def _rules() -> dict[str, Any]:
    loaded = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _dashboard() -> dict[str, Any]:
    loaded = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _targets(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_checker_catches_what_it_is_for() -> None:
    assert not balanced("sum(rate(x[5m])")
    assert not balanced('x{a="b"]')
    assert balanced('x{a=")"}')
    assert referenced('sum by (pod) (rate(a_total{job=~"$job"}[$__rate_interval])) / b') == {
        "a_total", "b"}  # fmt: skip
    assert referenced("(x - time()) < 14 * 86400 and 1e3 > y") == {"x", "y"}
    with pytest.raises(AssertionError):
        referenced("summ(x)")


def test_the_alerts_are_a_prometheus_rule_over_autowraps_metrics(tmp_path: Path) -> None:
    rules = _rules()
    assert rules["apiVersion"] == "monitoring.coreos.com/v1"
    assert rules["kind"] == "PrometheusRule"
    known = exposed_series(tmp_path)
    alerts = [rule for group in rules["spec"]["groups"] for rule in group["rules"]]
    assert len({rule["alert"] for rule in alerts}) == len(alerts)
    read: set[str] = set()
    for rule in alerts:
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert balanced(rule["annotations"]["description"]), rule["alert"]
        series = referenced(rule["expr"])
        assert series <= known, f"{rule['alert']} reads {series - known}"
        read |= series
    # webhook errors, latency near the timeout, certificate expiry, stale policies, the
    # controller's backlog, no leader
    assert {
        "autowrap_admission_requests_total",
        "autowrap_admission_duration_seconds_bucket",
        "autowrap_certificate_expiry_timestamp_seconds",
        "autowrap_policies_stale",
        "autowrap_controller_queue_depth",
        "autowrap_controller_leading",
    } <= read


def test_the_latency_alerts_sit_below_the_shortest_webhook_timeout() -> None:
    webhooks = Path(__file__).resolve().parents[2] / "deploy" / "base" / "webhooks.yaml"
    timeouts = [
        entry["timeoutSeconds"]
        for doc in yaml.safe_load_all(webhooks.read_text())
        if doc
        for entry in doc.get("webhooks", [])
    ]
    near = next(
        rule["expr"]
        for group in _rules()["spec"]["groups"]
        for rule in group["rules"]
        if rule["alert"] == "AutowrapWebhookLatencyNearTimeout"
    )
    threshold = float(near.rsplit(">", 1)[1])
    assert threshold < min(timeouts)
    assert threshold in Metrics(in_flight=lambda: 0).latency._upper_bounds


def test_the_dashboard_is_grafana_json_over_autowraps_metrics(tmp_path: Path) -> None:
    dashboard = _dashboard()
    known = exposed_series(tmp_path)
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exprs = _targets(dashboard)
    read: set[str] = set()
    for expr in exprs:
        series = referenced(expr)
        assert series <= known, f"{expr} reads {series - known}"
        read |= series
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            assert balanced(query)
            assert re.fullmatch(r"label_values\((\w+), *\w+\)", query)
            assert query.split("(")[1].split(",")[0] in known
    # What people graph: the webhooks, the API calls, the controller, certificates, process.
    for wanted in (
        "autowrap_admission_duration_seconds_bucket",
        "autowrap_kube_api_request_duration_seconds_bucket",
        "autowrap_controller_queue_depth",
        "autowrap_controller_reconcile_duration_seconds_bucket",
        "autowrap_certificate_expiry_timestamp_seconds",
        "autowrap_build_info",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
    ):
        assert wanted in read, wanted
