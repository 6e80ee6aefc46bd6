"""Compute-only figures: the admission decision without HTTP, TLS or a server.

``admit_per_s`` is ``engine.admit`` alone on the decoded object (like ``gator bench``);
``review_per_s`` is ``admission.review_body`` on the encoded AdmissionReview, which adds the
envelope parsing, the JSONPatch and the response encoding. The wrap payload's API calls are
answered in-process at once, so that figure is the CPU cost around them, not their latency.
``InstantCluster`` is checked against admission's ``Cluster`` protocol by the type checker.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson

from bench.payloads import Payload
from webhook import admission
from webhook.core import engine
from webhook.core.ports import Identity
from webhook.core.provenance import Me
from webhook.shell import policyfiles


class InstantCluster:
    """Answers every API call at once: allowed, queue present, AppWrapper created, its
    components accepted by the dry run, and adopt mode able to serve every queue (no
    MultiKueue, no topology-aware scheduling)."""

    async def create_appwrapper(
        self, namespace: str, body: dict[str, Any], *, dry_run: bool, timeout: float
    ) -> dict[str, Any]:
        return body

    async def get_appwrapper(
        self, namespace: str, name: str, *, timeout: float
    ) -> dict[str, Any] | None:
        return None

    async def appwrapper_terminating(self, namespace: str, name: str, *, timeout: float) -> bool:
        return False

    async def may_create_appwrappers(
        self, who: Identity, namespace: str, *, timeout: float
    ) -> tuple[bool, str]:
        return True, ""

    async def local_queue_exists(
        self, namespace: str, queue: str, *, timeout: float
    ) -> bool | None:
        return True

    async def namespace_labels(self, namespace: str, *, timeout: float) -> dict[str, str]:
        return {}

    async def own_identity(self, *, timeout: float) -> Me:
        return Me("system:serviceaccount:autowrap-system:autowrap")

    async def redirect_reason(self, namespace: str, queue: str, *, timeout: float) -> str | None:
        return None

    async def kueue_workloads(
        self, namespace: str, appwrapper_uid: str, *, timeout: float
    ) -> list[dict[str, Any]]:
        return []

    async def refusal(
        self, namespace: str, components: list[dict[str, Any]], *, timeout: float
    ) -> str | None:
        return None


def _complete(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (every await here is answered at once), loop-free."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("review_body waited for something: the compute figure would be wrong")


def _rate(fn: Any, seconds: float, min_calls: int = 3) -> float:
    calls = 0
    started = time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and calls >= min_calls:
            return calls / elapsed


def measure(payloads: list[Payload], policy_dir: Path, seconds: float) -> list[dict[str, Any]]:
    """Calls per second of ``engine.admit`` and of ``admission.review_body``, per payload."""
    policies = policyfiles.load(policy_dir)
    cluster: admission.Cluster = InstantCluster()
    deps = admission.Deps(policies=lambda: policies, cluster=cluster)
    results: list[dict[str, Any]] = []
    for payload in payloads:
        _, body = payload.body()
        request = orjson.loads(body)["request"]
        obj = request["object"]
        context = engine.Context(
            policies=policies,
            namespace=request["namespace"],
            user=request["userInfo"]["username"],
            uid=request["uid"],
        )
        webhook: admission.Webhook = "mutate" if payload.path == "/mutate" else "validate"

        def review(body: bytes = body, webhook: admission.Webhook = webhook) -> None:
            record = admission.Record(webhook=webhook)
            _complete(
                admission.review_body(body, webhook=webhook, timeout=None, deps=deps, record=record)
            )

        admit_rate = _rate(lambda obj=obj, context=context: engine.admit(obj, context), seconds)
        review_rate = _rate(review, seconds)
        results.append(
            {
                "payload": payload.name,
                "bytes": len(body),
                "admit_per_s": round(admit_rate, 1),
                "admit_ms": round(1000 / admit_rate, 3),
                "review_per_s": round(review_rate, 1),
                "review_ms": round(1000 / review_rate, 3),
            }
        )
    return results
