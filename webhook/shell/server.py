"""``autowrap serve``: the HTTPS transport around ``admission.review_body``.

The server owns what is not admission logic: TLS (with certificate files followed on disk),
routes, the 7 MiB body limit, JSON in and out, metrics, one log line per request, policy
reloads, and a graceful drain on SIGTERM. A malformed body is answered 4xx with a reason; an
unexpected error is logged and answered with a clean denial, never a traceback.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import gc
import logging
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from webhook import __version__, admission
from webhook.core import audit, policy, ports
from webhook.core.policy import PolicyError, PolicySet
from webhook.model import durations, names, review
from webhook.shell import certs, lanes, opevents, policyfiles
from webhook.shell.kube import KubeClient, NoConfiguration
from webhook.shell.metrics import Metrics

log = logging.getLogger("autowrap")


def _line(ts: float, level: str, msg: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The shape of every log line: when, how severe, what, then the structured fields."""
    return {"ts": round(ts, 3), "level": level, "msg": msg, **fields}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; structured fields come in ``extra={"fields": {...}}``.

    An exception is its last line (``error``); with the ``autowrap`` logger at DEBUG
    (``serve --log-level debug``) the whole traceback comes too, in ``traceback``."""

    def format(self, record: logging.LogRecord) -> str:
        line = _line(record.created, record.levelname.lower(), record.getMessage(),
                     getattr(record, "fields", {}))  # fmt: skip
        if record.exc_info:
            text = self.formatException(record.exc_info)
            line["error"] = text.splitlines()[-1]
            if log.isEnabledFor(logging.DEBUG):
                line["traceback"] = text
        return orjson.dumps(line).decode()


LOG_LEVELS = ("debug", "info", "warning", "error")
# Allocations between two young-generation collections (CPython's default is 700).
GC_THRESHOLD = 20_000


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    log.handlers[:] = [handler]
    log.setLevel(getattr(logging, level.upper()))
    log.propagate = False


class _Emitter(Protocol):
    def emit(
        self, obj: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> Coroutine[Any, Any, None]: ...


class AuditEvents:
    """Redirect mode's record of what Audit let through, as adopt mode's controller raises it
    on the object it adopts: one ``PolicyAudit`` Warning Event per finding, through the same
    ``Recorder``, here on the AppWrapper that stands in for the object (the object itself was
    never stored). Written on the serving loop, from a lane's thread too, and never waited for:
    an Event neither delays nor fails an answer."""

    def __init__(self, recorder: _Emitter, loop: asyncio.AbstractEventLoop) -> None:
        self._recorder = recorder
        self._loop = loop
        self._pending: set[asyncio.Task[None]] = set()

    def __call__(self, appwrapper: Mapping[str, Any], found: list[audit.Finding]) -> None:
        subject = dict(appwrapper)
        messages = [finding.render() for finding in found]
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._start(subject, messages)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._start, subject, messages)

    def _start(self, subject: dict[str, Any], messages: list[str]) -> None:
        async def emit_all() -> None:
            for message in messages:
                await self._recorder.emit(subject, "PolicyAudit", message, warning=True)

        task = self._loop.create_task(emit_all())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for the Events under way (a drain; tests)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)


@dataclass
class State:
    """Everything the handlers share; swapped fields are replaced whole, never mutated."""

    policies: PolicySet
    policy_path: Path | None
    policy_digest: str = ""
    policy_error: str = ""
    # False while no valid set was ever loaded (started on an invalid set): not ready, and
    # admission requests that reach the pod anyway are refused, not judged by an empty set.
    policies_loaded: bool = True
    tls: certs.ReloadingContext | None = None
    # --client-ca-file: who may call the admission routes (None: anyone who reaches the port).
    client_ca: certs.ClientCA | None = None
    # --metrics-auth: /metrics answers only callers the cluster authorizes.
    metrics_auth: bool = False
    metrics_allowed: dict[str, float] = field(default_factory=dict)  # token -> until
    cluster: KubeClient | None = None
    # The adopt-mode controller when this process runs one (webhook.controller.Controller; the
    # webhooks never import that layer, so it is held here untyped).
    controller: Any = None
    metrics: Metrics = field(init=False)
    listening: bool = False
    draining: bool = False
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    # Large reviews, computed off the serving loop a few at a time (webhook.shell.lanes).
    heavy: lanes.Lanes = field(default_factory=lanes.Lanes)
    # Redirect mode's PolicyAudit Events on the AppWrappers it creates (with API access).
    audit_events: AuditEvents | None = None
    # Called after each policy set loaded (the controller process reads the files again).
    policy_listeners: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metrics = Metrics(in_flight=lambda: self.in_flight)
        self.metrics.follow_certificate(
            lambda: None if self.tls is None else self.tls.cert_dir / certs.TLS_CERT
        )

    def uses_namespace_labels(self) -> bool:
        return self.policies.selects_by_labels

    def deps(self) -> admission.Deps:
        return admission.Deps(
            policies=lambda: self.policies,
            cluster=self.cluster,
            needs_namespace_labels=self.uses_namespace_labels,
            audit_events=self.audit_events,
        )


STATE = web.AppKey("state", State)


def _timeout(request: web.Request) -> float | None:
    """The apiserver's ``?timeout=``: a Go duration (``10s``; ``1.5s`` or ``500ms`` from
    other clients); None when absent or unreadable."""
    for part in request.query_string.split("&"):
        name, _, value = part.partition("=")
        if name == "timeout":
            if value.endswith("s") and value[:-1].isdigit():
                return float(value[:-1])  # the usual form, without the general parser
            try:
                return durations.parse_seconds(value)
            except ValueError:
                return None
    return None


def _bad(status: int, reason: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason,
            "code": status}  # fmt: skip
    return web.json_response(body, status=status, dumps=lambda o: orjson.dumps(o).decode())


def admission_handler(
    webhook: admission.Webhook,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        state = request.app[STATE]
        started = time.perf_counter()
        arrived = time.monotonic()
        record = admission.Record(webhook=webhook)
        state.in_flight += 1
        state.idle.clear()
        try:
            refused = _caller_refused(request, state, record)
            if refused is not None:
                return refused
            return await _answer(request, state, webhook, record, arrived)
        finally:
            state.in_flight -= 1
            if state.in_flight == 0:
                state.idle.set()
            elapsed = time.perf_counter() - started
            _observe(state, record, elapsed)

    return handle


def _caller_refused(
    request: web.Request, state: State, record: admission.Record
) -> web.Response | None:
    """With --client-ca-file: 401 without a client certificate, 403 with one the current CAs
    did not issue; None when the caller may go on. The handshake already verified any
    certificate presented (CERT_OPTIONAL lets kubelet's probes in without one)."""
    if state.client_ca is None:
        return None
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    reason = state.client_ca.verify(der)
    if reason is None:
        return None
    status = 401 if not der else 403
    record.decision, record.code, record.detail = "bad-request", status, reason
    return _bad(status, reason)


async def _answer(
    request: web.Request,
    state: State,
    webhook: admission.Webhook,
    record: admission.Record,
    arrived: float,
) -> web.Response:
    if request.content_type != "application/json":
        record.decision, record.code = "bad-request", 415
        return _bad(415, f"Content-Type must be application/json, got {request.content_type!r}")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        record.decision, record.code = "bad-request", 413
        return _bad(413, f"body larger than {names.MAX_BODY_BYTES} bytes")
    if not state.policies_loaded:
        return _no_policies(body, state, record)
    timeout = _timeout(request)
    try:
        if len(body) < lanes.HEAVY_BODY_BYTES:
            response = await admission.review_body(
                body, webhook=webhook, timeout=timeout, deps=state.deps(), record=record,
                arrived=arrived,
            )  # fmt: skip
        else:
            answer = await _on_a_lane(body, state, webhook, record, timeout, arrived)
            if answer is None:
                return _busy(body, record)
            response = answer
        if state.cluster is None and record.decision in ADOPTION_DECISIONS:
            response = _nobody_adopts(record)
    except review.BadReview as exc:
        record.decision, record.code, record.detail = "bad-request", exc.status, exc.reason
        return _bad(exc.status, exc.reason)
    except Exception:
        log.exception("admission failed", extra={"fields": {"uid": record.uid}})
        record.decision, record.code = "internal-error", 500
        if not record.uid:
            return _bad(400, "the request could not be read as an AdmissionReview")
        response = review.deny(
            record.uid,
            "autowrap hit an internal error and admitted nothing; retry, and report it if it "
            "persists (the server log has the request uid)",
            code=500,
            reason="InternalError",
        )
    return web.Response(body=orjson.dumps(response), content_type="application/json")


async def _on_a_lane(
    body: bytes,
    state: State,
    webhook: admission.Webhook,
    record: admission.Record,
    timeout: float | None,
    arrived: float,
) -> dict[str, Any] | None:
    """A large review on one of the heavy lanes (``webhook.shell.lanes``); None when no lane
    came free while its budget lasted."""
    wait = arrived + admission.usable_budget(timeout) - time.monotonic()

    def work(cluster: Any) -> Coroutine[Any, Any, dict[str, Any]]:
        deps = dataclasses.replace(state.deps(), cluster=cluster)
        return admission.review_body(body, webhook=webhook, timeout=timeout, deps=deps,
                                     record=record, arrived=arrived)  # fmt: skip

    return await state.heavy.run(work, state.cluster, wait=wait)


# What /mutate and /validate decide for an object they leave to the adopt-mode controller.
ADOPTION_DECISIONS = frozenset({"prepared", "adopting"})


def _nobody_adopts(record: admission.Record) -> dict[str, Any]:
    """Adopt mode without API access: no controller will ever adopt the object, so it would
    stay gated (its pods never start) and hold its finalizer. Refused as redirect mode refuses
    a wrap it cannot create: 503, nothing stored."""
    record.decision, record.code, record.appwrapper = "no-api", 503, ""
    what = f"{record.kind} {record.namespace}/{record.name}" if record.name else record.kind
    return review.deny(
        record.uid,
        f"autowrap admitted nothing: it has no access to the Kubernetes API, so its controller "
        f"cannot adopt {what} (adopt mode) and the object would wait, gated, forever; run "
        "`autowrap serve` with API access (in the cluster, or --kubeconfig PATH) and create it "
        "again",
        code=503,
        reason="ServiceUnavailable",
    )


def _busy(body: bytes, record: admission.Record) -> web.Response:
    return _unjudged(body, record, "busy", (
        f"autowrap admitted nothing: every lane for large requests (over "
        f"{lanes.HEAVY_BODY_BYTES // 1024} KiB) stayed busy for as long as this request could "
        "wait; apply it again in a moment"))  # fmt: skip


def _unjudged(body: bytes, record: admission.Record, decision: str, message: str) -> web.Response:
    """A 503 denial for a review autowrap did not judge, answered with its uid (or a 4xx when
    the body is not a review)."""
    try:
        uid = review.parse(body).request.uid
    except review.BadReview as exc:
        record.decision, record.code, record.detail = "bad-request", exc.status, exc.reason
        return _bad(exc.status, exc.reason)
    record.uid, record.decision, record.code = uid, decision, 503
    response = review.deny(uid, message, code=503, reason="ServiceUnavailable")
    return web.Response(body=orjson.dumps(response), content_type="application/json")


# Label values come from the request; anything but the kinds the webhooks are registered for
# is counted as "other", so that no client can grow the metrics without bound.
_METRIC_KINDS = frozenset({"Job", "Pod", "AppWrapper"})


def _observe(state: State, record: admission.Record, elapsed: float) -> None:
    m = state.metrics
    kind = record.kind if record.kind in _METRIC_KINDS else "other"
    if record.decision == "bad-request":
        m.bad_requests.labels(record.webhook, str(record.code)).inc()
    else:
        m.answered((record.webhook, kind, record.operation, record.decision), elapsed)
    if record.decision.startswith(("wrapped", "rewrapped")):
        m.wraps.labels(kind, str(record.dry_run).lower(),
                       str(record.decision == "rewrapped").lower()).inc()  # fmt: skip
    for call in record.api_errors:
        m.api_errors.labels(call.split(":")[0]).inc()
    for rule in record.finding_rules:
        m.policy_findings.labels(record.policy, rule, record.enforcement).inc()
    if log.isEnabledFor(logging.INFO):
        fields = record.as_log()
        fields["duration_ms"] = round(elapsed * 1000, 2)
        request_line(fields)


def request_line(fields: dict[str, Any]) -> None:
    """The log line of one admission request, in the shape of every other line, written straight
    to stdout: a ``logging`` record (caller lookup, handler chain, formatter) costs several times
    the line itself, and this is the one line per request. Like every other line, it is written
    only when the ``autowrap`` logger is at INFO (``serve`` sets it so; an embedding process
    decides for itself). One flush per line: deferring the flush to the end of the event-loop
    turn costs an extra loop iteration per request under load, more than the write it saves."""
    line = orjson.dumps(_line(time.time(), "info", "admission", fields),
                        option=orjson.OPT_APPEND_NEWLINE)  # fmt: skip
    out = sys.stdout
    binary = getattr(out, "buffer", None)
    if binary is not None:
        out.flush()  # anything the text layer still holds goes first
        binary.write(line)
        binary.flush()
    else:
        out.write(line.decode())
        out.flush()


def _no_policies(body: bytes, state: State, record: admission.Record) -> web.Response:
    return _unjudged(body, record, "internal-error", (
        f"autowrap has no valid policy set and admitted nothing: {state.policy_error}; "
        "fix the ConfigMap autowrap-system/autowrap-policies"))  # fmt: skip


VALIDATE_POLICIES_PATH = "/validate-policies"


async def validate_policies(request: web.Request) -> web.Response:
    """The policy ConfigMap's own admission check: its ``data`` goes through the loader that
    reloads the mounted files (the same entries, in the same order), and a set that would not
    load is denied with the loader's message, before it is stored. It has no side effect and
    tells a caller nothing beyond the loader's verdict on the caller's own input; with
    --client-ca-file it asks for the same client certificate as the admission routes."""
    state = request.app[STATE]
    refused = _caller_refused(request, state, admission.Record(webhook="validate"))
    if refused is not None:
        return refused
    try:
        req = review.parse(await request.read()).request
    except review.BadReview as exc:
        return _bad(exc.status, exc.reason)
    except web.HTTPRequestEntityTooLarge:
        return _bad(413, f"body larger than {names.MAX_BODY_BYTES} bytes")
    data = (req.object or {}).get("data") or {}
    files = policyfiles.from_config_map({str(k): str(v) for k, v in dict(data).items()})
    try:
        if not files:
            raise PolicyError("no *.yaml policy files in this ConfigMap")
        policy.build(files)
    except PolicyError as exc:
        message = f"ConfigMap {req.namespace}/{req.name}: invalid policy set: {exc}"
        answer = review.deny(req.uid, message, code=422, reason="Invalid")
    else:
        answer = review.allow(req.uid)
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """Ready when certificates are loaded, a valid policy set is in use and the listener is up.

    A policy reload that fails keeps the last good set and is *reported* here, without failing
    readiness: taking every replica out of the Service over a bad ConfigMap edit would stop
    every wrapped submission in the cluster. A server that started on an invalid set has no
    good set to keep: it is not ready, with the loader's message, until a reload succeeds.
    """
    state = request.app[STATE]
    problems = []
    if state.draining:
        problems.append("draining: shutting down")
    if state.tls is None or not state.tls.digest:
        problems.append("certificates not loaded")
    if not state.listening:
        problems.append("listener not up")
    if not state.policies_loaded:
        problems.append(f"policies: no valid policy set loaded: {state.policy_error}")
    if problems:
        return web.Response(status=503, text="\n".join(problems) + "\n")
    text = "ok\n"
    missing = state.controller.absent() if state.controller is not None else []
    if missing:
        # Still ready: the webhooks serve every kind, and a cluster may lack one on purpose.
        text += (f"controller: the cluster does not serve {', '.join(missing)}; objects that "
                 "need it are not adopted\n")  # fmt: skip
    if state.policy_error:
        text += f"policies: last reload failed, serving the last good set: {state.policy_error}\n"
    return web.Response(text=text)


def build_app(state: State) -> web.Application:
    app = web.Application(client_max_size=names.MAX_BODY_BYTES)
    app[STATE] = state
    app.router.add_post(names.MUTATE_PATH, admission_handler("mutate"))
    app.router.add_post(names.VALIDATE_PATH, admission_handler("validate"))
    app.router.add_post(VALIDATE_POLICIES_PATH, validate_policies)
    app.router.add_get(names.HEALTHZ_PATH, healthz)
    app.router.add_get(names.READYZ_PATH, readyz)
    return app


def build_metrics_app(state: State) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        if state.metrics_auth:
            refused = await _metrics_refused(request, state)
            if refused is not None:
                return refused
        return web.Response(body=state.metrics.exposition(),
                            content_type="text/plain", charset="utf-8")  # fmt: skip

    app = web.Application()
    app.router.add_get(names.METRICS_PATH, metrics)
    return app


# Authorized bearer tokens, kept briefly (as controller-runtime's authentication and
# authorization caches do) so that a scrape every few seconds costs no API calls.
_METRICS_AUTH_TTL = 10.0


async def _metrics_refused(request: web.Request, state: State) -> web.Response | None:
    """--metrics-auth: the bearer token must authenticate (TokenReview) and its user be
    allowed ``get`` on the non-resource URL /metrics (SubjectAccessReview), like
    controller-runtime's WithAuthenticationAndAuthorization filter."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return web.Response(status=401, text="a bearer token is required (--metrics-auth)\n")
    token = token.strip()
    now = time.monotonic()
    cached = state.metrics_allowed.get(token)
    if cached is not None and cached > now:
        return None
    cluster = state.cluster
    if cluster is None:
        return web.Response(status=503, text="no Kubernetes API to check the token with\n")
    try:
        who = await cluster.review_token(token, timeout=5.0)
        if who is None:
            return web.Response(status=401, text="the token does not authenticate\n")
        allowed, reason = await cluster.may_get_url(who, names.METRICS_PATH, timeout=5.0)
    except ports.ApiFailure as exc:
        log.warning("metrics authorization failed", extra={"fields": {"error": str(exc)}})
        return web.Response(status=503, text=f"cannot check the token: {exc}\n")
    if not allowed:
        text = f"{who.username} may not get {names.METRICS_PATH}: {reason or 'forbidden'}\n"
        return web.Response(status=403, text=text)
    if len(state.metrics_allowed) >= 256:
        state.metrics_allowed.clear()
    state.metrics_allowed[token] = now + _METRICS_AUTH_TTL
    return None


# --- reloads -----------------------------------------------------------------------------------


def reload_policies(state: State) -> bool:
    """Load the policy files if they changed; on failure keep the last good set."""
    if state.policy_path is None:
        return False
    try:
        files = policyfiles.read(state.policy_path)
        digest = policyfiles.digest(files)
        if digest == state.policy_digest:
            if state.policy_error:  # the files are back to the set in use: no longer stale
                state.policy_error = ""
                state.metrics.policies_stale.set(0)
            return False
        state.policies = policy.build(files)
    except PolicyError as exc:
        if str(exc) != state.policy_error:
            log.error("policy reload failed; the last good set stays in use"
                      if state.policies_loaded else
                      "no valid policy set: not ready until the policy files are fixed",
                      extra={"fields": {"error": str(exc)}})  # fmt: skip
            state.metrics.policy_reloads.labels("failed").inc()
            opevents.emit("PolicyReloadFailed", f"policy reload failed; the last good set stays "
                          f"in use: {exc}", warning=True)  # fmt: skip
        state.policy_error = str(exc)
        state.metrics.policies_stale.set(1)
        return False
    state.policy_digest = digest
    state.policy_error = ""
    state.policies_loaded = True
    state.metrics.policies_stale.set(0)
    state.metrics.policy_reloads.labels("loaded").inc()
    log.info("policies loaded", extra={"fields": {
        "policies": [p.name for p in state.policies.policies]}})  # fmt: skip
    for listener in state.policy_listeners:
        listener()
    return True


def reload_certificates(state: State) -> None:
    if state.tls is None:
        return
    try:
        if state.tls.reload():
            state.metrics.cert_reloads.labels("loaded").inc()
            log.info(
                "serving certificate reloaded", extra={"fields": {"dir": str(state.tls.cert_dir)}}
            )
            opevents.emit("CertificateReloaded", "serving certificate renewed: the new one in "
                          f"{state.tls.cert_dir} is in use")  # fmt: skip
    except (OSError, ValueError) as exc:
        state.metrics.cert_reloads.labels("failed").inc()
        log.error("certificate reload failed; the previous certificate stays in use",
                  extra={"fields": {"error": str(exc)}})  # fmt: skip
        opevents.emit("CertificateReloadFailed", "serving certificate reload failed; the "
                      f"previous certificate stays in use: {exc}", warning=True)  # fmt: skip
    if state.client_ca is None:
        return
    try:
        if state.client_ca.reload():
            log.info("client CA reloaded", extra={"fields": {"file": str(state.client_ca.path)}})
    except (OSError, ValueError) as exc:
        log.error("client CA reload failed; the previous CAs stay in use",
                  extra={"fields": {"error": str(exc)}})  # fmt: skip


def redirect_unguarded_warning(policies: PolicySet, client_ca: Path | None) -> str | None:
    """The start-up warning when redirect's side effect (admission creates the AppWrapper) is
    open to anyone who reaches the Service: a policy says Redirect, no --client-ca-file."""
    if client_ca is not None:
        return None
    redirecting = [p.name for p in policies.policies if p.spec.mode == policy.Mode.REDIRECT]
    if not redirecting:
        return None
    return (
        f"policies {redirecting} say Redirect and no --client-ca-file is set: the redirect side "
        "effect (creating AppWrappers) is reachable by anyone who can reach the Service unless "
        "the NetworkPolicy autowrap-webhook is in force"
    )


async def _every(seconds: float, action: Callable[[], object]) -> None:
    while True:
        await asyncio.sleep(seconds)
        action()


async def _connect(kubeconfig: str | None) -> KubeClient | None:
    try:
        return await KubeClient.connect(kubeconfig)
    except NoConfiguration as exc:
        if kubeconfig:
            raise
        log.warning(
            "no Kubernetes API configured (no in-cluster config, no kubeconfig): AppWrappers are "
            "completed and checked, but wrapping is refused",
            extra={"fields": {"error": str(exc)}},
        )
        return None


# --- running -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    host: str = "0.0.0.0"
    port: int = names.SERVING_PORT
    metrics_port: int = names.METRICS_PORT
    # Where /metrics listens (None: the same address as the webhook).
    metrics_host: str | None = None
    # TokenReview + SubjectAccessReview on every scrape (needs API access).
    metrics_auth: bool = False
    # The CAs whose client certificates may call /mutate and /validate.
    client_ca_file: Path | None = None
    cert_dir: Path | None = None
    policy_path: Path | None = None
    kubeconfig: str | None = None
    use_cluster: bool = True
    # Run the adopt-mode controller (SPEC section 11) whenever there is API access.
    controller: bool = True
    # ... in a process of its own (``webhook.app``), so that no reconcile delays an admission
    # answer; else on the serving loop (the tests that drive the controller directly).
    controller_apart: bool = False
    # Follow namespaces and LocalQueues with watches (else one API call per cache miss).
    watch_caches: bool = True
    controller_namespace: str | None = None
    controller_identity: str | None = None
    reload_interval: float = 5.0
    drain_timeout: float = 25.0


@dataclass
class Running:
    """A started server: its state, where it listens, and how to stop it gracefully."""

    state: State
    options: Options
    runner: web.AppRunner
    metrics_runner: web.AppRunner
    site: web.TCPSite
    tasks: list[asyncio.Task[None]]
    # The development pair's directory (no --cert-dir): its private keys go when the server does.
    scratch: Path | None = None
    stopped: bool = False

    @property
    def port(self) -> int:
        return int(self.runner.addresses[0][1])

    @property
    def metrics_port(self) -> int:
        return int(self.metrics_runner.addresses[0][1])

    async def drain(self) -> None:
        """Unready, close the listener, let in-flight requests finish, then release all. A
        second call (a second SIGTERM) finds nothing left to do."""
        if self.stopped:
            return
        self.stopped = True
        state = self.state
        state.draining = True
        log.info("draining", extra={"fields": {"in_flight": state.in_flight}})
        for task in self.tasks:
            task.cancel()
        await self.site.stop()
        # Whether every request in flight finished, or the drain timeout cut them off.
        drained = True
        try:
            # asyncio.timeout, not wait_for, which drops a cancellation on Python 3.11
            # (gh-86296): a drain cut short by shutdown must end.
            async with asyncio.timeout(self.options.drain_timeout):
                await state.idle.wait()
        except TimeoutError:
            drained = False
        await self.runner.cleanup()
        await self.metrics_runner.cleanup()
        # The cancelled tasks finish before the client they use is closed: the controller's
        # last step gives its Lease up (ReleaseOnCancel), so the next replica leads at once
        # rather than after the Lease expires.
        await _finished(self.tasks, _TASKS_GRACE)
        state.heavy.close()
        events = opevents.installed()
        if events is not None:
            await events.flush()
            opevents.install(None)
        if state.audit_events is not None:
            await state.audit_events.flush()
        if state.cluster is not None:
            await state.cluster.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        log.info("stopped", extra={"fields": {"in_flight": state.in_flight, "drained": drained}})


# How long a drain waits for its cancelled tasks (the Lease's release is one API call).
_TASKS_GRACE = 5.0


async def _finished(tasks: list[asyncio.Task[None]], grace: float) -> None:
    """Wait until every task has ended, at most ``grace`` seconds; their exceptions are theirs
    (a cancelled task's CancelledError is the expected end)."""
    pending = [t for t in tasks if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=grace)


@dataclass(frozen=True)
class Parts:
    """What the composition root (``webhook.app``) plugs into the server, so that the shell
    never imports the layer above it: who records Events, where autowrap runs, and what runs
    beside the webhooks once they listen with API access."""

    # A Recorder of Events (redirect mode's PolicyAudit Events, the operators' Events).
    recorder: Callable[[KubeClient], _Emitter]
    # The namespace autowrap runs in: its Deployment there carries the operators' Events.
    namespace: Callable[[], str]
    # The watch caches and the adopt-mode controller (only called with API access).
    background: Callable[[State], Awaitable[list[asyncio.Task[None]]]]


async def start(options: Options, parts: Parts) -> Running:
    state = State(policies=PolicySet(()), policy_path=options.policy_path)
    if options.policy_path is None:
        state.policies = policyfiles.load(None)
    else:
        # An invalid set does not stop the process (two restarts would be a full outage of a
        # fail-closed webhook): it starts not ready, saying why, and the reload picks up a fix.
        state.policies_loaded = False
        reload_policies(state)
    if options.use_cluster:
        state.cluster = await _connect(options.kubeconfig)
    if state.cluster is not None:
        state.cluster.observe = state.metrics.api_call
        opevents.install(opevents.OperatorEvents(parts.recorder(state.cluster), parts.namespace()))
        state.audit_events = AuditEvents(parts.recorder(state.cluster), asyncio.get_running_loop())
    cert_dir = options.cert_dir
    scratch = None
    if cert_dir is None:
        cert_dir = scratch = certs.development_pair(names.SERVICE_NAME, names.SERVICE_NAMESPACE)
        # Removed by drain; and at exit, should the server fail to start or never drain.
        atexit.register(shutil.rmtree, scratch, True)
        ca_pem = (cert_dir / certs.CA_CERT).read_bytes()
        log.warning(
            "no --cert-dir: serving a development certificate",
            extra={"fields": {"dir": str(cert_dir), "caBundle": certs.ca_bundle(ca_pem)}},
        )
    state.tls = certs.ReloadingContext(cert_dir)
    if options.client_ca_file is not None:
        state.client_ca = certs.ClientCA(options.client_ca_file, state.tls.context)
    if options.metrics_auth and state.cluster is None:
        raise NoConfiguration("--metrics-auth needs API access to review tokens")
    state.metrics_auth = options.metrics_auth
    warning = redirect_unguarded_warning(state.policies, options.client_ca_file)
    if warning is not None:
        log.warning(warning)
    # The drain waits for in-flight requests itself; cleanup then only closes idle sockets.
    runner = web.AppRunner(
        build_app(state), handle_signals=False, access_log=None, shutdown_timeout=1.0
    )
    metrics_runner = web.AppRunner(
        build_metrics_app(state), handle_signals=False, access_log=None, shutdown_timeout=1.0
    )
    await runner.setup()
    await metrics_runner.setup()
    site = web.TCPSite(runner, options.host, options.port, ssl_context=state.tls.context)
    await site.start()
    metrics_host = options.host if options.metrics_host is None else options.metrics_host
    await web.TCPSite(metrics_runner, metrics_host, options.metrics_port).start()
    state.listening = True
    state.idle.set()
    # Everything allocated so far (the kubernetes client's thousands of model classes above
    # all) lives as long as the process; keeping it out of the collector's full passes makes
    # each request's garbage cheaper to collect.
    gc.freeze()
    # Decoded JSON is freed by reference counting; the cyclic collector finds next to nothing
    # in it, yet at the default threshold (700 allocations) it runs every few watch events.
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    tasks = [
        asyncio.create_task(_every(options.reload_interval, lambda: reload_policies(state))),
        asyncio.create_task(_every(options.reload_interval, lambda: reload_certificates(state))),
    ]
    if state.cluster is not None:
        tasks += await parts.background(state)
    running = Running(state, options, runner, metrics_runner, site, tasks, scratch)
    log.info("serving", extra={"fields": _configuration(running, cert_dir)})
    return running


def _configuration(running: Running, cert_dir: Path) -> dict[str, Any]:
    """The start-up line's fields: the version and the configuration in effect."""
    state, options = running.state, running.options
    modes: dict[str, int] = {}
    for p in state.policies.policies:
        modes[p.spec.mode.value] = modes.get(p.spec.mode.value, 0) + 1
    return {
        "version": __version__,
        "port": running.port,
        "metrics_port": running.metrics_port,
        "cert_dir": str(cert_dir),
        "development_certificate": options.cert_dir is None,
        "policy_path": str(options.policy_path) if options.policy_path else None,
        "policies": [p.name for p in state.policies.policies],
        "policy_modes": modes,
        "default_mode": policy.PolicySpec.model_fields["mode"].default.value,
        "api": state.cluster is not None,
        "controller": options.controller and state.cluster is not None,
        "watch_caches": options.watch_caches and state.cluster is not None,
        "log_level": logging.getLevelName(log.getEffectiveLevel()).lower(),
    }
