"""``serve`` without API access: nothing is prepared for a controller that will never come.

Redirect mode cannot create the AppWrapper and answers 503; adopt mode would let the object be
stored gated, with autowrap's finalizer, and no controller would ever adopt or release it. Both
modes refuse the wrap the same way, with a 503 that says why, and nothing is stored.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from testbed.pki import ServingPki
from testbed.policies import in_mode
from testbed.redirect import REPO
from testbed.scenarios import admission_request, encode, post, review
from tests.server.test_e2e import vcjob
from webhook import app
from webhook.core import adoption, engine
from webhook.model import names
from webhook.shell import policyfiles, server


async def _start(pki: ServingPki, tmp_path: Path, mode: str) -> server.Running:
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    for source in (pki.cert_path, pki.key_path, pki.ca_path):
        shutil.copy(source, cert_dir / source.name)
    options = server.Options(
        host="127.0.0.1", port=0, metrics_port=0, cert_dir=cert_dir,
        policy_path=in_mode(REPO / "policies", tmp_path / "policies", mode), use_cluster=False,
        controller=False, watch_caches=False, drain_timeout=1.0,
    )  # fmt: skip
    return await app.start(options)


@pytest.fixture(params=["Adopt", "Redirect"])
async def no_api(
    request: pytest.FixtureRequest, webhook_pki: ServingPki, tmp_path: Path
) -> AsyncIterator[tuple[str, server.Running]]:
    running = await _start(webhook_pki, tmp_path, request.param)
    assert running.state.cluster is None
    try:
        yield request.param, running
    finally:
        await running.drain()


async def _ask(running: server.Running, pki: ServingPki, path: str, obj: dict[str, Any]) -> Any:
    async with aiohttp.ClientSession() as session:
        answer = await post(
            session, running.port, path, encode(review(admission_request(obj))),
            pki.client_context(),
        )  # fmt: skip
    return answer.body["response"]


async def test_a_wrap_candidate_is_refused_with_503_in_both_modes(
    no_api: tuple[str, server.Running], webhook_pki: ServingPki
) -> None:
    mode, running = no_api
    job = vcjob("stranded")
    mutated = await _ask(running, webhook_pki, names.MUTATE_PATH, job)
    if mode == "Adopt":
        # What /validate would see had the object been prepared (by another replica, say).
        context = engine.Context(
            policies=policyfiles.load(running.options.policy_path), namespace="ml", uid="u"
        )
        candidate = engine.wrap_candidate(job, context)
        assert candidate is not None
        job = adoption.prepare(job, candidate, user="alice")
    validated = await _ask(running, webhook_pki, names.VALIDATE_PATH, job)
    if mode == "Adopt":
        # Nothing prepared: no gate, no finalizer, no patch at all.
        assert mutated["allowed"] is False and "patch" not in mutated
        assert mutated["status"]["code"] == 503
        assert mutated["status"]["reason"] == "ServiceUnavailable"
        assert "no access to the Kubernetes API" in mutated["status"]["message"]
        assert "cannot adopt Job ml/stranded" in mutated["status"]["message"]
    else:
        assert mutated["allowed"] is True and "patch" not in mutated  # /validate answers
    assert validated["allowed"] is False and validated["status"]["code"] == 503
    assert "no access to the Kubernetes API" in validated["status"]["message"]


async def test_what_needs_no_api_is_still_answered(
    no_api: tuple[str, server.Running], webhook_pki: ServingPki
) -> None:
    _, running = no_api
    plain = vcjob("plain", labels={})
    for path in (names.MUTATE_PATH, names.VALIDATE_PATH):
        answer = await _ask(running, webhook_pki, path, plain)
        assert answer["allowed"] is True
