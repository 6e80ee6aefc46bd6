"""Admission: one AdmissionReview in, one response out, for both webhooks.

``review`` is the only admission implementation; the aiohttp server is a transport around it.
``/mutate`` completes AppWrappers, gives pods of wrapped workloads their node rank and, in
adopt mode (SPEC section 11, the default), prepares a wrap candidate for adoption: plumbing,
the admission gate, the AppWrapper label and the adoption label and finalizer; on UPDATE it
gives an adopted Volcano Job back its stored spec when the update only re-applies it.
``/validate`` rejects what cannot work. In adopt mode it has no side effects: the controller
creates the AppWrapper from the stored object. In redirect mode it creates the AppWrapper
through the API (a server-side dry run for dry-run requests) and denies the original with a
message that says where the work went. Every call to the API fits in the apiserver's budget;
a failure denies cleanly and says whether anything may exist.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from webhook.core import adoption, audit, builder, engine, provenance, reapply, release
from webhook.core.plumbing import pods
from webhook.core.policy import Match, Mode, PolicySet
from webhook.core.ports import AlreadyExists, ApiFailure, Cluster, Identity
from webhook.core.rules import size
from webhook.model import names, objects, patches, review

Webhook = Literal["mutate", "validate"]

# Part of the apiserver's budget kept back for sending the answer.
ANSWER_MARGIN = 0.25
# kube-apiserver's default when a request carries no ?timeout= (v1 webhooks: 10s).
DEFAULT_BUDGET = 10.0


def usable_budget(timeout: float | None) -> float:
    """Seconds admission may spend of a request's ``?timeout=``. kube-apiserver rounds what is
    left of its deadline *up* to whole seconds before it sends it ("if it's not an even number
    of seconds, round up to the nearest second", admission/plugin/webhook/mutating and
    validating dispatcher.go), so up to one second of it may already be gone: count on
    ``timeout - 1`` (half of a short timeout), less the margin for sending the answer."""
    given = timeout if timeout is not None and timeout > 0 else DEFAULT_BUDGET
    return max(given - 1.0, given / 2) - ANSWER_MARGIN


@dataclass(frozen=True)
class Deps:
    policies: Callable[[], PolicySet]
    cluster: Cluster | None
    clock: Callable[[], float] = time.monotonic
    # Only fetch namespace labels when some policy selects by label.
    needs_namespace_labels: Callable[[], bool] = lambda: True
    # Redirect mode: where the findings Audit let through are raised as PolicyAudit Events on
    # the AppWrapper created (never waited for: an Event neither delays nor fails an answer).
    audit_events: Callable[[Mapping[str, Any], list[audit.Finding]], None] | None = None


@dataclass
class Record:
    """What the log line and the metrics say about one request (never object bodies)."""

    webhook: str
    uid: str = ""
    kind: str = ""
    operation: str = ""
    namespace: str = ""
    name: str = ""
    user: str = ""
    dry_run: bool = False
    decision: str = ""
    code: int = 200
    appwrapper: str = ""
    warnings: int = 0
    # The policy findings its enforcement acts on (``webhook.core.audit``): how many, by rule family.
    findings: int = 0
    finding_rules: list[str] = field(default_factory=list)
    policy: str = ""
    enforcement: str = ""
    detail: str = ""
    api_errors: list[str] = field(default_factory=list)

    def as_log(self) -> dict[str, Any]:
        """The request line's fields: empty ones left out, but never the code or the count of
        warnings the answer carried."""
        return {
            k: v
            for k, v in self.__dict__.items()
            if v not in ("", [], 0) or k in ("code", "warnings")
        }


@dataclass
class _Budget:
    deadline: float
    clock: Callable[[], float]

    def left(self) -> float:
        return self.deadline - self.clock()


async def review_body(
    body: bytes,
    *,
    webhook: Webhook,
    timeout: float | None,
    deps: Deps,
    record: Record,
    arrived: float | None = None,
) -> dict[str, Any]:
    """The response to a request body; raises ``review.BadReview`` for a malformed body.
    ``arrived`` is when the request arrived (``deps.clock``): the budget runs from then, not
    from when its body had been read and parsed."""
    parsed = review.parse(body)
    request = parsed.request
    obj = request.object or {}
    record.uid = request.uid
    record.kind = request.kind.kind
    record.operation = request.operation
    record.namespace = request.namespace
    record.name = request.name or objects.name_of(obj)
    record.user = request.user_info.username
    record.dry_run = request.dry_run
    start = arrived if arrived is not None else deps.clock()
    budget = _Budget(start + usable_budget(timeout), deps.clock)
    try:
        if await _own_component_dry_run(request, obj, deps, budget):
            return _allowed(request.uid, record, "own-dry-run")
        if webhook == "mutate":
            response = await _mutate(request, obj, deps, budget, record, len(body))
        else:
            response = await _validate(request, obj, deps, budget, record)
    except ApiFailure as exc:
        record.api_errors.append(f"{exc.call}: {exc.status or 'no answer'}")
        response = _api_failure(request.uid, exc, record)
    return response


async def _own_component_dry_run(
    request: review.AdmissionRequest, obj: Mapping[str, Any], deps: Deps, budget: _Budget
) -> bool:
    """Whether this is autowrap's own dry run of what an AppWrapper will create (the component
    carries the AppWrapper label, as the AppWrapper controller writes it). It stands for the
    AppWrapper controller's create, which autowrap's entries never receive (their
    matchConditions exempt that controller's ServiceAccount), so it is answered the same way:
    not judged, not prepared. Judged, a ``wrap: Always`` namespace would refuse its own
    components and wrap nothing."""
    if (
        not request.dry_run
        or deps.cluster is None
        or names.APPWRAPPER_LABEL not in objects.labels_of(obj)
    ):
        return False
    me = await deps.cluster.own_identity(timeout=budget.left())
    return request.user_info.username == me.username


# --- /mutate -----------------------------------------------------------------------------------


async def _mutate(
    request: review.AdmissionRequest,
    obj: dict[str, Any],
    deps: Deps,
    budget: _Budget,
    rec: Record,
    submitted: int,
) -> dict[str, Any]:
    """``submitted``: the request body's length (``_patched``)."""
    if request.operation == "UPDATE" and obj and request.old_object:
        return await _update(request, obj, request.old_object, deps, budget, rec, submitted)
    if request.operation != "CREATE" or not obj:
        return _allowed(request.uid, rec, "skipped")
    if request.kind.kind == "Pod" and pods.needs_rank(obj):
        mutation = pods.mutate(obj)
        if mutation.violations:
            return _denied(request.uid, rec, [v.render() for v in mutation.violations])
        return _patched(request.uid, rec, obj, mutation.pod, "ranked", submitted=submitted)
    context = await _context(request, deps, budget)
    if request.kind.kind != "AppWrapper":
        candidate = engine.wrap_candidate(obj, context)
        if candidate is None and not objects.is_appwrapper(obj):
            return _allowed(request.uid, rec, "skipped")  # nothing but an AppWrapper completes
        if candidate is not None:
            mode, _ = await _mode(candidate.match, candidate.queue, request.namespace, deps, budget)
            if mode is not Mode.ADOPT:
                return _allowed(request.uid, rec, "skipped")  # /validate redirects it
            # Findings are /validate's to report; mutation only prepares, and needs no
            # AppWrapper for that: its name and queue are enough.
            prepared = adoption.prepare(obj, candidate, user=request.user_info.username)
            rec.appwrapper = candidate.appwrapper_name
            return _patched(request.uid, rec, obj, prepared, "prepared", submitted=submitted)
    outcome = engine.admit(obj, context, check=False)
    if outcome.action is not engine.Action.COMPLETE:
        return _allowed(request.uid, rec, "skipped")
    if outcome.result is None:  # too large to build: nothing to complete
        return _denied(request.uid, rec, list(outcome.verdict().errors))
    # Findings are /validate's to report; mutation only completes.
    return _patched(request.uid, rec, obj, outcome.result, "completed", submitted=submitted)


async def _update(
    request: review.AdmissionRequest,
    obj: dict[str, Any],
    old: dict[str, Any],
    deps: Deps,
    budget: _Budget,
    rec: Record,
    submitted: int,
) -> dict[str, Any]:
    """Re-running what the docs give changes nothing that runs: an AppWrapper re-applied keeps
    Kueue's placement and keeps running while Kueue admits it, a Job an AppWrapper created is
    answered with the redirect (``webhook.core.reapply``), and re-applying the unchanged
    manifest of an adopted object succeeds (SPEC section 11)."""
    if objects.is_appwrapper(old):
        kept = await _kept_appwrapper(obj, old, request.namespace, deps.cluster, budget)
        if kept is None:
            return _allowed(request.uid, rec, "skipped")
        result, what, warnings = kept
        return _patched(request.uid, rec, obj, result, what, submitted=submitted,
                        warnings=warnings)  # fmt: skip
    refusal = reapply.component_update(obj, old, request.namespace)
    if refusal is not None:
        # 403 as the redirect answers a create (``_wrap``): kubectl prints "Error from server
        # (Forbidden): ... admission webhook ... denied the request: Job ns/name was wrapped ...".
        return _denied(request.uid, rec, [refusal], code=403, reason="Forbidden")
    if not adoption.is_adopted_object(old):
        return _allowed(request.uid, rec, "skipped")
    labels: Mapping[str, str] = {}
    if deps.cluster is not None and request.namespace and deps.needs_namespace_labels():
        labels = await deps.cluster.namespace_labels(request.namespace, timeout=budget.left())
    match = deps.policies().match(request.namespace or "default", labels)
    if match is None:
        return _allowed(request.uid, rec, "skipped")
    normalized = adoption.normalize_update(obj, old, match.policy.spec)
    if normalized is None:
        return _allowed(request.uid, rec, "unchanged")
    return _patched(request.uid, rec, obj, normalized, "normalized", submitted=submitted)


async def _kept_appwrapper(
    obj: dict[str, Any],
    old: dict[str, Any],
    namespace: str,
    cluster: Cluster | None,
    budget: _Budget,
) -> tuple[dict[str, Any], str, tuple[str, ...]] | None:
    """What an AppWrapper update becomes so that it leaves Kueue's part as stored (the result,
    what was done, the warning to give), or None to let it through as sent."""
    kept = reapply.kept_kueue_state(obj, old)
    if kept is not None:
        return kept, "kept-kueue-state", ()
    if not reapply.stops_the_same_work(obj, old) or cluster is None:
        return None
    uid = str(objects.as_map(old.get("metadata")).get("uid") or "")
    workloads = await cluster.kueue_workloads(namespace, uid, timeout=budget.left())
    if release.admission(old, workloads) is None:
        return None  # Kueue took its admission back: the stop is Kueue's (preemption)
    warning = reapply.stop_warning(namespace, objects.name_of(old))
    return reapply.undone_stop(obj, old), "kept-running", (warning,)


def _note_findings(rec: Record, outcome: engine.Outcome, obj: Mapping[str, Any]) -> None:
    if names.ORIGIN_KIND_ANNOTATION in objects.annotations_of(obj):
        return  # an AppWrapper autowrap made: its findings were counted on the object
    found = audit.findings(outcome)
    if found:
        rec.findings = len(found)
        rec.finding_rules = sorted(f.rule for f in found)
        rec.policy, rec.enforcement = found[0].policy, found[0].enforcement


async def _mode(
    match: Match, queue: str | None, namespace: str, deps: Deps, budget: _Budget
) -> tuple[Mode, str]:
    """Adopt or redirect for a wrap candidate, and the warning when the policy's adopt mode
    cannot serve its queue (MultiKueue or topology-aware scheduling: adopt-mode.md Q6, Q5)."""
    mode = match.policy.spec.mode
    if mode is Mode.REDIRECT or deps.cluster is None:
        return mode, ""
    if not queue:
        return mode, ""
    reason = await deps.cluster.redirect_reason(namespace, queue, timeout=budget.left())
    if reason:
        return Mode.REDIRECT, (
            f"wrapped by redirect instead of adopt mode: {reason}; the create is answered with "
            "the AppWrapper that stands in its place"
        )
    return mode, ""


def _patched(
    uid: str,
    rec: Record,
    original: Mapping[str, Any],
    result: Mapping[str, Any] | None,
    what: str,
    *,
    submitted: int,
    warnings: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Allowed with the patch from ``original`` to ``result``, unless the apiserver could not
    store the result. ``submitted`` is the request body's length, more than ``original`` weighs
    as JSON; the result outweighs ``original`` by at most the patch's own JSON (every add and
    replace carries its value), so only a result that may cross etcd's limit is weighed whole."""
    patch = patches.make_patch(original, result) if result is not None else []
    encoded = orjson.dumps(patch) if patch else b""
    if result is not None and submitted + len(encoded) > size.ETCD_LIMIT:
        kind = original.get("kind") or "object"
        too_large = size.check(result, what=f"the {kind} with the env, DNS and gates autowrap "
                               f"adds (submitted: {size.json_size(original):,} bytes)")  # fmt: skip
        if too_large:
            return _denied(uid, rec, [v.render() for v in too_large])
    rec.decision = what if patch else "unchanged"
    rec.warnings = len(warnings)
    return review.allow(uid, patch=encoded, warnings=warnings)


# --- /validate ---------------------------------------------------------------------------------


async def _validate(
    request: review.AdmissionRequest, obj: dict[str, Any], deps: Deps, budget: _Budget, rec: Record
) -> dict[str, Any]:
    if request.operation != "CREATE" or not obj:
        return _allowed(request.uid, rec, "skipped")
    outcome = await _admit(obj, request, deps, budget)
    verdict = outcome.verdict()
    if outcome.action is engine.Action.PASS:
        return _allowed(request.uid, rec, "skipped")
    _note_findings(rec, outcome, obj)
    if verdict.denied:
        return _denied(request.uid, rec, list(verdict.errors), warnings=verdict.warnings)
    if outcome.action is engine.Action.COMPLETE:
        return await _check_submitted(request, outcome, verdict, deps, budget, rec)
    assert outcome.result is not None
    assert outcome.match is not None
    queue = objects.labels_of(outcome.result).get(names.QUEUE_LABEL)
    mode, why = await _mode(outcome.match, queue, request.namespace, deps, budget)
    if why:
        verdict = engine.Verdict(verdict.denied, verdict.errors, (*verdict.warnings, why))
    if mode is Mode.ADOPT:
        return await _check_adoptable(request, obj, outcome.result, verdict, deps, budget, rec)
    audit.annotate(outcome.result, audit.audited(outcome))
    return await _wrap(request, outcome.result, verdict, deps, budget, rec)


async def _check_adoptable(
    request: review.AdmissionRequest,
    obj: Mapping[str, Any],
    appwrapper: Mapping[str, Any],
    verdict: engine.Verdict,
    deps: Deps,
    budget: _Budget,
    rec: Record,
) -> dict[str, Any]:
    """Adopt mode: the create goes through, and the controller does the rest; nothing here
    writes anything."""
    rec.appwrapper = objects.name_of(appwrapper)
    if not adoption.is_prepared(obj):
        return _denied(request.uid, rec, [
            f"{request.kind.kind} {request.namespace}/{rec.name} was not prepared by autowrap's "
            "mutating webhook, so it would run outside Kueue; check that the "
            "MutatingWebhookConfiguration autowrap-mutating is installed and matches this "
            "object, then create it again"], code=500, reason="InternalError",
            warnings=verdict.warnings)  # fmt: skip
    if deps.cluster is not None:
        refusal = await _unauthorized(request, deps.cluster, budget)
        if refusal is not None:
            return _denied(request.uid, rec, [refusal], code=403, reason="Forbidden",
                           warnings=verdict.warnings)  # fmt: skip
        if await deps.cluster.appwrapper_terminating(
            request.namespace, rec.appwrapper, timeout=budget.left()
        ):
            # Its controller deletes the components it had by name as it goes (A7): this
            # object, created now, would be deleted with it.
            return _denied(request.uid, rec, [
                f"AppWrapper {request.namespace}/{rec.appwrapper} of an earlier object of this "
                f"name is being deleted, and it deletes what carries its name as it goes; create "
                f"this {request.kind.kind} again in a few seconds"], code=409, reason="Conflict",
                warnings=verdict.warnings)  # fmt: skip
    queue = objects.labels_of(appwrapper).get(names.QUEUE_LABEL)
    missing = await _missing_queue(queue, request.namespace, deps, budget)
    if missing:
        return _denied(request.uid, rec, [missing], warnings=verdict.warnings)
    return _allowed(request.uid, rec, "adopting", warnings=verdict.warnings)


async def _unauthorized(
    request: review.AdmissionRequest, cluster: Cluster, budget: _Budget
) -> str | None:
    """One rule in both modes: autowrap makes an AppWrapper for a user only if that user may
    create AppWrappers in the namespace (a SubjectAccessReview as that user); else why not."""
    who = _identity(request.user_info)
    ns = request.namespace
    allowed, why = await cluster.may_create_appwrappers(who, ns, timeout=budget.left())
    if allowed:
        return None
    because = f" ({why})" if why else ""
    return (
        f"user {who.username!r} may not create appwrappers (workload.codeflare.dev) in "
        f"namespace {ns!r}{because}; autowrap creates only what you could create yourself: "
        "ask for the 'create appwrappers' permission, e.g. the appwrapper-editor role"
    )


async def _check_submitted(
    request: review.AdmissionRequest,
    outcome: engine.Outcome,
    verdict: engine.Verdict,
    deps: Deps,
    budget: _Budget,
    rec: Record,
) -> dict[str, Any]:
    assert outcome.result is not None
    queue = objects.labels_of(outcome.result).get(names.QUEUE_LABEL)
    missing = await _missing_queue(queue, request.namespace, deps, budget)
    if missing:
        return _denied(request.uid, rec, [missing], warnings=verdict.warnings)
    return _allowed(request.uid, rec, "valid", warnings=verdict.warnings)


async def _wrap(
    request: review.AdmissionRequest,
    appwrapper: dict[str, Any],
    verdict: engine.Verdict,
    deps: Deps,
    budget: _Budget,
    rec: Record,
) -> dict[str, Any]:
    cluster = deps.cluster
    ns = request.namespace
    aw_name = objects.name_of(appwrapper)
    rec.appwrapper = aw_name
    if cluster is None:
        return _denied(request.uid, rec, [
            "autowrap has no access to the Kubernetes API, so it cannot create the AppWrapper; "
            "apply the output of `autowrap render` instead"], code=503, reason="ServiceUnavailable")  # fmt: skip
    refusal = await _unauthorized(request, cluster, budget)
    if refusal is not None:
        return _denied(request.uid, rec, [refusal], code=403, reason="Forbidden",
                       warnings=verdict.warnings)  # fmt: skip
    queue = objects.labels_of(appwrapper).get(names.QUEUE_LABEL)
    missing = await _missing_queue(queue, ns, deps, budget)
    if missing:
        return _denied(request.uid, rec, [missing], warnings=verdict.warnings)
    body = objects.deep_copy(appwrapper)
    body.setdefault("metadata", {})["namespace"] = ns
    # What the AppWrapper controller will create, judged now by the cluster itself (schema,
    # Volcano's webhook, policy engines): refused later, the job could no longer be fixed.
    refused = await cluster.refusal(ns, builder.deployed_components(body), timeout=budget.left())
    if refused:
        return _denied(request.uid, rec, [refused], warnings=verdict.warnings)
    try:
        created = await cluster.create_appwrapper(
            ns, body, dry_run=request.dry_run, timeout=budget.left()
        )
        repeated = False
        if deps.audit_events is not None and not request.dry_run:
            found = audit.recorded(appwrapper)
            if found:
                deps.audit_events(created, found)
    except AlreadyExists:
        try:
            existing = await cluster.get_appwrapper(ns, aw_name, timeout=budget.left())
            me = await cluster.own_identity(timeout=budget.left())
        except ApiFailure as exc:
            exc.message += (
                f"; AppWrapper {ns}/{aw_name} already exists: apply the same manifest again, "
                f"or check it with kubectl get appwrapper {aw_name} -n {ns}"
            )
            raise
        refusal = _refuse_existing(existing, appwrapper, me, request, ns, aw_name, rec.name)
        if refusal is not None:
            return _denied(request.uid, rec, [refusal], code=409, reason="AlreadyExists",
                           warnings=verdict.warnings)  # fmt: skip
        verdict = _with_settings_note(verdict, existing, appwrapper, ns, aw_name)
        repeated = True
    except ApiFailure as exc:
        exc.message += _may_exist_hint(exc, ns, aw_name)
        raise
    rec.decision = (
        "wrapped-dry-run" if request.dry_run else ("rewrapped" if repeated else "wrapped")
    )
    rec.warnings = len(verdict.warnings)
    return review.deny(
        request.uid,
        _redirect_message(request, appwrapper, ns, aw_name),
        # 403, kube-apiserver's own code for a webhook denial: no client retries it blindly
        # (client-go's RetryOnConflict retries a 409; workflow engines and GitOps retry 409 and
        # 5xx). kubectl prints "Error from server (Forbidden): admission webhook ... denied the
        # request: Job ns/name was wrapped into AppWrapper ...".
        code=403,
        reason="Forbidden",
        warnings=verdict.warnings,
        details={"group": names.APPWRAPPER_GROUP, "kind": names.APPWRAPPER_PLURAL, "name": aw_name},
    )


def _redirect_message(
    request: review.AdmissionRequest, appwrapper: Mapping[str, Any], ns: str, aw_name: str
) -> str:
    component = provenance.component_template(appwrapper)
    name = request.name or objects.name_of(objects.as_map(component))
    queue = objects.labels_of(appwrapper).get(names.QUEUE_LABEL, "")
    dry = " (dry run: nothing was created)" if request.dry_run else ""
    return (
        f"{request.kind.kind} {ns}/{name} was wrapped into AppWrapper {ns}/{aw_name}{dry}; "
        f"Kueue queues it in {queue!r} and creates the {request.kind.kind} once admitted. "
        f"Follow it with: kubectl get appwrapper {aw_name} -n {ns}"
    )


def _refuse_existing(
    existing: Mapping[str, Any] | None,
    wanted: Mapping[str, Any],
    me: provenance.Me,
    request: review.AdmissionRequest,
    ns: str,
    aw_name: str,
    name: str,
) -> str | None:
    """Why an AppWrapper that already has the name cannot stand for this request, or None.

    Only an AppWrapper autowrap created stands for a request, and only when it wraps the very
    same object (``webhook.core.provenance``): its annotations could have been copied onto one that
    runs something else. A difference the user did not make (queue or fault tolerance from
    another policy version) is no reason to refuse, and never a reason to advise deleting what
    may be running."""
    kind = request.kind.kind
    if existing is None:
        return (
            f"AppWrapper {ns}/{aw_name} was there a moment ago and is gone now; apply the same "
            "manifest again"
        )
    who = provenance.stranger(existing, me)
    if who is not None:
        return (
            f"AppWrapper {ns}/{aw_name} already exists and {who}, so autowrap cannot stand "
            f"behind it; rename {kind} {ns}/{name or aw_name}, or ask whoever made that "
            f"AppWrapper to remove it (kubectl get appwrapper {aw_name} -n {ns} -o yaml shows "
            "its labels)"
        )
    if not provenance.same_work(existing, wanted):
        return (
            f"AppWrapper {ns}/{aw_name} already exists with a different spec; delete it first "
            f"(kubectl delete appwrapper {aw_name} -n {ns}) or rename {kind} {ns}/{name or aw_name}"
        )
    metadata = objects.as_map(existing.get("metadata"))
    phase = objects.as_map(existing.get("status")).get("phase")
    if metadata.get("deletionTimestamp"):
        return (
            f"AppWrapper {ns}/{aw_name} for this {kind} is being deleted; apply the manifest again "
            f"once it is gone (kubectl get appwrapper {aw_name} -n {ns}), or rename the {kind}"
        )
    if phase in ("Succeeded", "Failed"):
        return (
            f"AppWrapper {ns}/{aw_name} for this {kind} has already run and is {phase}, so "
            f"nothing would run again; to run it again, delete it (kubectl delete appwrapper "
            f"{aw_name} -n {ns}) or rename the {kind}"
        )
    return None


def _with_settings_note(
    verdict: engine.Verdict,
    existing: Mapping[str, Any] | None,
    wanted: Mapping[str, Any],
    ns: str,
    aw_name: str,
) -> engine.Verdict:
    have, want = provenance.settings(existing or {}), provenance.settings(wanted)
    if have == want:
        return verdict
    differing = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
    note = (
        f"AppWrapper {ns}/{aw_name} already stands for this job with other settings "
        f"({', '.join(differing)}), as made under an earlier policy; it keeps them"
    )
    return engine.Verdict(verdict.denied, verdict.errors, (*verdict.warnings, note))


def _may_exist_hint(exc: ApiFailure, ns: str, name: str) -> str:
    if exc.status is not None and 400 <= exc.status < 500:
        return "; nothing was created"
    return (
        f"; AppWrapper {ns}/{name} may or may not have been created: apply the same manifest "
        f"again (autowrap recognises its AppWrapper and reports it), or check with "
        f"kubectl get appwrapper {name} -n {ns}"
    )


async def _missing_queue(queue: str | None, ns: str, deps: Deps, budget: _Budget) -> str | None:
    if not queue or deps.cluster is None:
        return None
    exists = await deps.cluster.local_queue_exists(ns, queue, timeout=budget.left())
    if exists is False:
        return (
            f"metadata.labels[{names.QUEUE_LABEL}]: LocalQueue {queue!r} does not exist in "
            f"namespace {ns!r}; use an existing queue (kubectl get localqueues -n {ns})"
        )
    return None


# --- shared ------------------------------------------------------------------------------------


async def _admit(
    obj: dict[str, Any],
    request: review.AdmissionRequest,
    deps: Deps,
    budget: _Budget,
    *,
    check: bool = True,
) -> engine.Outcome:
    return engine.admit(obj, await _context(request, deps, budget), check=check)


async def _context(request: review.AdmissionRequest, deps: Deps, budget: _Budget) -> engine.Context:
    labels: Mapping[str, str] = {}
    if deps.cluster is not None and request.namespace and deps.needs_namespace_labels():
        labels = await deps.cluster.namespace_labels(request.namespace, timeout=budget.left())
    return engine.Context(
        policies=deps.policies(),
        namespace=request.namespace or "default",
        namespace_labels=labels,
        user=request.user_info.username,
        uid=request.uid,
    )


def _identity(user: review.UserInfo) -> Identity:
    return Identity(
        username=user.username,
        uid=user.uid,
        groups=tuple(user.groups),
        extra=tuple(sorted(user.extra.items())),
    )


def _allowed(uid: str, rec: Record, what: str, warnings: tuple[str, ...] = ()) -> dict[str, Any]:
    rec.decision = what
    rec.warnings = len(warnings)
    return review.allow(uid, warnings=warnings)


def _denied(
    uid: str,
    rec: Record,
    errors: list[str],
    *,
    code: int = 422,
    reason: str = "Invalid",
    warnings: tuple[str, ...] = (),
) -> dict[str, Any]:
    rec.decision = "rejected"
    rec.code = code
    rec.warnings = len(warnings)
    message = errors[0] if len(errors) == 1 else "\n".join(["", *errors])
    return review.deny(uid, message, code=code, reason=reason, warnings=warnings)


def _api_failure(uid: str, exc: ApiFailure, rec: Record) -> dict[str, Any]:
    status = exc.status or 0
    rec.decision = "api-error"
    rec.code = 503 if status in (0, 429) or status >= 500 else 500
    answered = f"answered {status}" if status else "did not answer"
    return review.deny(
        uid,
        f"autowrap could not complete the request: the Kubernetes API {answered} to "
        f"'{exc.call}': {exc.message}",
        code=rec.code,
        reason="ServiceUnavailable" if rec.code == 503 else "InternalError",
    )
