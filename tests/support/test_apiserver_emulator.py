"""The apiserver emulator treats webhooks the way kube-apiserver does.

Each rule is exercised against a stub webhook that follows or breaks it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from testbed import prerequisites
from testbed.apiserver import (
    ApiserverEmulator,
    MatchConditionNotEmulated,
    UserInfo,
    WarningRecorder,
    WebhookConfigError,
    WebhookContractViolation,
    resource_info,
    status_json,
)
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import VCJOBS
from testbed.cluster.store import ApiError, Store
from testbed.pki import CertificateAuthority, ServingPki, server_ssl_context, write_pki
from tests.support.fixtures import Listener, TlsServerFactory
from webhook.model.names import SERVICE_NAME, SERVICE_NAMESPACE

JsonDict = dict[str, Any]
Reply = JsonDict | web.StreamResponse
Handler = Callable[[JsonDict], Awaitable[Reply]]


# --- stub webhooks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    review: JsonDict


@dataclass
class StubWebhooks:
    """A TLS server whose routes answer AdmissionReviews with test-chosen replies."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)

    def on(self, path: str, handler: Handler) -> None:
        self.handlers[path] = handler

    def reviews(self, path: str) -> list[JsonDict]:
        return [r.review for r in self.received if r.path == path]

    def app(self) -> web.Application:
        async def dispatch(request: web.Request) -> web.StreamResponse:
            review = await request.json()
            self.received.append(
                Received(request.path, dict(request.query), dict(request.headers), review)
            )
            reply = await self.handlers[request.path](review)
            if isinstance(reply, web.StreamResponse):
                return reply
            return web.json_response(reply)

        app = web.Application(client_max_size=8 * 1024 * 1024)  # room for 3 MiB objects
        app.router.add_post("/{tail:.*}", dispatch)
        return app


def answer(review: JsonDict, **response: Any) -> JsonDict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], **response},
    }


def encode_patch(ops: list[JsonDict]) -> str:
    return base64.b64encode(json.dumps(ops).encode()).decode()


async def allow(review: JsonDict) -> JsonDict:
    return answer(review, allowed=True)


def patching(*ops: JsonDict) -> Handler:
    async def handler(review: JsonDict) -> JsonDict:
        return answer(review, allowed=True, patch=encode_patch(list(ops)), patchType="JSONPatch")

    return handler


def replying(**response: Any) -> Handler:
    async def handler(review: JsonDict) -> JsonDict:
        return answer(review, **response)

    return handler


def raw(make: Callable[[], web.StreamResponse]) -> Handler:
    """Answer with a fresh response each time (aiohttp responses are single-use)."""

    async def handler(review: JsonDict) -> Reply:
        return make()

    return handler


def hook(name: str, path: str, ca_bundle: str, **overrides: Any) -> JsonDict:
    spec: JsonDict = {
        "name": name,
        "clientConfig": {
            "service": {
                "name": SERVICE_NAME,
                "namespace": SERVICE_NAMESPACE,
                "path": path,
                "port": 443,
            },
            "caBundle": ca_bundle,
        },
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    spec.update(overrides)
    return spec


def mutating(name: str, *hooks: JsonDict) -> JsonDict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }


def validating(name: str, *hooks: JsonDict) -> JsonDict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(hooks),
    }


def pod(name: str = "p", namespace: str = "team-a", **labels: str) -> JsonDict:
    meta: JsonDict = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


@pytest.fixture
def stubs() -> StubWebhooks:
    return StubWebhooks()


@pytest.fixture
async def listener(stubs: StubWebhooks, tls_server: TlsServerFactory) -> Listener:
    return await tls_server(stubs.app())


@pytest.fixture
def ca(webhook_pki: ServingPki) -> str:
    return webhook_pki.ca_bundle


EmulatorFactory = Callable[..., ApiserverEmulator]


@pytest.fixture
def emulator_for(listener: Listener) -> EmulatorFactory:
    def make(*configs: JsonDict, **kwargs: Any) -> ApiserverEmulator:
        return ApiserverEmulator(listener.host, listener.port, list(configs), **kwargs)

    return make


# --- the request ------------------------------------------------------------------------------


async def test_request_carries_the_fields_kube_apiserver_sends(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/mutate", allow)
    user = UserInfo(username="alice", uid="u-1", groups=("team-a",), extra={"scopes": ["x"]})
    result = await emulator_for(mutating("m", hook("m.autowrap.io", "/mutate", ca))).create(
        pod(), user=user
    )

    assert result.allowed and result.status_code == 201
    (received,) = stubs.received
    request = received.review["request"]
    assert received.review["apiVersion"] == "admission.k8s.io/v1"
    assert received.review["kind"] == "AdmissionReview"
    assert uuid.UUID(request["uid"])
    assert request["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert request["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert request["requestKind"] == request["kind"]
    assert request["requestResource"] == request["resource"]
    assert (request["name"], request["namespace"], request["operation"]) == (
        "p",
        "team-a",
        "CREATE",
    )
    assert request["userInfo"] == {
        "username": "alice",
        "uid": "u-1",
        "groups": ["team-a"],
        "extra": {"scopes": ["x"]},
    }
    assert request["object"]["metadata"]["name"] == "p"
    assert request["oldObject"] is None
    assert request["dryRun"] is False
    assert request["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert received.query == {"timeout": "10s"}
    assert received.headers["Content-Type"] == "application/json"
    assert received.headers["Host"] == f"{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc:443"


async def test_every_call_gets_a_fresh_uid(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/mutate", allow)
    emulator = emulator_for(mutating("m", hook("m.autowrap.io", "/mutate", ca)))
    await emulator.create(pod("a"))
    await emulator.create(pod("b"))
    uids = [r["request"]["uid"] for r in stubs.reviews("/mutate")]
    assert len(set(uids)) == 2


async def test_timeout_query_is_the_remaining_budget_rounded_up(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/mutate", allow)
    emulator = emulator_for(mutating("m", hook("m.autowrap.io", "/mutate", ca, timeoutSeconds=7)))
    await emulator.create(pod("a"))
    await emulator.create(pod("b"), request_timeout=2.5)
    assert [r.query["timeout"] for r in stubs.received] == ["7s", "3s"]


async def test_a_generated_name_reaches_validating_webhooks_but_not_mutating_ones(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    # registry/rest/create.go:218-230: validating admission takes the name from the object when
    # the request had none, so the generated name is request.name for validating webhooks only.
    stubs.on("/mutate", allow)
    stubs.on("/validate", allow)
    obj = pod()
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = "job-"
    emulator = emulator_for(
        mutating("m", hook("m.autowrap.io", "/mutate", ca)),
        validating("v", hook("v.autowrap.io", "/validate", ca)),
    )
    in_process: list[JsonDict] = []
    result = await emulator.create(
        obj, validators=[("volcano", lambda request: in_process.append(request))]
    )

    (mutated,) = stubs.reviews("/mutate")
    (validated,) = stubs.reviews("/validate")
    assert "name" not in mutated["request"]
    assert "name" not in mutated["request"]["object"]["metadata"]
    generated = result.object["metadata"]["name"]
    assert generated.startswith("job-") and len(generated) == len("job-") + 5
    assert validated["request"]["name"] == generated
    assert validated["request"]["object"]["metadata"]["name"] == generated
    assert in_process[0]["name"] == generated
    assert ("pods", "team-a", generated) in emulator.stored


# --- TLS -----------------------------------------------------------------------------------


async def test_tls_uses_the_service_hostname_for_sni(
    stubs: StubWebhooks, ca: str, webhook_pki: ServingPki, tls_server: TlsServerFactory
) -> None:
    seen: list[str | None] = []
    ctx = webhook_pki.server_context()

    def remember(sock: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        seen.append(server_name)

    ctx.sni_callback = remember
    stubs.on("/mutate", allow)
    where = await tls_server(stubs.app(), ssl_context=ctx)
    emulator = ApiserverEmulator(
        where.host, where.port, [mutating("m", hook("m.autowrap.io", "/mutate", ca))]
    )
    assert (await emulator.create(pod())).allowed
    assert seen == [f"{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc"]


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_certificate_for_another_name_fails_tls(
    stubs: StubWebhooks,
    ca: str,
    webhook_pki: ServingPki,
    tls_server: TlsServerFactory,
    tmp_path: Any,
    policy: str,
) -> None:
    other = write_pki(tmp_path, ["other.autowrap-system.svc"], ca=webhook_pki.ca)
    stubs.on("/mutate", allow)
    where = await tls_server(
        stubs.app(), ssl_context=server_ssl_context(other.cert_path, other.key_path)
    )
    emulator = ApiserverEmulator(
        where.host,
        where.port,
        [mutating("m", hook("m.autowrap.io", "/mutate", ca, failurePolicy=policy))],
    )
    result = await emulator.create(pod())

    assert stubs.received == []
    (call,) = result.calls
    assert call.error is not None and "certificate" in call.error
    if policy == "Fail":
        assert not result.allowed and result.status_code == 500
        assert result.message.startswith(
            'Internal error occurred: failed calling webhook "m.autowrap.io": '
        )
    else:
        assert result.allowed and call.failed_open and emulator.failed_open == [call]
    assert emulator.contract_violations == []


async def test_server_certificate_is_verified_against_the_ca_bundle_only(
    stubs: StubWebhooks, emulator_for: EmulatorFactory
) -> None:
    stranger = CertificateAuthority.create("someone-else")
    bundle = base64.b64encode(stranger.cert_pem).decode()
    stubs.on("/mutate", allow)
    result = await emulator_for(mutating("m", hook("m.autowrap.io", "/mutate", bundle))).create(
        pod()
    )
    assert not result.allowed
    assert "certificate verify failed" in result.message
    assert stubs.received == []


async def test_connection_refused_follows_the_failure_policy(ca: str, unused_tcp_port: int) -> None:
    fail = ApiserverEmulator(
        "127.0.0.1", unused_tcp_port, [mutating("m", hook("m.autowrap.io", "/mutate", ca))]
    )
    ignore = ApiserverEmulator(
        "127.0.0.1",
        unused_tcp_port,
        [mutating("m", hook("m.autowrap.io", "/mutate", ca, failurePolicy="Ignore"))],
    )
    refused = await fail.create(pod())
    assert not refused.allowed and "connect" in refused.message
    assert (await ignore.create(pod())).allowed


# --- response contract ------------------------------------------------------------------------


async def test_uid_mismatch_is_a_contract_violation(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    async def wrong_uid(review: JsonDict) -> JsonDict:
        return {**answer(review, allowed=True), "response": {"uid": "nope", "allowed": True}}

    stubs.on("/validate", wrong_uid)
    emulator = emulator_for(validating("v", hook("v.autowrap.io", "/validate", ca)))
    result = await emulator.create(pod())

    assert not result.allowed and result.status_code == 500
    assert 'expected response.uid="' in result.message and 'got "nope"' in result.message
    assert len(emulator.contract_violations) == 1
    assert emulator.stored == {}


async def test_contract_violation_under_ignore_is_skipped_but_still_recorded(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", replying(uid="nope", allowed=False))
    emulator = emulator_for(
        validating("v", hook("v.autowrap.io", "/validate", ca, failurePolicy="Ignore"))
    )
    result = await emulator.create(pod())
    assert result.allowed
    assert emulator.contract_violations and emulator.failed_open[0].name == "v.autowrap.io"


@pytest.mark.parametrize(
    ("mutating_hook", "response", "expected"),
    [
        (
            False,
            {"allowed": True, "patch": encode_patch([]), "patchType": "JSONPatch"},
            "validating webhook may not return response.patch",
        ),
        (
            False,
            {"allowed": True, "patchType": "JSONPatch"},
            "validating webhook may not return response.patchType",
        ),
        (
            True,
            {"allowed": True, "patch": encode_patch([{"op": "add", "path": "/x", "value": 1}])},
            "webhook returned response.patch but not response.patchType",
        ),
        (
            True,
            {"allowed": True, "patchType": "JSONPatch"},
            "webhook returned response.patchType but not response.patch",
        ),
        (
            True,
            {"allowed": True, "patch": encode_patch([]), "patchType": "MergePatch"},
            'unsupported patch type "MergePatch"',
        ),
        (
            True,
            {"allowed": True, "patch": "not base64!", "patchType": "JSONPatch"},
            "illegal base64 data",
        ),
    ],
    ids=[
        "patch-from-validating",
        "patch-type-from-validating",
        "patch-without-type",
        "type-without-patch",
        "merge-patch",
        "non-base64-patch",
    ],
)
async def test_patch_rules_are_contract_violations(
    stubs: StubWebhooks,
    ca: str,
    emulator_for: EmulatorFactory,
    mutating_hook: bool,
    response: JsonDict,
    expected: str,
) -> None:
    path = "/mutate" if mutating_hook else "/validate"
    stubs.on(path, replying(**response))
    config = (mutating if mutating_hook else validating)("c", hook("h.autowrap.io", path, ca))
    emulator = emulator_for(config)
    result = await emulator.create(pod())
    assert not result.allowed and result.status_code == 500
    assert expected in result.message
    assert expected in emulator.contract_violations[0]


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_patch_that_does_not_apply_fails_the_request_whatever_the_policy(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, policy: str
) -> None:
    stubs.on("/mutate", patching({"op": "add", "path": "/metadata/labels/x", "value": "y"}))
    emulator = emulator_for(
        mutating("m", hook("m.autowrap.io", "/mutate", ca, failurePolicy=policy))
    )
    result = await emulator.create(pod())  # no labels map: "add" below it cannot apply
    assert not result.allowed and result.status_code == 500 and result.reason == "InternalError"
    assert emulator.contract_violations


def raw_patch(patch: bytes) -> Handler:
    """Allow with ``patch`` as the patch bytes, whatever they are."""
    return replying(allowed=True, patch=base64.b64encode(patch).decode(), patchType="JSONPatch")


@pytest.mark.parametrize(
    ("patch", "decode_error"),
    [
        (
            b'{"op": "add", "path": "/metadata/labels", "value": {}}',
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        ),
        (b'[{"op": "add"', "Expecting ',' delimiter"),
        (b'["add"]', "json: cannot unmarshal string into Go value of type jsonpatch.Operation"),
    ],
    ids=["object", "not-json", "array-of-strings"],
)
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_an_undecodable_patch_is_a_call_error_the_failure_policy_decides(
    stubs: StubWebhooks,
    ca: str,
    emulator_for: EmulatorFactory,
    patch: bytes,
    decode_error: str,
    policy: str,
) -> None:
    # mutating/dispatcher.go:336-339: jsonpatch.DecodePatch failing is an ErrCallingWebhook.
    stubs.on("/mutate", raw_patch(patch))
    stubs.on("/validate", allow)
    emulator = emulator_for(
        mutating("m", hook("m.autowrap.io", "/mutate", ca, failurePolicy=policy)),
        validating("v", hook("v.autowrap.io", "/validate", ca)),
    )
    result = await emulator.create(pod())

    reason_prefix = "received undecodable patch in webhook response: "
    if policy == "Ignore":
        assert result.allowed, result.message
        assert result.object["metadata"] == {**pod()["metadata"], **{
            k: result.object["metadata"][k] for k in ("uid", "creationTimestamp",
                                                      "resourceVersion")}}  # fmt: skip
        assert [c.name for c in emulator.failed_open] == ["m.autowrap.io"]
        assert len(stubs.reviews("/validate")) == 1
    else:
        assert (result.allowed, result.status_code, result.reason) == (
            False,
            500,
            "InternalError",
        )
        assert result.message.startswith(
            f'Internal error occurred: failed calling webhook "m.autowrap.io": {reason_prefix}'
        )
        assert decode_error in result.message
        assert stubs.reviews("/validate") == [] and emulator.stored == {}
    (call,) = [c for c in result.calls if c.phase == "mutating"]
    assert call.error is not None and call.error.startswith(reason_prefix) and not call.patched
    assert decode_error in emulator.contract_violations[0]


@pytest.mark.parametrize("patch", [b"[]", b"null"], ids=["empty-array", "null"])
async def test_an_empty_patch_is_no_change_even_on_delete(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, patch: bytes
) -> None:
    # mutating/dispatcher.go:341-343: a patch that decodes to no operation changes nothing, so
    # the DELETE check after it (:345-348) is not reached either.
    stubs.on("/mutate", raw_patch(patch))
    emulator = emulator_for(mutating("m", _all_operations("m.autowrap.io", "/mutate", ca)))
    created = await emulator.create(pod())
    deleted = await emulator.admit("DELETE", created.object, old_object=created.object)
    assert created.allowed and deleted.allowed, (created.message, deleted.message)
    assert created.object["spec"] == pod()["spec"]
    assert not any(c.patched for c in emulator.calls)
    assert emulator.contract_violations == [] and emulator.failed_open == []


@pytest.mark.parametrize(
    "reply",
    [
        lambda: web.Response(status=500, text="boom"),
        lambda: web.Response(status=201, text="{}", content_type="application/json"),
        lambda: web.Response(status=200, text="not json", content_type="application/json"),
        lambda: web.Response(
            status=200, text='{"apiVersion":"admission.k8s.io/v1"}', content_type="text/plain"
        ),
    ],
    ids=["500", "201", "garbage", "wrong-content-type"],
)
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_non_200_or_garbage_answer_follows_the_failure_policy(
    stubs: StubWebhooks,
    ca: str,
    emulator_for: EmulatorFactory,
    reply: Callable[[], web.Response],
    policy: str,
) -> None:
    stubs.on("/validate", raw(reply))
    emulator = emulator_for(
        validating("v", hook("v.autowrap.io", "/validate", ca, failurePolicy=policy))
    )
    result = await emulator.create(pod())
    assert result.allowed is (policy == "Ignore")
    if policy == "Fail":
        assert 'failed calling webhook "v.autowrap.io"' in result.message
    assert len(emulator.contract_violations) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "webhook response was absent",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {}},
            "expected webhook response of admission.k8s.io/v1",
        ),
    ],
    ids=["absent-response", "wrong-version"],
)
async def test_the_review_envelope_is_checked(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, body: JsonDict, expected: str
) -> None:
    stubs.on("/validate", raw(lambda: web.json_response(body)))
    result = await emulator_for(validating("v", hook("v.autowrap.io", "/validate", ca))).create(
        pod()
    )
    assert not result.allowed and expected in result.message


async def test_strict_mode_raises_on_a_contract_violation(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", replying(uid="nope", allowed=True))
    emulator = emulator_for(validating("v", hook("v.autowrap.io", "/validate", ca)), strict=True)
    with pytest.raises(WebhookContractViolation, match="expected response.uid"):
        await emulator.create(pod())


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_slow_webhook_is_cut_off_at_timeout_seconds(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, policy: str
) -> None:
    async def slow(review: JsonDict) -> JsonDict:
        await asyncio.sleep(5)
        return answer(review, allowed=True)

    stubs.on("/validate", slow)
    emulator = emulator_for(
        validating(
            "v", hook("v.autowrap.io", "/validate", ca, timeoutSeconds=1, failurePolicy=policy)
        )
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await emulator.create(pod())
    assert 0.9 <= loop.time() - started < 3
    assert result.allowed is (policy == "Ignore")
    assert "context deadline exceeded" in (result.calls[0].error or "")
    assert emulator.contract_violations == []


# --- denial ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [
        (
            {"code": 200, "message": "no"},
            400,
            'admission webhook "v.autowrap.io" denied the request: no',
        ),
        (
            {"code": 403, "message": "forbidden queue"},
            403,
            'admission webhook "v.autowrap.io" denied the request: forbidden queue',
        ),
        (
            {"reason": "Because"},
            400,
            'admission webhook "v.autowrap.io" denied the request: Because',
        ),
        (None, 400, 'admission webhook "v.autowrap.io" denied the request without explanation'),
    ],
    ids=["code-200-coerced", "code-kept", "reason-only", "no-explanation"],
)
async def test_a_denial_is_reported_like_kube_apiserver(
    stubs: StubWebhooks,
    ca: str,
    emulator_for: EmulatorFactory,
    status: JsonDict | None,
    code: int,
    message: str,
) -> None:
    response: JsonDict = {"allowed": False}
    if status is not None:
        response["status"] = status
    stubs.on("/validate", replying(**response))
    emulator = emulator_for(validating("v", hook("v.autowrap.io", "/validate", ca)))
    result = await emulator.create(pod())
    assert (result.allowed, result.status_code, result.message) == (False, code, message)
    assert emulator.contract_violations == []
    assert emulator.stored == {}


async def test_warnings_reach_the_client_even_on_denial(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/mutate", replying(allowed=True, warnings=["one", "one", "two"]))
    stubs.on("/validate", replying(allowed=False, warnings=["three"]))
    result = await emulator_for(
        mutating("m", hook("m.autowrap.io", "/mutate", ca)),
        validating("v", hook("v.autowrap.io", "/validate", ca)),
    ).create(pod())
    assert result.warnings == ("one", "two", "three")


def test_warnings_are_truncated_like_the_apiserver_filter() -> None:
    recorder = WarningRecorder()
    for i in range(20):
        recorder.add(f"{i:03d}" + "x" * 397)
    assert recorder.headers[0] == "000" + "x" * 253
    assert all(len(h) == 256 for h in recorder.headers)
    assert sum(len(h) for h in recorder.headers) == 256 * 16  # stops once 4096 is reached

    small = WarningRecorder()
    small.add("a" * 1000)
    small.add("b" * 1000)
    assert [len(h) for h in small.headers] == [1000, 1000]


# --- dry run --------------------------------------------------------------------------------


@pytest.mark.parametrize("side_effects", ["Some", "Unknown"])
async def test_dry_run_is_rejected_without_calling_a_webhook_with_side_effects(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, side_effects: str
) -> None:
    stubs.on("/validate", allow)
    emulator = emulator_for(
        validating(
            "v",
            hook(
                "v.autowrap.io", "/validate", ca, sideEffects=side_effects, failurePolicy="Ignore"
            ),
        )
    )
    result = await emulator.create(pod(), dry_run=True)
    assert not result.allowed and result.status_code == 400
    assert result.message == 'admission webhook "v.autowrap.io" does not support dry run'
    assert stubs.received == []


async def test_dry_run_reaches_none_on_dry_run_webhooks_and_stores_nothing(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", allow)
    emulator = emulator_for(
        validating("v", hook("v.autowrap.io", "/validate", ca, sideEffects="NoneOnDryRun"))
    )
    result = await emulator.create(pod(), dry_run=True)
    (review,) = stubs.reviews("/validate")
    assert result.allowed and result.dry_run
    assert review["request"]["dryRun"] is True
    assert review["request"]["options"]["dryRun"] == ["All"]
    assert emulator.stored == {}


# --- matching ---------------------------------------------------------------------------------


async def test_object_selector_skips_objects_without_the_label(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", replying(allowed=False))
    emulator = emulator_for(
        validating(
            "v",
            hook(
                "v.autowrap.io",
                "/validate",
                ca,
                objectSelector={
                    "matchExpressions": [
                        {"key": "autowrap.io/wrap", "operator": "In", "values": ["true"]}
                    ]
                },
            ),
        )
    )
    assert (await emulator.create(pod("plain"))).allowed
    assert not (await emulator.create(pod("opted", **{"autowrap.io/wrap": "true"}))).allowed
    assert [r["request"]["name"] for r in stubs.reviews("/validate")] == ["opted"]


async def test_namespace_selector_uses_namespace_labels_including_the_automatic_name(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", replying(allowed=False))
    selector = {
        "matchLabels": {"team": "ml"},
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ],
    }
    emulator = emulator_for(
        validating("v", hook("v.autowrap.io", "/validate", ca, namespaceSelector=selector)),
        namespace_labels={"team-a": {"team": "ml"}, "kube-system": {"team": "ml"}, "other": {}},
    )
    assert not (await emulator.create(pod(namespace="team-a"))).allowed
    assert (await emulator.create(pod(namespace="kube-system"))).allowed
    assert (await emulator.create(pod(namespace="other"))).allowed
    missing = await emulator.create(pod(namespace="nowhere"))
    assert (missing.status_code, missing.message) == (404, 'namespaces "nowhere" not found')


@pytest.mark.parametrize(
    ("rule", "called"),
    [
        ({"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}, True),
        (
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["UPDATE"],
                "resources": ["pods"],
            },
            False,
        ),
        (
            {
                "apiGroups": ["batch"],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            },
            False,
        ),
        (
            {
                "apiGroups": [""],
                "apiVersions": ["v2"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            },
            False,
        ),
        (
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["services"],
            },
            False,
        ),
        (
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods/*"],
            },
            True,
        ),
        (
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Cluster",
            },
            False,
        ),
    ],
    ids=["wildcards", "operation", "group", "version", "resource", "subresource-wildcard", "scope"],
)
async def test_rules_match_operation_group_version_resource_and_scope(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, rule: JsonDict, called: bool
) -> None:
    stubs.on("/validate", allow)
    await emulator_for(
        validating("v", hook("v.autowrap.io", "/validate", ca, rules=[rule]))
    ).create(pod())
    assert bool(stubs.received) is called


def test_a_match_condition_without_a_predicate_is_an_error(ca: str) -> None:
    config = validating(
        "v",
        hook(
            "v.autowrap.io",
            "/validate",
            ca,
            matchConditions=[
                {"name": "not-sa", "expression": "!request.userInfo.username.startsWith('system:')"}
            ],
        ),
    )
    with pytest.raises(MatchConditionNotEmulated, match="not-sa"):
        ApiserverEmulator("127.0.0.1", 1, [config])


async def test_match_conditions_use_the_supplied_predicates(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    expr = "!request.userInfo.username.startsWith('system:')"
    stubs.on("/validate", allow)
    emulator = emulator_for(
        validating(
            "v",
            hook(
                "v.autowrap.io",
                "/validate",
                ca,
                matchConditions=[{"name": "not-system", "expression": expr}],
            ),
        ),
        match_conditions={expr: lambda r: not r["userInfo"]["username"].startswith("system:")},
    )
    await emulator.create(pod("a"), user=UserInfo("system:serviceaccount:x:y"))
    await emulator.create(pod("b"), user=UserInfo("alice"))
    assert [r["request"]["name"] for r in stubs.reviews("/validate")] == ["b"]


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_failing_match_condition_follows_the_failure_policy(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory, policy: str
) -> None:
    def broken(request: JsonDict) -> bool:
        raise KeyError("no such field")

    stubs.on("/validate", allow)
    emulator = emulator_for(
        validating(
            "v",
            hook(
                "v.autowrap.io",
                "/validate",
                ca,
                failurePolicy=policy,
                matchConditions=[{"name": "c", "expression": "x"}],
            ),
        ),
        match_conditions={"x": broken},
    )
    result = await emulator.create(pod())
    assert stubs.received == []
    assert result.allowed is (policy == "Ignore")
    if policy == "Fail":
        assert result.status_code == 403 and "failed evaluating match conditions" in result.message


# --- ordering and reinvocation ------------------------------------------------------------------


def append_annotation(value: str) -> Handler:
    """Record the call order in an annotation; sees what earlier webhooks patched in."""

    async def handler(review: JsonDict) -> JsonDict:
        annotations = review["request"]["object"]["metadata"].get("annotations")
        if annotations is None:
            op: JsonDict = {"op": "add", "path": "/metadata/annotations", "value": {"order": value}}
        else:
            op = {
                "op": "replace",
                "path": "/metadata/annotations/order",
                "value": f"{annotations['order']},{value}",
            }
        return answer(review, allowed=True, patch=encode_patch([op]), patchType="JSONPatch")

    return handler


async def test_mutating_webhooks_run_in_order_each_seeing_the_previous_patch(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    for path in ("/a", "/b", "/c"):
        stubs.on(path, append_annotation(path[1:]))
    # Configurations are ordered by name ("1-first" < "2-second"), webhooks by list order.
    emulator = emulator_for(
        mutating("2-second", hook("c.autowrap.io", "/c", ca)),
        mutating("1-first", hook("a.autowrap.io", "/a", ca), hook("b.autowrap.io", "/b", ca)),
    )
    result = await emulator.create(pod())
    assert result.object["metadata"]["annotations"] == {"order": "a,b,c"}
    assert [c.name for c in result.calls] == ["a.autowrap.io", "b.autowrap.io", "c.autowrap.io"]
    assert all(c.patched for c in result.calls)
    assert emulator.stored[("pods", "team-a", "p")]["metadata"]["annotations"] == {"order": "a,b,c"}


async def test_validating_webhooks_run_in_parallel_on_the_mutated_object(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    arrived = {"/v1": asyncio.Event(), "/v2": asyncio.Event()}
    seen: list[JsonDict] = []

    def meeting(mine: str, other: str) -> Handler:
        async def handler(review: JsonDict) -> JsonDict:
            seen.append(review["request"]["object"]["metadata"]["labels"])
            arrived[mine].set()
            await asyncio.wait_for(arrived[other].wait(), timeout=3)
            return answer(review, allowed=True)

        return handler

    stubs.on("/m", patching({"op": "add", "path": "/metadata/labels", "value": {"m": "1"}}))
    stubs.on("/v1", meeting("/v1", "/v2"))
    stubs.on("/v2", meeting("/v2", "/v1"))
    emulator = emulator_for(
        mutating("m", hook("m.autowrap.io", "/m", ca)),
        validating("v", hook("v1.autowrap.io", "/v1", ca), hook("v2.autowrap.io", "/v2", ca)),
    )
    result = await emulator.create(pod())
    assert result.allowed, result.message
    assert seen == [{"m": "1"}, {"m": "1"}]


async def test_the_first_validating_failure_to_arrive_is_reported_after_all_have_finished(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    # validating/dispatcher.go:127, :229-245: errors are collected in the order the webhooks
    # finish, after every one has; the first received is returned.
    async def slow_denial(review: JsonDict) -> JsonDict:
        await asyncio.sleep(0.3)
        return answer(review, allowed=False, status={"message": "slow"})

    stubs.on("/slow", slow_denial)
    stubs.on("/fast", replying(allowed=False, status={"message": "fast"}))
    emulator = emulator_for(
        validating(
            "v", hook("slow.autowrap.io", "/slow", ca), hook("fast.autowrap.io", "/fast", ca)
        )
    )
    result = await emulator.create(pod())

    assert (result.status_code, result.message) == (
        400,
        'admission webhook "fast.autowrap.io" denied the request: fast',
    )
    assert [(c.name, c.allowed) for c in result.calls] == [
        ("fast.autowrap.io", False),
        ("slow.autowrap.io", False),
    ], "the slow webhook was waited for"


async def test_validation_is_skipped_when_a_mutating_webhook_rejects(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/m", replying(allowed=False, status={"message": "nope"}))
    stubs.on("/v", allow)
    result = await emulator_for(
        mutating("m", hook("m.autowrap.io", "/m", ca)),
        validating("v", hook("v.autowrap.io", "/v", ca)),
    ).create(pod())
    assert not result.allowed and stubs.reviews("/v") == []


async def test_an_if_needed_webhook_is_reinvoked_once_after_a_later_change(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/first", allow)
    stubs.on("/never", allow)
    stubs.on("/later", patching({"op": "add", "path": "/metadata/labels", "value": {"b": "1"}}))
    emulator = emulator_for(
        mutating(
            "m",
            hook("first.autowrap.io", "/first", ca, reinvocationPolicy="IfNeeded"),
            hook("never.autowrap.io", "/never", ca),
            hook("later.autowrap.io", "/later", ca, reinvocationPolicy="IfNeeded"),
        )
    )
    result = await emulator.create(pod())
    assert [(c.name, c.round) for c in result.calls] == [
        ("first.autowrap.io", 0),
        ("never.autowrap.io", 0),
        ("later.autowrap.io", 0),
        ("first.autowrap.io", 1),
    ]
    assert stubs.reviews("/first")[1]["request"]["object"]["metadata"]["labels"] == {"b": "1"}


async def test_no_reinvocation_when_nothing_changed_after_the_webhook(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/first", patching({"op": "add", "path": "/metadata/labels", "value": {"a": "1"}}))
    stubs.on("/later", allow)
    emulator = emulator_for(
        mutating(
            "m",
            hook("first.autowrap.io", "/first", ca, reinvocationPolicy="IfNeeded"),
            hook("later.autowrap.io", "/later", ca),
        )
    )
    result = await emulator.create(pod())
    assert [c.name for c in result.calls] == ["first.autowrap.io", "later.autowrap.io"]


# --- storage and configuration ----------------------------------------------------------------


async def test_a_second_create_of_the_same_name_conflicts(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/v", allow)
    emulator = emulator_for(validating("v", hook("v.autowrap.io", "/v", ca)))
    first = await emulator.create(pod())
    second = await emulator.create(pod())
    assert first.allowed and first.object["metadata"]["resourceVersion"]
    assert (second.status_code, second.reason, second.message) == (
        409,
        "AlreadyExists",
        'pods "p" already exists',
    )


def test_resources_are_derived_from_api_version_and_kind() -> None:
    volcano = resource_info({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"})
    wrapper = resource_info({"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper"})
    assert (volcano.group, volcano.version, volcano.resource) == (
        "batch.volcano.sh",
        "v1alpha1",
        "jobs",
    )
    assert wrapper.qualified_resource == "appwrappers.workload.codeflare.dev"
    assert (
        resource_info({"apiVersion": "x.io/v1", "kind": "Thing"}, resource="things").resource
        == "things"
    )
    with pytest.raises(ValueError, match="resource="):
        resource_info({"apiVersion": "x.io/v1", "kind": "Thing"})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"clientConfig": {"service": {"name": "s", "namespace": "n"}}}, "no caBundle"),
        ({"clientConfig": {"url": "https://x"}}, "clientConfig.url"),
        ({"admissionReviewVersions": ["v1beta1"]}, "must include v1"),
        ({"failurePolicy": "Sometimes"}, "failurePolicy"),
        ({"timeoutSeconds": 31}, "timeoutSeconds"),
        ({"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}, "operator"),
    ],
    ids=["no-ca", "url", "review-version", "failure-policy", "timeout", "selector"],
)
def test_unusable_configurations_are_refused(ca: str, overrides: JsonDict, message: str) -> None:
    with pytest.raises(WebhookConfigError, match=message):
        ApiserverEmulator("127.0.0.1", 1, [validating("v", hook("v.io", "/v", ca, **overrides))])


async def test_an_injected_ca_bundle_fills_configurations_without_one(
    stubs: StubWebhooks, ca: str, listener: Listener
) -> None:
    spec = hook("v.autowrap.io", "/v", ca)
    del spec["clientConfig"]["caBundle"]
    stubs.on("/v", allow)
    emulator = ApiserverEmulator(
        listener.host, listener.port, [validating("v", spec)], ca_bundle=ca
    )
    assert (await emulator.create(pod())).allowed


# --- what the storage layer refuses -------------------------------------------------------------

LIMIT = 3 * 1024 * 1024


def padded_pod(size: int) -> JsonDict:
    """A pod whose compact JSON encoding is exactly ``size`` bytes."""
    obj = pod()
    obj["metadata"]["annotations"] = {"pad": ""}
    obj["metadata"]["annotations"]["pad"] = "x" * (
        size - len(json.dumps(obj, separators=(",", ":")))
    )
    assert len(json.dumps(obj, separators=(",", ":")).encode()) == size
    return obj


async def test_a_body_over_3_mib_is_refused_before_admission(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    # handlers/rest.go:372-389 with MaxRequestBodyBytes 3 MiB (server/config.go:474): a body of
    # exactly the limit is read, one byte more is 413 before anything is decoded.
    stubs.on("/mutate", allow)
    stubs.on("/validate", allow)
    emulator = emulator_for(
        mutating("m", _all_operations("m.autowrap.io", "/mutate", ca)),
        validating("v", _all_operations("v.autowrap.io", "/validate", ca)),
    )
    at_limit = await emulator.create(padded_pod(LIMIT))
    assert at_limit.allowed, at_limit.message
    calls_so_far = len(stubs.received)

    over = await emulator.create(padded_pod(LIMIT + 1))
    update = await emulator.admit("UPDATE", padded_pod(LIMIT + 1), old_object=pod())

    expected = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    }
    assert over.status == expected and update.status == expected
    assert over.calls == () and update.calls == ()
    assert len(stubs.received) == calls_so_far, "no webhook saw the oversized object"


def _vcjob_hook(ca: str) -> JsonDict:
    spec = hook("v.autowrap.io", "/validate", ca)
    spec["rules"] = [
        {
            "apiGroups": ["batch.volcano.sh"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["jobs"],
        }
    ]
    return spec


async def test_the_storage_validation_runs_after_mutation_and_before_validating_webhooks(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    # registry/store.go:569 rest.BeforeCreate (the strategy's Validate) before :575
    # createValidation, and :825 rest.BeforeUpdate before :839-843 updateValidation.
    stubs.on("/mutate", patching({"op": "add", "path": "/metadata/labels", "value": {"m": "1"}}))
    stubs.on("/validate", allow)
    emulator = emulator_for(
        mutating("m", _all_operations("m.autowrap.io", "/mutate", ca)),
        validating("v", _all_operations("v.autowrap.io", "/validate", ca)),
    )
    checked: list[tuple[JsonDict, JsonDict | None]] = []
    invalid = status_json(422, 'Pod "p" is invalid: spec.containers: Required value', "Invalid")

    def refuse(obj: JsonDict, old: JsonDict | None) -> JsonDict | None:
        checked.append((obj, old))
        return invalid

    generated = pod()
    del generated["metadata"]["name"]
    generated["metadata"]["generateName"] = "p-"
    created = await emulator.create(generated, validate_object=refuse)
    updated = await emulator.admit("UPDATE", pod(), old_object=pod(), validate_object=refuse)

    assert created.status == invalid and updated.status == invalid
    assert len(stubs.reviews("/mutate")) == 2 and stubs.reviews("/validate") == []
    assert [c.phase for c in emulator.calls] == ["mutating", "mutating"]
    (new, none), (changed, old) = checked
    assert new["metadata"]["labels"] == {"m": "1"} and new["metadata"]["name"].startswith("p-")
    assert none is None and changed["metadata"]["labels"] == {"m": "1"} and old == pod()
    assert emulator.stored == {}

    valid = await emulator.create(pod(), validate_object=lambda obj, old: None)
    assert valid.allowed and len(stubs.reviews("/validate")) == 1


async def test_a_custom_resource_failing_its_crd_schema_never_reaches_validating_webhooks(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    prerequisites.crds()
    store = Store()
    stubs.on("/validate", allow)
    emulator = emulator_for(validating("v", _vcjob_hook(ca)))
    fake = FakeCluster(emulator=emulator, store=store)

    def job(min_available: Any) -> JsonDict:
        return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                "metadata": {"name": "j", "namespace": "default"},
                "spec": {"minAvailable": min_available}}  # fmt: skip

    with pytest.raises(ApiError) as err:
        await fake.create(VCJOBS, job("two"))
    assert (err.value.status, err.value.reason) == (422, "Invalid")
    assert "spec.minAvailable" in err.value.message
    assert stubs.reviews("/validate") == [] and emulator.calls == []

    stored = await fake.create(VCJOBS, job(2))
    assert len(stubs.reviews("/validate")) == 1
    stored["spec"]["minAvailable"] = "two"
    with pytest.raises(ApiError) as err:
        await fake.update(VCJOBS, stored)
    assert (err.value.status, err.value.reason) == (422, "Invalid")
    assert len(stubs.reviews("/validate")) == 1, "the invalid update reached no validating webhook"


# --- UPDATE and DELETE through admit() ----------------------------------------------------------


def _all_operations(name: str, path: str, ca: str) -> JsonDict:
    spec = hook(name, path, ca)
    spec["rules"][0]["operations"] = ["CREATE", "UPDATE", "DELETE"]
    return spec


async def test_update_and_delete_reviews_carry_the_old_object(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", allow)
    emulator = emulator_for(validating("v", _all_operations("v.autowrap.io", "/validate", ca)))
    old, new = pod(app="a"), pod(app="b")
    user = UserInfo(username="bob")

    updated = await emulator.admit("UPDATE", new, old_object=old, user=user)
    deleted = await emulator.admit("DELETE", old, old_object=old, user=user)

    assert updated.allowed and deleted.allowed
    update, delete = (r["request"] for r in stubs.reviews("/validate"))
    assert update["operation"] == "UPDATE" and update["name"] == "p"
    assert update["object"]["metadata"]["labels"] == {"app": "b"}
    assert update["oldObject"]["metadata"]["labels"] == {"app": "a"}
    assert update["options"]["kind"] == "UpdateOptions"
    assert delete["operation"] == "DELETE" and delete["object"] is None
    assert delete["oldObject"]["metadata"]["labels"] == {"app": "a"}
    assert delete["options"]["kind"] == "DeleteOptions"
    assert delete["userInfo"]["username"] == "bob"
    assert emulator.stored == {}, "admit() never stores"


async def test_a_patch_on_delete_is_an_internal_error(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/mutate", patching({"op": "add", "path": "/metadata/labels", "value": {}}))
    emulator = emulator_for(mutating("m", _all_operations("m.autowrap.io", "/mutate", ca)))

    result = await emulator.admit("DELETE", pod(), old_object=pod())

    assert not result.allowed and result.status_code == 500
    assert "attempted to modify the object, which is not supported" in result.message


async def test_in_process_validators_run_with_the_configured_ones(
    stubs: StubWebhooks, ca: str, emulator_for: EmulatorFactory
) -> None:
    stubs.on("/validate", allow)
    emulator = emulator_for(validating("v", hook("v.autowrap.io", "/validate", ca)))
    seen: list[JsonDict] = []

    def deny(request: JsonDict) -> str | None:
        seen.append(request)
        return "no pods today"

    result = await emulator.admit("CREATE", pod(), validators=[("validatejob.volcano.sh", deny)])

    assert not result.allowed and result.status_code == 400
    assert result.message == (
        'admission webhook "validatejob.volcano.sh" denied the request: no pods today'
    )
    assert len(stubs.reviews("/validate")) == 1, "the configured webhook was called too"
    assert seen[0]["operation"] == "CREATE" and seen[0]["object"]["metadata"]["name"] == "p"


# --- ValidatingAdmissionPolicy ------------------------------------------------------------------


def _policy(name: str, validations: list[JsonDict], **spec: Any) -> list[JsonDict]:
    """A policy on pod CREATE/UPDATE and its binding (binding options under ``binding``)."""
    binding = spec.pop("binding", {})
    constraints = spec.pop("matchConstraints", {})
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "operations": ["CREATE", "UPDATE"],
                        }
                    ],
                    **constraints,
                },
                "validations": validations,
                **spec,
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"{name}-binding"},
            "spec": {"policyName": name, "validationActions": ["Deny"], **binding},
        },
    ]


def _vap_pod(**labels: str) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def _vap_emulator(documents: list[JsonDict], **kwargs: Any) -> ApiserverEmulator:
    return ApiserverEmulator("127.0.0.1", 9, admission_policies=documents, **kwargs)


async def test_vap_denial_without_a_reason_is_422_invalid_with_the_expression() -> None:
    # validator.go: no reason -> StatusReasonInvalid; no message -> "failed expression: ...";
    # dispatcher.go: admission.NewForbidden's message, then the reason's code.
    docs = _policy(
        "no-latest", [{"expression": "object.spec.containers.all(c, c.image != 'busybox')"}]
    )
    result = await _vap_emulator(docs).admit("CREATE", _vap_pod())
    assert not result.allowed
    assert (result.status_code, result.reason) == (422, "Invalid")
    assert result.message == (
        "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'no-latest' with binding "
        "'no-latest-binding' denied request: failed expression: "
        "object.spec.containers.all(c, c.image != 'busybox')"
    )
    assert result.status is not None
    assert result.status["details"]["causes"][0]["message"].startswith("ValidatingAdmissionPolicy")


async def test_vap_message_expression_then_message_then_reason_code() -> None:
    docs = _policy(
        "named",
        [
            {
                "expression": "false",
                "messageExpression": "'image ' + object.spec.containers[0].image",
                "message": "static",
                "reason": "Forbidden",
            },
            {"expression": "false", "messageExpression": "'two\\nlines'", "message": "fallback"},
        ],
    )
    result = await _vap_emulator(docs).admit("CREATE", _vap_pod())
    assert (result.status_code, result.reason) == (403, "Forbidden")
    assert result.message.endswith("denied request: image busybox")
    docs[0]["spec"]["validations"].pop(0)
    result = await _vap_emulator(docs).admit("CREATE", _vap_pod())
    assert result.message.endswith("denied request: fallback"), "multi-line messages fall back"


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
async def test_vap_evaluation_errors_follow_the_failure_policy(
    failure_policy: str, allowed: bool
) -> None:
    docs = _policy("reads-missing", [{"expression": "object.spec.nodeName == 'n1'"}],
                   failurePolicy=failure_policy)  # fmt: skip
    result = await _vap_emulator(docs).admit("CREATE", _vap_pod())
    assert result.allowed is allowed


async def test_vap_match_conditions_variables_and_old_object() -> None:
    docs = _policy(
        "keep-team",
        [{"expression": "variables.team == variables.oldTeam", "message": "team is fixed"}],
        matchConditions=[{"name": "updates", "expression": "request.operation == 'UPDATE'"}],
        variables=[
            {"name": "team", "expression": "object.metadata.labels['team']"},
            {"name": "oldTeam", "expression": "oldObject.metadata.labels['team']"},
            # Never read: its error must not matter (upstream evaluates variables lazily).
            {"name": "unused", "expression": "object.spec.nodeName"},
        ],
    )
    emulator = _vap_emulator(docs)
    assert (await emulator.admit("CREATE", _vap_pod(team="a"))).allowed, "matchConditions false"
    old = _vap_pod(team="a")
    assert (await emulator.admit("UPDATE", _vap_pod(team="a"), old_object=old)).allowed
    changed = await emulator.admit("UPDATE", _vap_pod(team="b"), old_object=old)
    assert not changed.allowed and changed.message.endswith("team is fixed")


async def test_vap_selectors_and_binding_match_resources() -> None:
    docs = _policy(
        "labelled-only",
        [{"expression": "false", "message": "no"}],
        matchConstraints={"objectSelector": {"matchLabels": {"guarded": "yes"}}},
        binding={"matchResources": {"namespaceSelector": {"matchLabels": {"tier": "prod"}}}},
    )
    emulator = _vap_emulator(docs, namespace_labels={"team-a": {"tier": "prod"}, "dev": {}})
    assert (await emulator.admit("CREATE", _vap_pod())).allowed, "objectSelector"
    assert not (await emulator.admit("CREATE", _vap_pod(guarded="yes"))).allowed
    in_dev = _vap_pod(guarded="yes")
    in_dev["metadata"]["namespace"] = "dev"
    assert (await emulator.admit("CREATE", in_dev)).allowed, "the binding's namespaceSelector"
    # An UPDATE that removes the label is still matched through the old object's labels.
    removed = await emulator.admit("UPDATE", _vap_pod(), old_object=_vap_pod(guarded="yes"))
    assert not removed.allowed


async def test_vap_warn_and_a_denial_before_any_validating_webhook() -> None:
    warn = _policy("warns", [{"expression": "false", "message": "careful"}],
                   binding={"validationActions": ["Warn"]})  # fmt: skip
    result = await _vap_emulator(warn).admit("CREATE", _vap_pod())
    assert result.allowed
    assert result.warnings == (
        "Validation failed for ValidatingAdmissionPolicy 'warns' with binding 'warns-binding': "
        "careful",
    )
    called: list[JsonDict] = []
    deny = _policy("denies", [{"expression": "false"}])
    result = await _vap_emulator(deny).admit(
        "CREATE", _vap_pod(), validators=[("after", lambda request: called.append(request))]
    )
    assert not result.allowed
    assert called == [], "ValidatingAdmissionPolicy runs before the validating webhooks"


async def test_vap_without_a_binding_does_nothing() -> None:
    docs = _policy("unbound", [{"expression": "false"}])[:1]
    assert (await _vap_emulator(docs).admit("CREATE", _vap_pod())).allowed


async def test_vap_never_judges_the_admission_configuration_itself() -> None:
    docs = _policy("everything", [{"expression": "false"}])
    docs[0]["spec"]["matchConstraints"]["resourceRules"] = [
        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}
    ]
    emulator = _vap_emulator(docs)
    assert not (await emulator.admit("CREATE", _vap_pod())).allowed
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "autowrap-validating"},
        "webhooks": [],
    }
    result = await emulator.admit(
        "UPDATE", configuration, old_object=configuration,
        resource="validatingwebhookconfigurations", namespaced=False,
    )  # fmt: skip
    assert result.allowed, "rules.go IsExemptAdmissionConfigurationResource"
