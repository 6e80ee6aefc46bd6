"""FakeCluster: the front door of the fake cluster (admission, then the store) and its REST API.

A write goes the way kube-apiserver sends it (handlers/create.go:180-215, update.go:176-216,
patch.go:211-245, delete.go:138-175 of k8s.io/apiserver @24a394e5): the object is decoded and
defaulted, managedFields are computed, mutating webhooks run (sequentially), the name is
generated, the store validates the object (the name, a CRD's schema: 422 Invalid, as
rest.BeforeCreate/BeforeUpdate at registry/store.go:569 and :825), validating webhooks run (in
parallel, including the in-process ones added with :meth:`FakeCluster.add_validating_webhook`),
then storage decides (AlreadyExists, Conflict). Over HTTP a request body over 3 MiB is refused
with 413 first (handlers/rest.go:372-389).
Admission goes through :class:`ApiserverEmulator` when one is attached, so autowrap's real
webhook server is called over TLS. A ``/status`` write is admitted too, as a subresource: only
webhooks and ValidatingAdmissionPolicies whose rules name it (``pods/status``, ``pods/*``)
see it, and for a pod it changes what podStatusStrategy lets change (status, labels,
annotations; never spec or ownerReferences; Store.prepare_update).

The HTTP API serves the real REST paths on loopback with bearer-token authentication, so the
official ``kubernetes.aio`` client (or kubectl) works against it unchanged.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import copy
import dataclasses
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from testbed.apiserver import (
    MAX_REQUEST_BODY_BYTES,
    ApiserverEmulator,
    InProcessMutator,
    InProcessValidator,
    UserInfo,
    request_entity_too_large,
    status_json,
)
from testbed.apiserver import generate_name as _generate_name
from testbed.cluster import fields as managed
from testbed.cluster import patches, protobuf
from testbed.cluster import rbac as authz
from testbed.cluster.common import (
    DEFAULT_TOKEN,
    AccessRule,
    RecordedRequest,
    ServingTLS,
    sanitize_label,
    service_account_user,
    write_kubeconfig,
)
from testbed.cluster.resources import (
    ALL,
    APPWRAPPERS,
    LOCALQUEUES,
    NAMESPACES,
    PODS,
    SERVICES,
    WEBHOOK_CONFIGURATIONS,
    Resource,
    find,
)
from testbed.cluster.store import ApiError, JsonDict, Store, bad_request
from webhook.model.names import (
    APPWRAPPER_GROUP,
    APPWRAPPER_USER_LABEL,
    APPWRAPPER_USERID_LABEL,
    SERVICE_NAMESPACE,
)

ADMIN = UserInfo(username="kubernetes-admin", groups=("system:masters", "system:authenticated"))
AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
APPWRAPPER_GROUP_KIND = (APPWRAPPER_GROUP, "AppWrapper")
NOT_FOUND_MESSAGE = "the server could not find the requested resource"
DEFAULT_BOOKMARK_INTERVAL = 1.0
# The bearer token autowrap's kubeconfig carries when a test runs it under its RBAC, and one
# that is always the cluster's administrator (an installer's kubectl).
AUTOWRAP_TOKEN = "autowrap-serviceaccount-token"
ADMIN_TOKEN = "cluster-admin-token"
_USER = web.RequestKey("user", UserInfo)
# Stores with ReturnDeletedObject (pod, service and namespace REST); others answer a Status.
_RETURNS_DELETED = (PODS, SERVICES, NAMESPACES)
# The messages of the apiserver's own errors for these codes (k8s.io/apimachinery
# pkg/api/errors/errors.go NewTooManyRequests, NewInternalError, NewServiceUnavailable,
# NewTimeoutError, NewUnauthorized, NewForbidden, NewConflict at 24a394e5).
_DEFAULT_FAULT_MESSAGES = {
    400: "the server rejected our request for an unknown reason",
    401: "Unauthorized",
    403: "forbidden: injected fault",
    404: NOT_FOUND_MESSAGE,
    409: "Operation cannot be fulfilled: injected conflict",
    429: "the server has received too many requests and has asked us to try again later",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted",
}


@dataclass
class Fault:
    """An injected failure; ``hits`` counts firings.

    ``status`` is answered instead of the request (None: the request is served, slowed by
    ``delay`` or cut by ``drop_connection``). ``after_effect``: the request is served first
    and the failure replaces its answer, a write whose response was lost."""

    method: str
    path_regex: re.Pattern[str]
    status: int | None
    times: int | None
    message: str | None
    hits: int = 0
    # A stalled connection instead of an answer: the request waits until the event is set, then
    # is served as usual (the client's own timeout decides what it sees meanwhile).
    hold: asyncio.Event | None = None
    # Only requests whose JSON body, written compactly (no spaces), contains this text.
    body_contains: bytes | None = None
    delay: float = 0.0
    drop_connection: bool = False
    after_effect: bool = False
    reason: str | None = None
    retry_after: int = 1

    def matches(self, method: str, path: str, raw: bytes = b"") -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method not in ("*", method.upper()):
            return False
        if self.body_contains is not None and self.body_contains not in raw:
            return False
        return self.path_regex.search(path) is not None


@dataclass(frozen=True)
class _Target:
    res: Resource
    namespace: str | None
    name: str | None
    subresource: str


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _json(data: Any, status: int = 200, warnings: Sequence[str] = ()) -> web.Response:
    response = web.Response(status=status, text=json.dumps(data), content_type="application/json")
    for warning in warnings:
        response.headers.add("Warning", f'299 - "{warning}"')
    return response


def _status_response(error: ApiError) -> web.Response:
    return _json(error.status_json(), error.status)


CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter."
)


def _int_query(value: str | None, name: str) -> int:
    if not value:
        return 0
    try:
        number = int(value)
    except ValueError:
        raise bad_request(f"{name}: Invalid value: {value!r}: must be an integer") from None
    return max(number, 0)


def _list_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _encode_continue(version: str, key: tuple[str, str]) -> str:
    token = {"v": "meta.k8s.io/v1", "rv": int(version), "start": "/".join(key) + "\x00"}
    return base64.urlsafe_b64encode(json.dumps(token).encode()).decode()


def _decode_continue(token: str) -> tuple[str, tuple[str, str]]:
    """The token's resourceVersion and the key to start after; a malformed token is 400, as
    storage.DecodeContinue's errors are."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        version, start = int(decoded["rv"]), str(decoded["start"])
    except (ValueError, KeyError, TypeError):
        raise bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ) from None
    if decoded.get("v") != "meta.k8s.io/v1" or version <= 0:
        raise bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    namespace, _, name = start.removesuffix("\x00").rpartition("/")
    return str(version), (namespace, name)


# Metadata-only answers, as kube-apiserver negotiates them: a client asks with
# How often a patch is applied again when the object changed while it was admitted.
PATCH_ATTEMPTS = 5

# ``Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`` (one object, or each
# object of a watch) or ``as=PartialObjectMetadataList`` (a LIST), optionally followed by
# plain ``application/json`` as a fallback; the first media type the server can produce wins
# (k8s.io/apiserver pkg/endpoints/handlers/negotiation, NegotiateOutputMediaType). The object
# is cut to its metadata (k8s.io/apiserver pkg/endpoints/handlers/response.go,
# doTransformObject -> asPartialObjectMetadata / asPartialObjectMetadataList; meta.
# AsPartialObjectMetadata keeps ObjectMeta whole); a Status (a watch's ERROR) is sent as it is.
PARTIAL = "PartialObjectMetadata"
PARTIAL_LIST = "PartialObjectMetadataList"
META_V1 = "meta.k8s.io/v1"


def _wanted_shape(accept: str) -> str | None:
    """``PartialObjectMetadata``, ``PartialObjectMetadataList``, ``""`` (the resource's own
    JSON) or None (nothing acceptable: 406), from an Accept header."""
    if not accept.strip():
        return ""
    for media in accept.split(","):
        kind, *params = (p.strip() for p in media.split(";"))
        options = dict(p.partition("=")[::2] for p in params)
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        target = options.get("as")
        if target is None:
            return ""
        if (
            target in (PARTIAL, PARTIAL_LIST)
            and options.get("g") == "meta.k8s.io"
            and options.get("v") in ("v1", "v1beta1")
        ):
            return target
    return None


def _not_acceptable(message: str) -> ApiError:
    return ApiError(406, message, "NotAcceptable")


def _go_type(res: Resource, *, listed: bool = False) -> str:
    """What ``%T`` prints of the object kube-apiserver holds for ``res`` when a transform of it
    fails (handlers/response.go): the internal type of a built-in (``*core.Pod``,
    ``*coordination.LeaseList``), ``*unstructured.Unstructured(List)`` of a custom
    resource."""
    if res.custom:
        return "*unstructured.UnstructuredList" if listed else "*unstructured.Unstructured"
    package = res.group.split(".")[0] if res.group else "core"
    return f"*{package}.{res.list_kind if listed else res.kind}"


# NegotiateOutputMediaType's refusal (handlers/negotiation): the serializers' media types, the
# same for built-in and custom resources (the metadata-only ones are conversions, not listed).
NOT_ACCEPTABLE_MEDIA = (
    "only the following media types are accepted: application/json, application/yaml, "
    "application/vnd.kubernetes.protobuf"
)


def as_partial(obj: Mapping[str, Any]) -> JsonDict:
    """asPartialObjectMetadata: the object's metadata under meta.k8s.io/v1."""
    return {"kind": PARTIAL, "apiVersion": META_V1,
            "metadata": copy.deepcopy(dict(obj.get("metadata") or {}))}  # fmt: skip


async def _read_limited(request: web.Request) -> tuple[bytes, bool]:
    """The body, and whether it is over kube-apiserver's 3 MiB request body limit. A body over
    aiohttp's own ``client_max_size`` is not read at all (empty, and too large)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return b"", True
    return raw, len(raw) > MAX_REQUEST_BODY_BYTES


def _generic_not_found() -> ApiError:
    return ApiError(404, NOT_FOUND_MESSAGE, "NotFound", {})


class FakeCluster:
    """Store + admission + HTTP. ``resources`` decides what discovery publishes: pass
    ``resources.WITHOUT_KUEUE`` for a cluster where Kueue is not installed."""

    def __init__(
        self,
        *,
        emulator: ApiserverEmulator | None = None,
        token: str = DEFAULT_TOKEN,
        users: Mapping[str, UserInfo] | None = None,
        resources: Sequence[Resource] = ALL,
        store: Store | None = None,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
        host: str = "127.0.0.1",
        default_allow: bool = True,
        keep_requests: int | None = None,
        tls: ServingTLS | None = None,
    ) -> None:
        """``users`` maps bearer tokens to who they authenticate as (``token`` is ADMIN unless
        listed); ``default_allow=False`` makes the authorizer deny what no rule allows, as RBAC
        does; ``keep_requests`` bounds the request log to the newest N (for long runs); with
        ``tls`` the API is served over HTTPS, as kube-apiserver serves it, and the kubeconfig
        names its CA and server name."""
        self.tls = tls
        self.store = store or Store(resources)
        self.emulator: ApiserverEmulator | None = None
        self.token = token
        self.users: dict[str, UserInfo] = {token: ADMIN, ADMIN_TOKEN: ADMIN, **(users or {})}
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.port = 0
        self.requests: collections.deque[RecordedRequest] = collections.deque(maxlen=keep_requests)
        self.faults: list[Fault] = []
        self.access_rules: list[AccessRule] = []
        self.default_allow = default_allow
        # The users whose own requests RBAC authorizes (see enforce_rbac), and the RBAC read
        # from the store, until the next write of a role or binding (see rbac).
        self.under_rbac: set[str] = set()
        self._rbac: authz.Rbac | None = None
        self.sars: list[JsonDict] = []
        self.token_reviews = 0
        self.validators: list[InProcessValidator] = []
        self.mutators: list[InProcessMutator] = []
        # The AppWrapper operator's mutating webhook is installed: every AppWrapper create gets
        # the requester's user and userid labels. False: a cluster where only Kueue's is.
        self.appwrapper_operator_webhook = True
        # What /version answers (k8s.io/apimachinery pkg/version Info); tests set an older one.
        self.version: JsonDict = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-fake",
                                  "platform": "linux/amd64"}  # fmt: skip
        self._runner: web.AppRunner | None = None
        # Each open watch stream's task, with the resource it watches (end_watches ends them).
        self._streams: dict[asyncio.Task[Any], str] = {}
        # GET pods/{name}/log: the kubelet's answer (testbed.sim.kubelet sets it), given the
        # pod and the container named (None: the only one); None means not started.
        self.pod_logs: Callable[[JsonDict, str | None], str | None] | None = None
        self.store.on_write(self._after_write)
        if emulator is not None:
            self.admit_with(emulator)

    def admit_with(self, emulator: ApiserverEmulator) -> None:
        """Send every write of a main resource through ``emulator``'s admission chain from now
        on (its namespaces follow the store's)."""
        self.emulator = emulator
        for ns in self.store.list(NAMESPACES):
            emulator.set_namespace(ns["metadata"]["name"], ns["metadata"].get("labels"))

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            return
        await asyncio.to_thread(self.store.load_schemas)
        app = web.Application(middlewares=[self._middleware], client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._route)
        runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        context = self.tls.context() if self.tls else None
        await web.TCPSite(runner, self.host, self.port, ssl_context=context).start()
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def stop(self) -> None:
        """Stop listening and drop open connections; later connects are refused until
        :meth:`start`, which listens again on the same port (state is kept)."""
        runner, self._runner = self._runner, None
        for task in list(self._streams):
            task.cancel()
        if runner is not None:
            await runner.cleanup()

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as the apiserver does when a watch's timeout
        passes or the apiserver restarts (its clients watch again from the last version
        they saw, or list again on a 410)."""
        for task in list(self._streams):
            task.cancel()

    def open_watches(self, plural: str) -> int:
        """How many watch streams of ``plural`` are open now, that :meth:`end_watches` would
        end (a watch whose request has arrived but whose stream is not open yet is not one)."""
        return sum(1 for watched in self._streams.values() if watched == plural)

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(
        self, path: Path, namespace: str = "default", *, token: str | None = None
    ) -> Path:
        """A kubeconfig with token auth for ``kubernetes(.aio).config.load_kube_config``
        (``token``: another identity's than the cluster's own, e.g. :meth:`authorize_autowrap`)."""
        return write_kubeconfig(path, self.url, token or self.token, namespace, tls=self.tls)

    # -- set-up helpers ------------------------------------------------------------------------

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> JsonDict:
        """Create (or relabel) a namespace directly in the store, without admission."""
        existing = self.store.get(NAMESPACES, None, name)
        if existing is None:
            return self.store.create(
                NAMESPACES, {"metadata": {"name": name, "labels": dict(labels or {})}}
            )
        existing["metadata"]["labels"] = {**existing["metadata"].get("labels", {}),
                                          **(labels or {})}  # fmt: skip
        return self.store.update(NAMESPACES, existing)

    def add_local_queue(
        self, namespace: str, name: str, cluster_queue: str = "cluster-queue"
    ) -> JsonDict:
        """A Kueue LocalQueue pointing at ``cluster_queue``, created directly in the store."""
        return self.store.create(LOCALQUEUES, {"metadata": {"name": name, "namespace": namespace},
                                               "spec": {"clusterQueue": cluster_queue}})  # fmt: skip

    def add_webhook_configuration(self, configuration: Mapping[str, Any]) -> JsonDict:
        """Store a Mutating/ValidatingWebhookConfiguration, as ``kubectl apply`` would create it
        (the emulator's admission chain is configured separately)."""
        res = find(self.store.resources, str(configuration.get("apiVersion")),
                   str(configuration.get("kind")))  # fmt: skip
        if res not in WEBHOOK_CONFIGURATIONS:
            raise ValueError(f"not a webhook configuration: {configuration.get('kind')}")
        assert res is not None
        return self.store.create(res, configuration)

    def add_validating_webhook(
        self, name: str, deny: Callable[[JsonDict], str | JsonDict | None]
    ) -> None:
        """An in-process validating webhook (Volcano's validatejob, Kyverno...): ``deny`` gets
        the AdmissionRequest dict (operation, object, oldObject, userInfo...) of every
        CREATE/UPDATE/DELETE of a main resource and returns a denial message or None. It runs
        in parallel with the emulator's validating webhooks; a denial reads
        ``admission webhook "<name>" denied the request: <message>`` with code 400."""
        self.validators.append((name, deny))

    def add_mutating_webhook(
        self, name: str, mutate: Callable[[JsonDict], JsonDict | None]
    ) -> None:
        """An in-process mutating webhook (Volcano's mutatejob...): ``mutate`` gets the
        AdmissionRequest of every CREATE/UPDATE/DELETE of a main resource and returns the object
        it would have patched it into (None: unchanged). It runs after the emulator's
        configured mutating webhooks, in the order added (see ApiserverEmulator.create)."""
        self.mutators.append((name, mutate))

    def allow(self, user: str | None = None, **attrs: Any) -> AccessRule:
        """Let ``user`` (or members of ``in_group=``) do what the attributes say (``verb``,
        ``group``, ``resource``, ``namespace``, ``name``, ``subresource``; or ``path`` for a
        non-resource URL such as ``/metrics``); rules are evaluated in order."""
        return self._rule(True, user, attrs)

    def deny(self, user: str | None = None, **attrs: Any) -> AccessRule:
        """An explicit deny (``status.denied: true``), as a webhook authorizer can give."""
        return self._rule(False, user, attrs)

    def _rule(self, allowed: bool, user: str | None, attrs: dict[str, Any]) -> AccessRule:
        in_group = attrs.pop("in_group", None)
        if user is None and in_group is None:
            raise ValueError("an access rule needs a user or in_group=")
        non_resource = "path" in attrs
        path = attrs.pop("path", "*")
        wanted = {k: attrs.pop(k, "*") for k in
                  ("verb", "group", "resource", "namespace", "name", "subresource")}  # fmt: skip
        reason = attrs.pop("reason", f"RBAC: allowed by fake rule for {user or in_group}"
                           if allowed else f"denied by fake rule for {user or in_group}")  # fmt: skip
        if attrs:
            raise TypeError(f"unknown access rule attributes {sorted(attrs)}")
        rule = AccessRule(allowed, user, in_group, reason=reason, path=path,
                          non_resource=non_resource, **wanted)  # fmt: skip
        self.access_rules.append(rule)
        return rule

    def enforce_rbac(self, rbac: authz.Rbac, *usernames: str) -> None:
        """Store ``rbac``'s roles and bindings as ``kubectl apply`` of them would (each created,
        or replaced; its namespace created first, as an install's Namespace is), and authorize
        every request of ``usernames`` as kube-apiserver does from now on: the explicit rules
        (:meth:`allow`, :meth:`deny`), then RBAC over every role and binding stored
        (:attr:`rbac`); anything else is 403 Forbidden. SubjectAccessReviews read the same
        RBAC. Other users' requests stay unchecked (the tests act as them directly)."""
        self.store.serve(*authz.RESOURCES)
        for obj in rbac.objects:
            res = next(r for r in authz.RESOURCES if r.kind == obj["kind"])
            meta = obj.get("metadata") or {}
            namespace = str(meta.get("namespace") or "") if res.namespaced else None
            served = self.store.served(NAMESPACES)
            if namespace and served and self.store.get(NAMESPACES, None, namespace) is None:
                self.add_namespace(namespace)
            self.store.apply(res, obj)
        self.under_rbac.update(usernames)

    @property
    def rbac(self) -> authz.Rbac | None:
        """RBAC as the authorizer reads it: the ClusterRoles, Roles and bindings stored in this
        cluster, with the bootstrap roles (authz.Rbac.stored); None while the store does not
        serve them. Read again after any write of one of the four kinds (:meth:`_after_write`),
        so an edit takes effect on the next request, as the authorizer's informers deliver it
        upstream."""
        if self._rbac is None:
            self._rbac = authz.Rbac.stored(self.store)
        return self._rbac

    def _after_write(self, kind: str, res: Resource, obj: JsonDict, old: JsonDict | None) -> None:
        """One store callback (each one costs a copy of every written object): the emulator's
        namespaces follow the store's, and a write of a role or binding drops the RBAC read."""
        self._sync_namespace(kind, res, obj, old)
        if res.group == authz.RBAC_GROUP:
            self._rbac = None

    def authorize_autowrap(
        self,
        token: str = AUTOWRAP_TOKEN,
        user: UserInfo | None = None,
        *,
        manifests: Path = authz.DEPLOY_BASE,
        namespace: str = SERVICE_NAMESPACE,
    ) -> str:
        """Authenticate ``token`` as autowrap's ServiceAccount (``user``) and authorize its
        requests with the grants ``manifests`` (a kustomization: deploy/base, an overlay) give
        it, as the installed autowrap runs, installed into ``namespace``; returns the token for
        autowrap's kubeconfig."""
        user = user or service_account_user(namespace=namespace)
        if not user.uid and user.username.startswith("system:serviceaccount:"):
            # A ServiceAccount's token authenticates with the account's uid, which the
            # AppWrapper webhook records (workload.codeflare.dev/userid) and a SelfSubjectReview
            # answers.
            _, _, account_namespace, account = user.username.split(":", 3)
            user = dataclasses.replace(
                user, uid=service_account_user(account, account_namespace).uid
            )
        rbac = authz.Rbac.from_manifests(manifests)
        if namespace != SERVICE_NAMESPACE:
            rbac = rbac.moved(SERVICE_NAMESPACE, namespace)
        self.users[token] = user
        self.enforce_rbac(rbac, user.username)
        return token

    def inject(
        self,
        method: str,
        path_regex: str,
        status: int | None = 500,
        delay: float = 0.0,
        times: int | None = 1,
        drop_connection: bool = False,
        after_effect: bool = False,
        *,
        message: str | None = None,
        reason: str | None = None,
        retry_after: int = 1,
        hold: asyncio.Event | None = None,
        body_contains: str | None = None,
    ) -> Fault:
        """Make matching requests (``re.search`` on the path, ``"*"`` for any method) fail.

        ``status`` answers a metav1.Status error (a 429 with ``Retry-After``); ``status=None``
        with a ``delay`` only slows the request down; ``drop_connection`` cuts it without an
        answer; ``after_effect`` serves the request first and then fails, a write whose
        response was lost; ``hold`` stalls it until the event is set; ``times=None`` keeps
        the fault forever."""
        fault = Fault(
            method.upper(), re.compile(path_regex), status, times, message, hold=hold,
            body_contains=body_contains.encode() if body_contains else None, delay=delay,
            drop_connection=drop_connection, after_effect=after_effect, reason=reason,
            retry_after=retry_after,
        )  # fmt: skip
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def requests_to(self, method: str, path_regex: str) -> list[RecordedRequest]:
        pattern = re.compile(path_regex)
        return [q for q in self.requests if q.method == method.upper() and pattern.search(q.path)]

    def objects(self, res: Resource) -> dict[tuple[str, str], JsonDict]:
        """Every stored object of ``res`` by (namespace, name), namespace "" when cluster-scoped
        (copies: write with the store or the front door)."""
        return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                for o in self.store.list(res)}  # fmt: skip

    def appwrappers(self) -> dict[tuple[str, str], JsonDict]:
        return self.objects(APPWRAPPERS)

    def webhook_configurations(self) -> list[JsonDict]:
        """The stored Mutating- then ValidatingWebhookConfigurations."""
        return [o for res in WEBHOOK_CONFIGURATIONS for o in self.store.list(res)]

    def _sync_namespace(
        self, kind: str, res: Resource, obj: JsonDict, old: JsonDict | None
    ) -> None:
        if res == NAMESPACES and kind != "DELETED" and self.emulator is not None:
            self.emulator.set_namespace(obj["metadata"]["name"], obj["metadata"].get("labels"))

    # -- the front door ------------------------------------------------------------------------

    async def create(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        user: UserInfo = ADMIN,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> JsonDict:
        created, _ = await self._create(res, obj, namespace, user, dry_run, field_manager)
        return created

    async def update(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        user: UserInfo = ADMIN,
        dry_run: bool = False,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> JsonDict:
        updated, _ = await self._update(res, obj, user, dry_run, subresource, field_manager)
        return updated

    async def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        *,
        user: UserInfo = ADMIN,
        field_manager: str | None = None,
        subresource: str = "",
        force: bool = False,
        dry_run: bool = False,
    ) -> JsonDict:
        patched, _, _ = await self._patch(res, namespace, name, body, patch_type, user,
                                          field_manager, subresource, force, dry_run)  # fmt: skip
        return patched

    async def apply(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        user: UserInfo = ADMIN,
        force: bool = False,
        dry_run: bool = False,
    ) -> JsonDict:
        """Server-side apply (PATCH application/apply-patch+yaml); creates when absent."""
        meta = obj.get("metadata") or {}
        return await self.patch(res, meta.get("namespace"), str(meta.get("name", "")), obj,
                                patches.APPLY_PATCH, user=user, field_manager=field_manager,
                                force=force, dry_run=dry_run)  # fmt: skip

    async def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        user: UserInfo = ADMIN,
        propagation: str | None = "Background",
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> JsonDict | None:
        old = self.store.get(res, namespace, name)
        if old is None:
            raise ApiError(404, f'{res.qualified} "{name}" not found', "NotFound",
                           {"name": name, **({"group": res.group} if res.group else {}),
                            "kind": res.plural})  # fmt: skip
        await self._admit("DELETE", res, old, old, user, dry_run, None, "")
        return self.store.delete(res, namespace, name, propagation=propagation, uid=uid,
                                 resource_version=resource_version,
                                 grace_period_seconds=grace_period_seconds,
                                 dry_run=dry_run)  # fmt: skip

    async def _create(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        namespace: str | None,
        user: UserInfo,
        dry_run: bool,
        field_manager: str | None,
    ) -> tuple[JsonDict, tuple[str, ...]]:
        body = copy.deepcopy(dict(obj))
        meta = body.setdefault("metadata", {})
        if res.namespaced:
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")  # fmt: skip
            meta["namespace"] = namespace or meta.get("namespace")
        new = self.store.prepare_create(res, body, field_manager=field_manager)
        if self.appwrapper_operator_webhook and (res.group, res.kind) == APPWRAPPER_GROUP_KIND:
            # mappwrapper.kb.io (appwrapper_webhook.go:95-98), a mutating webhook: the
            # requester's name and uid, over whatever the object said.
            labels = new["metadata"].setdefault("labels", {})
            labels[APPWRAPPER_USER_LABEL] = sanitize_label(user.username)
            labels[APPWRAPPER_USERID_LABEL] = sanitize_label(user.uid)
        admitted, warnings = await self._admit("CREATE", res, new, None, user, dry_run,
                                               field_manager, "")  # fmt: skip
        return self.store.commit_create(res, admitted, dry_run=dry_run), warnings

    async def _update(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        user: UserInfo,
        dry_run: bool,
        subresource: str,
        field_manager: str | None,
    ) -> tuple[JsonDict, tuple[str, ...]]:
        new = self.store.prepare_update(res, obj, subresource=subresource,
                                        field_manager=field_manager)  # fmt: skip
        meta = new["metadata"]
        old = self.store.get(res, meta.get("namespace"), str(meta["name"]))
        admitted, warnings = await self._admit("UPDATE", res, new, old, user, dry_run,
                                               field_manager, subresource)  # fmt: skip
        stored = self.store.commit_update(res, admitted, subresource=subresource, dry_run=dry_run)
        return stored, warnings

    async def _patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        user: UserInfo,
        field_manager: str | None,
        subresource: str,
        force: bool,
        dry_run: bool,
    ) -> tuple[JsonDict, tuple[str, ...], bool]:
        """A patch is applied to the object as stored, admitted, and written; when someone else
        wrote the object meanwhile (admission awaits webhooks), it is applied again to the new
        version, as GuaranteedUpdate retries its tryUpdate (k8s.io/apiserver pkg/storage/etcd3/
        store.go). A patch that names a resourceVersion conflicts again, and that is answered."""
        for attempt in range(PATCH_ATTEMPTS):
            old, new = self.store.patched(res, namespace, name, body, patch_type,
                                          subresource=subresource, field_manager=field_manager,
                                          force=force)  # fmt: skip
            if old is None:  # an apply that creates
                admitted, warnings = await self._admit("CREATE", res, new, None, user, dry_run,
                                                       field_manager, "")  # fmt: skip
                return self.store.commit_create(res, admitted, dry_run=dry_run), warnings, True
            admitted, warnings = await self._admit("UPDATE", res, new, old, user, dry_run,
                                                   field_manager, subresource)  # fmt: skip
            try:
                stored = self.store.commit_update(res, admitted, subresource=subresource,
                                                  dry_run=dry_run)  # fmt: skip
            except ApiError as exc:
                if exc.status != 409 or attempt == PATCH_ATTEMPTS - 1:
                    raise
                continue
            return stored, warnings, False
        raise AssertionError("unreachable")

    async def _admit(
        self,
        operation: str,
        res: Resource,
        obj: JsonDict,
        old: JsonDict | None,
        user: UserInfo,
        dry_run: bool,
        field_manager: str | None,
        subresource: str,
    ) -> tuple[JsonDict, tuple[str, ...]]:
        """Mutating, name generation, the store's validation, validating: through the emulator
        when one is attached. The store's validation (the name on create, a CRD's schema) comes
        before the validating webhooks, as rest.BeforeCreate/BeforeUpdate come before
        createValidation/updateValidation (k8s.io/apiserver pkg/registry/generic/registry/
        store.go:569 and :575, :825 and :839-843 at 24a394e5): an invalid object is refused
        with its 422 and no validating webhook sees it.

        A ``status`` write is admitted as kube-apiserver admits any subresource (the status
        REST of registry/core/pod/storage/storage.go is a store like the main one): the
        review names ``subResource: status`` and only rules that name the subresource match
        (the emulator's rule matching), with the whole Pod, as its status strategy prepared
        it, as ``object`` and ``oldObject``. The in-process validators serve main resources
        only, as :meth:`add_validating_webhook` says."""
        creating = operation == "CREATE"

        def validate_object(new: JsonDict, before: JsonDict | None) -> JsonDict | None:
            try:
                self.store.validate(res, new, creating=creating, old=before)
            except ApiError as err:
                return err.status_json()
            return None

        if self.emulator is not None:
            result = await self.emulator.admit(
                operation, obj, old_object=old, user=user, dry_run=dry_run,
                resource=res.plural, namespaced=res.namespaced, field_manager=field_manager,
                validators=() if subresource else self.validators,
                mutators=() if subresource else self.mutators,
                validate_object=validate_object, subresource=subresource,
            )  # fmt: skip
            if not result.allowed:
                raise ApiError.from_status(result.status or {})
            return result.object, tuple(result.warnings)
        if subresource:
            return obj, ()
        admitted = copy.deepcopy(obj)
        for _name, mutate in self.mutators:
            mutated = mutate(self._request(operation, res, admitted, old, user, dry_run))
            if mutated is not None:
                admitted = copy.deepcopy(mutated)
        meta = admitted["metadata"]
        if creating and not meta.get("name") and meta.get("generateName"):
            meta["name"] = _generate_name(str(meta["generateName"]))
        if operation != "DELETE":
            self.store.validate(res, admitted, creating=creating, old=old)
        request = self._request(operation, res, admitted, old, user, dry_run)
        for name, deny in self.validators:
            message = deny(request)
            if message is not None:
                raise ApiError(400, f'admission webhook "{name}" denied the request: {message}')
        return admitted, ()

    @staticmethod
    def _request(
        operation: str,
        res: Resource,
        obj: JsonDict,
        old: JsonDict | None,
        user: UserInfo,
        dry_run: bool,
    ) -> JsonDict:
        """The AdmissionRequest an in-process webhook sees when no emulator is attached.

        ``name`` is the object's, the generated one included: validating admission gets the
        name from the object when the request had none (k8s.io/apiserver
        pkg/registry/rest/create.go:224-230 at 24a394e5)."""
        meta = obj.get("metadata") or {}
        gvk = {"group": res.group, "version": res.version, "kind": res.kind}
        gvr = {"group": res.group, "version": res.version, "resource": res.plural}
        request: JsonDict = {"uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr,
                             "requestKind": gvk, "requestResource": gvr,
                             "operation": operation, "userInfo": user.to_json(),
                             "object": None if operation == "DELETE" else copy.deepcopy(obj),
                             "oldObject": copy.deepcopy(old), "dryRun": dry_run}  # fmt: skip
        if meta.get("name"):
            request["name"] = meta["name"]
        if meta.get("namespace"):
            request["namespace"] = meta["namespace"]
        return request

    # -- HTTP ----------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Authenticate, record, inject faults, and answer every error as a metav1.Status.

        A body over 3 MiB is refused with 413 where the handler would read it, after
        authentication (k8s.io/apiserver pkg/endpoints/handlers/rest.go:372-389 and
        pkg/server/config.go:474 at 24a394e5)."""
        raw, too_large = await _read_limited(request)
        header = request.headers.get("Authorization", "")
        token = header[len("Bearer ") :] if header.startswith("Bearer ") else None
        user = self.users.get(token) if token else None
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        self.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                dict(request.query),
                body,
                user.username if user else "",
                request.headers.get("Impersonate-User"),
                request.headers.get("Accept", ""),
            )  # fmt: skip
        )
        if user is None:
            return _json(status_json(401, "Unauthorized", "Unauthorized"), 401)
        request[_USER] = _effective_user(request, user)
        compact = (
            json.dumps(body, separators=(",", ":")).encode()
            if self.faults and isinstance(body, dict)
            else b""
        )
        fault = next(
            (f for f in self.faults if f.matches(request.method, request.path, compact)), None
        )
        if fault is not None:
            fault.hits += 1
        if fault is not None and fault.hold is not None:
            await fault.hold.wait()
        elif fault is not None and not fault.after_effect:
            failure = await _fire(fault, request)
            if failure is not None:
                return failure
        refusal = self._authorize(request, request[_USER])
        if refusal is not None:
            return _status_response(refusal)
        if too_large:  # nothing was written, so an after-effect fault has nothing to follow
            return _json(request_entity_too_large(), 413)
        try:
            response = await handler(request)
        except ApiError as err:
            response = _status_response(err)
        except Exception as exc:  # a bug in the fake still answers like an apiserver
            response = _json(status_json(500, f"Internal error occurred: {exc!r}"), 500)
        if fault is not None and fault.hold is None and fault.after_effect:
            failure = await _fire(fault, request)
            if failure is not None:
                return failure
        return response

    def _authorize(self, request: web.Request, user: UserInfo) -> ApiError | None:
        """WithAuthorization (k8s.io/apiserver pkg/endpoints/filters/authorization.go): after
        authentication and impersonation, before the handler (so before the 413 of a body
        too large), for the users under RBAC."""
        if user.username not in self.under_rbac:
            return None
        attrs = authz.request_attributes(user, request.method, request.path, request.query)
        decision = authz.decide(attrs, self.access_rules, self.rbac, otherwise=False)
        return None if decision.allowed else authz.forbidden(attrs, decision.reason)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        parts = [p for p in path.split("/") if p]
        if path == "/version":
            return _json(self.version)
        if parts == ["api"]:
            return _json({"kind": "APIVersions", "versions": ["v1"],
                          "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                          "serverAddress": f"{self.host}:{self.port}"}]})  # fmt: skip
        if parts == ["apis"]:
            return _json(self._group_list())
        if parts[:2] == ["openapi", "v3"]:
            return _json(self._openapi_v3("/".join(parts[2:])))
        if parts == ["openapi", "v2"]:
            return self._openapi_v2(request)
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _generic_not_found()
        if not rest:
            return _json(self._resource_list(group, version))
        if group == AUTHENTICATION and version == "v1" and rest == ["selfsubjectreviews"]:
            if request.method != "POST":
                raise _generic_not_found()
            return self._self_subject_review(request)
        if group == AUTHENTICATION and version == "v1" and rest == ["tokenreviews"]:
            if request.method != "POST":
                raise _generic_not_found()
            return await self._token_review(request)
        if (
            group == AUTHORIZATION
            and version == "v1"
            and rest in (["subjectaccessreviews"], ["selfsubjectaccessreviews"])
        ):
            if request.method != "POST":
                raise _generic_not_found()
            return await self._access_review(request, rest[0])
        target = self._target(group, version, rest)
        return await self._serve(request, target)

    def _served(self) -> list[Resource]:
        return [r for r in self.store.resources]

    def _target(self, group: str, version: str, rest: list[str]) -> _Target:
        served = {(r.group, r.version, r.plural): r for r in self._served()}

        def resource(plural: str) -> Resource:
            found = served.get((group, version, plural))
            if found is None:
                raise _generic_not_found()
            return found

        core_ns = group == "" and rest[0] == "namespaces"
        if core_ns and len(rest) >= 3 and (group, version, rest[2]) in served:
            res = resource(rest[2])
            if not res.namespaced:
                raise _generic_not_found()
            tail = rest[3:]
            if len(tail) > 2:
                raise _generic_not_found()
            return _Target(
                res, rest[1], tail[0] if tail else None, tail[1] if len(tail) > 1 else ""
            )
        if not core_ns and rest[0] == "namespaces" and len(rest) >= 3:
            res = resource(rest[2])
            tail = rest[3:]
            if not res.namespaced or len(tail) > 2:
                raise _generic_not_found()
            return _Target(
                res, rest[1], tail[0] if tail else None, tail[1] if len(tail) > 1 else ""
            )
        res = resource(rest[0])
        tail = rest[1:]
        if len(tail) > 2 or (tail and res.namespaced):
            raise _generic_not_found()
        return _Target(res, None, tail[0] if tail else None, tail[1] if len(tail) > 1 else "")

    async def _serve(self, request: web.Request, target: _Target) -> web.StreamResponse:
        res, method, query = target.res, request.method, request.query
        user: UserInfo = request[_USER]
        dry_run = self._dry_run(request)
        manager = query.get("fieldManager") or _manager_from_agent(request)
        if res == PODS and target.subresource == "binding" and target.name is not None:
            if method != "POST":
                raise self._method_not_allowed(method)
            return await self._bind(request, target, user, dry_run)
        if res == PODS and target.subresource == "log" and target.name is not None:
            if method != "GET":
                raise self._method_not_allowed(method)
            return self._log(target, request)
        if target.subresource and (target.subresource != "status" or not res.status_subresource):
            raise _generic_not_found()
        if target.name is None:
            if method == "GET":
                if _truthy(query.get("watch")):
                    return await self._watch(request, target)
                return self._list(target, request)
            if method == "POST":
                if res.namespaced and target.namespace is None:
                    # Across namespaces only LIST and WATCHLIST are routed (k8s.io/apiserver
                    # pkg/endpoints/installer.go, "list or post across namespace"): a create
                    # of a namespaced kind names its namespace in the path.
                    raise self._method_not_allowed(method)
                body = await self._body(request)
                created, warnings = await self._create(res, body, target.namespace, user,
                                                       dry_run, manager)  # fmt: skip
                return _json(created, 201, warnings)
            raise self._method_not_allowed(method)
        name = target.name
        if method == "GET":
            # The media type is negotiated first, the object read, then transformed (a
            # metadata list of one object is refused only once it is found).
            shape = self._shape(request)
            found = self.store.get(res, target.namespace, name)
            if found is None:
                raise ApiError(404, f'{res.qualified} "{name}" not found', "NotFound",
                               {"name": name, **({"group": res.group} if res.group else {}),
                                "kind": res.plural})  # fmt: skip
            if shape == PARTIAL_LIST:
                if res.custom:
                    # kube-apiserver 1.35 answers a custom resource asked as a list with an
                    # internal error that has no reason.
                    raise ApiError(500, "content is not a list", "")
                raise _not_acceptable("you requested PartialObjectMetadataList, but the requested "
                                      f"object is not a list ({_go_type(res)})")  # fmt: skip
            return _json(as_partial(found) if shape == PARTIAL else found)
        if method == "PUT":
            body = await self._body(request)
            meta = body.setdefault("metadata", {})
            if meta.get("name") and meta["name"] != name:
                raise bad_request(f"the name of the object ({meta['name']}) does not match the "
                                  f"name on the URL ({name})")  # fmt: skip
            if res.namespaced:
                if meta.get("namespace") and meta["namespace"] != target.namespace:
                    raise bad_request("the namespace of the provided object does not match "
                                      "the namespace sent on the request")  # fmt: skip
                meta["namespace"] = target.namespace
            meta["name"] = name
            updated, warnings = await self._update(res, body, user, dry_run, target.subresource,
                                                   manager)  # fmt: skip
            return _json(updated, 200, warnings)
        if method == "PATCH":
            patch_type = request.content_type
            raw = await request.read()
            body: Any = raw.decode() if patch_type == patches.APPLY_PATCH else _decode(raw)
            field_manager = query.get("fieldManager")
            if patch_type != patches.APPLY_PATCH:
                field_manager = field_manager or manager
            patched, warnings, created = await self._patch(
                res, target.namespace, name, body, patch_type, user, field_manager,
                target.subresource, _truthy(query.get("force")), dry_run,
            )  # fmt: skip
            return _json(patched, 201 if created else 200, warnings)
        if method == "DELETE" and not target.subresource:
            return await self._delete(request, target, user, dry_run)
        raise self._method_not_allowed(method)

    async def _bind(
        self, request: web.Request, target: _Target, user: UserInfo, dry_run: bool
    ) -> web.Response:
        """POST pods/{name}/binding: a Binding whose name is the pod's; the answer is a Status
        Success with 201 (BindingREST.Create)."""
        body = await self._body(request)
        meta = body.get("metadata") or {}
        node = str((body.get("target") or {}).get("name") or "")
        if meta.get("name") != target.name:
            raise bad_request("name in URL does not match name in Binding object")
        if not node:
            raise ApiError(422, f'Binding.core "{target.name}" is invalid: target.name: '
                                "Required value", "Invalid", {})  # fmt: skip
        await self.bind(str(target.namespace), str(target.name), node, user=user,
                        uid=meta.get("uid"), resource_version=meta.get("resourceVersion"),
                        annotations=meta.get("annotations"), dry_run=dry_run)  # fmt: skip
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success"}, 201)  # fmt: skip

    async def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        user: UserInfo = ADMIN,
        uid: str | None = None,
        resource_version: str | None = None,
        annotations: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> JsonDict:
        """Bind a pod to a node as kube-scheduler's DefaultBinder does (a Binding posted to
        pods/binding); no webhook of this cluster matches the subresource. Returns the pod."""
        del user  # authorization is not modelled for subresources
        return self.store.bind(namespace, name, node, uid=uid, resource_version=resource_version,
                               annotations=annotations, dry_run=dry_run)  # fmt: skip

    def _log(self, target: _Target, request: web.Request) -> web.Response:
        """GET pods/{name}/log, answered from the kubelet as kube-apiserver proxies it
        (pkg/registry/core/pod/rest/log.go); a container that has not started is 400, with
        the message kube-apiserver gives (pkg/registry/core/pod/strategy.go LogLocation)."""
        name, namespace = str(target.name), target.namespace
        pod = self.store.get(PODS, namespace, name)
        if pod is None:
            raise ApiError(404, f'pods "{name}" not found', "NotFound",
                           {"name": name, "kind": "pods"})  # fmt: skip
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = request.query.get("container")
        if container is None and len(containers) > 1:
            raise bad_request(f"a container name must be specified for pod {name}, choose one "
                              f"of: [{' '.join(map(str, containers))}]")  # fmt: skip
        if container is not None and container not in containers:
            raise bad_request(f"container {container} is not valid for pod {name}")
        text = self.pod_logs(pod, container) if self.pod_logs is not None else None
        if text is None:
            shown = container or containers[0]
            raise bad_request(f'container "{shown}" in pod "{name}" is waiting to start: '
                              "ContainerCreating")  # fmt: skip
        return web.Response(text=text, content_type="text/plain")

    @staticmethod
    def _method_not_allowed(method: str) -> ApiError:
        return ApiError(405, "the server does not allow this method on the requested resource "
                             f"({method})", "MethodNotAllowed", {})  # fmt: skip

    @staticmethod
    def _shape(request: web.Request) -> str:
        """The answer's shape the Accept header asks for (``_wanted_shape``); 406 when the
        server can produce none of the media types it names."""
        shape = _wanted_shape(request.headers.get("Accept", ""))
        if shape is None:
            raise _not_acceptable(NOT_ACCEPTABLE_MEDIA)
        return shape

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        values = request.query.getall("dryRun", [])
        for value in values:
            if value != "All":
                raise bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
        return bool(values)

    @staticmethod
    async def _body(request: web.Request) -> JsonDict:
        if request.content_type == protobuf.MEDIA_TYPE:
            try:
                return protobuf.decode(await request.read())
            except protobuf.Unsupported:
                raise ApiError(415, "the body of the request was in an unknown format - accepted "
                               "media types include: application/json, application/yaml",
                               "UnsupportedMediaType", {}) from None  # fmt: skip
        body = _decode(await request.read())
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        return body

    def _list(self, target: _Target, request: web.Request) -> web.Response:
        """A LIST, paginated when ``limit`` is given, as the etcd3 store's GetList pages it
        (k8s.io/apiserver storage/etcd3/store.go GetList; the token as storage/continue.go
        encodes it: the list's resourceVersion and the key to start after). Items come in key
        order (namespace/name), each page read from its continue key on (``Store.list_page``);
        ``metadata.continue`` is set while more match, and ``remainingItemCount`` with it when
        no selector was given. A continue token whose resourceVersion was compacted away is 410 Expired
        (etcd3/errors.go ``continueExpired``). Unlike etcd, later pages are read from the
        current objects, not a snapshot at the token's version: a watch from the list's
        resourceVersion delivers every change in between either way."""
        query = request.query
        shape = self._shape(request)
        if shape == PARTIAL:
            raise _not_acceptable("you requested PartialObjectMetadata, but the requested object "
                                  f"is a list ({_go_type(target.res, listed=True)})")  # fmt: skip
        limit = _int_query(query.get("limit"), "limit")
        version, after = self.store.resource_version, None
        if query.get("continue"):
            version, after = _decode_continue(query["continue"])
            if not self.store.retains(int(version)):
                raise ApiError(410, CONTINUE_EXPIRED, "Expired")
        # The stored objects themselves: encoded below, before any other request runs.
        items, more, remaining = self.store.list_page(
            target.res, target.namespace, labels=query.get("labelSelector"),
            fields=query.get("fieldSelector"), after=after, limit=limit, copies=False,
        )  # fmt: skip
        metadata: JsonDict = {"resourceVersion": version}
        if more:
            metadata["continue"] = _encode_continue(version, _list_key(items[-1]))
            if remaining is not None:
                metadata["remainingItemCount"] = remaining
        if shape == PARTIAL_LIST:
            return _json({"kind": PARTIAL_LIST, "apiVersion": META_V1, "metadata": metadata,
                          "items": [as_partial(item) for item in items]})  # fmt: skip
        if not target.res.custom:
            # A built-in list is a typed Go list ([]Pod): its items carry no kind of their
            # own. A custom resource's (UnstructuredList) items do.
            items = [{k: v for k, v in i.items() if k not in ("kind", "apiVersion")} for i in items]
        return _json(
            {
                "kind": target.res.list_kind,
                "apiVersion": target.res.api_version,
                "metadata": metadata,
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        """A chunked stream of watch events; a too-old resourceVersion is an ERROR event with
        a 410 Status on a 200 response, as the cacher's errWatcher sends it
        (storage/cacher/cacher.go:583-589, :1400)."""
        query = request.query
        # A watch's objects are transformed one by one (watchEmbeddedEncoder.doEncode in
        # response.go), so a watch asks as=PartialObjectMetadata, as the client-go metadata
        # client does; asked as a list, each object fails the transform and doEncode sends it
        # whole.
        partial = self._shape(request) == PARTIAL
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        initial = _truthy(query.get("sendInitialEvents"))
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        error: ApiError | None = None
        stream = None
        try:
            stream = self.store.watch(
                target.res, target.namespace, resource_version=query.get("resourceVersion"),
                labels=query.get("labelSelector"), fields=query.get("fieldSelector"),
                bookmark_interval=self.bookmark_interval if bookmarks else None,
                initial_events_end=initial and bookmarks,
            )  # fmt: skip
        except ApiError as err:
            if err.status != 410:
                raise
            error = err
        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        task = asyncio.current_task()
        if task is not None:
            self._streams[task] = target.res.plural
        try:
            if error is not None:
                await _send(response, "ERROR", error.status_json())
                return response
            assert stream is not None
            async with asyncio.timeout(timeout):
                async for event_type, obj in stream:
                    await _send(response, event_type, as_partial(obj) if partial else obj)
        except (TimeoutError, ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._streams.pop(task, None)
            if stream is not None:
                await stream.aclose()
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await response.write_eof()
        return response

    async def _delete(
        self, request: web.Request, target: _Target, user: UserInfo, dry_run: bool
    ) -> web.Response:
        raw = await request.read()
        options = _decode(raw) if raw else {}
        if not isinstance(options, dict):
            raise bad_request("the body of the request was in an unknown format")
        if options.get("dryRun"):
            dry_run = True
        query = request.query
        propagation = options.get("propagationPolicy") or query.get("propagationPolicy")
        if propagation is None and options.get("orphanDependents") is not None:
            propagation = "Orphan" if options["orphanDependents"] else "Background"
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        preconditions = options.get("preconditions") or {}
        name = str(target.name)
        before = self.store.get(target.res, target.namespace, name)
        result = await self.delete(
            target.res, target.namespace, name, user=user, propagation=propagation,
            uid=preconditions.get("uid"), resource_version=preconditions.get("resourceVersion"),
            grace_period_seconds=int(grace) if grace is not None else None, dry_run=dry_run,
        )  # fmt: skip
        still_there = self.store.get(target.res, target.namespace, name) is not None
        if still_there or target.res in _RETURNS_DELETED or result is None:
            return _json(result)
        details = {"name": name, "group": target.res.group, "kind": target.res.plural,
                   "uid": (before or {}).get("metadata", {}).get("uid", "")}  # fmt: skip
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success", "details": details})  # fmt: skip

    # -- discovery -----------------------------------------------------------------------------

    def _group_list(self) -> JsonDict:
        versions: dict[str, list[str]] = {}
        for res in self._served():
            if res.group and res.version not in versions.setdefault(res.group, []):
                versions[res.group].append(res.version)
        versions.setdefault(AUTHORIZATION, ["v1"])
        groups = []
        for group, vs in versions.items():
            entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in vs]
            groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str) -> JsonDict:
        listed: list[JsonDict] = []
        for res in self._served():
            if (res.group, res.version) != (group, version):
                continue
            entry = {"name": res.plural, "singularName": res.singular, "namespaced": res.namespaced,
                     "kind": res.kind, "verbs": ["create", "delete", "get", "list", "patch",
                                                 "update", "watch"]}  # fmt: skip
            if res.short_names:
                entry["shortNames"] = list(res.short_names)
            listed.append(entry)
            if res.status_subresource:
                listed.append({"name": f"{res.plural}/status", "singularName": "",
                               "namespaced": res.namespaced, "kind": res.kind,
                               "verbs": ["get", "patch", "update"]})  # fmt: skip
        if group == AUTHORIZATION and version == "v1":
            for plural, kind in (("subjectaccessreviews", "SubjectAccessReview"),
                                 ("selfsubjectaccessreviews", "SelfSubjectAccessReview")):  # fmt: skip
                listed.append({"name": plural, "singularName": "", "namespaced": False,
                               "kind": kind, "verbs": ["create"]})  # fmt: skip
        if not listed:
            raise _generic_not_found()
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": listed}  # fmt: skip

    def _openapi_v3(self, group_version: str) -> JsonDict:
        """The OpenAPI v3 discovery document (``/openapi/v3``: each group-version and the URL of
        its document) and one group-version's document, as kube-apiserver serves them
        (k8s.io/kube-openapi pkg/handler3/handler.go). Each document names its paths and, on
        every PATCH, the group-version-kind and the ``fieldValidation`` query parameter:
        kubectl looks for them to decide that the server validates fields itself
        (k8s.io/kubectl pkg/util/openapi and cli-runtime resource/query_param_verifier_v3.go
        supportsQueryParamV3) instead of downloading the OpenAPI v2 schema to validate in the
        client. Schemas are not served: nothing in this cluster reads them."""
        served = self._served()
        prefixes = sorted({f"api/{r.version}" if not r.group else f"apis/{r.group}/{r.version}"
                           for r in served})  # fmt: skip
        if not group_version:
            return {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash=fake"}
                              for p in prefixes}}  # fmt: skip
        if group_version not in prefixes:
            raise _generic_not_found()
        paths: JsonDict = {}
        for res in served:
            prefix = f"api/{res.version}" if not res.group else f"apis/{res.group}/{res.version}"
            if prefix != group_version:
                continue
            scope = "/namespaces/{namespace}" if res.namespaced else ""
            gvk = {"group": res.group, "version": res.version, "kind": res.kind}
            query = [{"name": n, "in": "query", "schema": {"type": "string"}}
                     for n in ("dryRun", "fieldManager", "fieldValidation", "force")]  # fmt: skip
            paths[f"/{prefix}{scope}/{res.plural}/{{name}}"] = {
                "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get"},
                "patch": {"x-kubernetes-group-version-kind": gvk,
                          "x-kubernetes-action": "patch", "parameters": query},
            }  # fmt: skip
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0-fake"},
                "paths": paths, "components": {"schemas": {}}}  # fmt: skip

    def _openapi_v2(self, request: web.Request) -> web.Response:
        """``/openapi/v2``: each resource's PATCH operation with its group-version-kind and
        ``fieldValidation``, in gnostic's protobuf when asked for it (``protobuf.openapi_v2``,
        what kubectl asks for), else as JSON; the protobuf answer's media type is the one
        kube-openapi sets (pkg/handler/handler.go: subTypeProtobuf)."""
        patches = []
        for res in self._served():
            prefix = f"/api/{res.version}" if not res.group else f"/apis/{res.group}/{res.version}"
            scope = "/namespaces/{namespace}" if res.namespaced else ""
            gvk = {"group": res.group, "version": res.version, "kind": res.kind}
            patches.append((f"{prefix}{scope}/{res.plural}/{{name}}", gvk,
                            ["dryRun", "fieldManager", "fieldValidation", "force"]))  # fmt: skip
        if "protobuf" in request.headers.get("Accept", ""):
            return web.Response(
                body=protobuf.openapi_v2(patches),
                content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            )
        paths = {path: {"patch": {"x-kubernetes-group-version-kind": gvk, "parameters": [
                    {"name": p, "in": "query", "type": "string"} for p in params]}}
                 for path, gvk, params in patches}  # fmt: skip
        return _json({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0-fake"},
                      "paths": paths})  # fmt: skip

    # -- SelfSubjectReview, SubjectAccessReview ------------------------------------------------

    async def _token_review(self, request: web.Request) -> web.Response:
        """authentication/v1 TokenReview: the token is authenticated as a request bearing it
        would be (the same token table), as kube-apiserver's TokenReview REST runs its own
        authenticator (pkg/registry/authentication/tokenreview/storage.go Create)."""
        body = await self._body(request)
        self.token_reviews += 1
        token = str((body.get("spec") or {}).get("token") or "")
        who = self.users.get(token) if token else None
        status: JsonDict = {"authenticated": False}
        if who is not None:
            user: JsonDict = {"username": who.username, "groups": list(who.groups)}
            if who.uid:
                user["uid"] = who.uid
            status = {"authenticated": True, "user": user}
        return _json({"apiVersion": f"{AUTHENTICATION}/v1", "kind": "TokenReview",
                      "metadata": {"creationTimestamp": None}, "spec": {"token": token},
                      "status": status}, 201)  # fmt: skip

    @staticmethod
    def _self_subject_review(request: web.Request) -> web.Response:
        """The caller's own user info (authentication/v1 SelfSubjectReview)."""
        me: UserInfo = request[_USER]
        user: JsonDict = {"username": me.username, "groups": list(me.groups)}
        if me.uid:
            user["uid"] = me.uid
        return _json({"apiVersion": f"{AUTHENTICATION}/v1", "kind": "SelfSubjectReview",
                      "metadata": {"creationTimestamp": None},
                      "status": {"userInfo": user}}, 201)  # fmt: skip

    async def _access_review(self, request: web.Request, plural: str) -> web.Response:
        body = await self._body(request)
        spec = dict(body.get("spec") or {})
        if plural == "selfsubjectaccessreviews":
            me: UserInfo = request[_USER]
            spec.update(user=me.username, groups=list(me.groups), uid=me.uid)
        user, groups = str(spec.get("user") or ""), list(spec.get("groups") or [])
        attrs = spec.get("resourceAttributes")
        if not user and not groups:
            raise ApiError(422, 'SubjectAccessReview.authorization.k8s.io "" is invalid: '
                                'spec.user: Invalid value: "": at least one of user or group '
                                "must be specified", "Invalid")  # fmt: skip
        if (attrs is None) == (spec.get("nonResourceAttributes") is None):
            raise ApiError(422, 'SubjectAccessReview.authorization.k8s.io "" is invalid: '
                                "spec.resourceAttributes: Invalid value: exactly one of "
                                "nonResourceAttributes or resourceAttributes must be "
                                "specified", "Invalid")  # fmt: skip
        self.sars.append(copy.deepcopy(body))
        attrs = attrs if attrs is not None else spec.get("nonResourceAttributes") or {}
        # A user the cluster holds to RBAC is allowed only what RBAC (or a rule) grants.
        otherwise = self.default_allow and user not in self.under_rbac
        decision = authz.decide(authz.Attributes.of_review(user, groups, attrs),
                                self.access_rules, self.rbac, otherwise=otherwise)  # fmt: skip
        status: JsonDict = {"allowed": decision.allowed}
        if decision.denied:
            status["denied"] = True
        if decision.reason:
            status["reason"] = decision.reason
        elif not decision.allowed and not decision.denied:
            # An explicit denial (a webhook authorizer's) says what it says, even nothing.
            status["reason"] = _no_rule(user, attrs)
        kind = "SelfSubjectAccessReview" if plural.startswith("self") else "SubjectAccessReview"
        review = {**copy.deepcopy(body), "apiVersion": f"{AUTHORIZATION}/v1", "kind": kind}
        review.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        review["spec"] = {**(body.get("spec") or {})}
        review["status"] = status
        return _json(review, 201)


def for_autowrap(**options: Any) -> FakeCluster:
    """A fake cluster (not started) as autowrap's redirect mode meets it: the kubeconfig's token
    is autowrap's service account, whose requests RBAC authorizes with the grants of
    deploy/base, the authorizer denies what no rule allows (as RBAC does), and autowrap's
    namespace exists (its install creates it)."""
    users = dict(options.pop("users", {}))
    fake = FakeCluster(users=users, default_allow=options.pop("default_allow", False), **options)
    fake.authorize_autowrap(DEFAULT_TOKEN)
    fake.add_namespace(SERVICE_NAMESPACE)
    return fake


def _no_rule(user: str, attrs: Mapping[str, Any]) -> str:
    if "path" in attrs:
        return f'no rule allows user "{user}" to {attrs.get("verb", "")} {attrs["path"]}'
    resource = str(attrs.get("resource", ""))
    if attrs.get("group"):
        resource = f"{resource}.{attrs['group']}"
    return (f'no rule allows user "{user}" to {attrs.get("verb", "")} {resource} in namespace '
            f'"{attrs.get("namespace", "")}"')  # fmt: skip


def _effective_user(request: web.Request, user: UserInfo) -> UserInfo:
    """The user a request acts as: the Impersonate-User, -Uid, -Group and -Extra-* headers
    replace the authenticated one (k8s.io/apiserver pkg/endpoints/filters/impersonation.go
    WithImpersonation at 24a394e5); that the caller may impersonate is not checked."""
    name = request.headers.get("Impersonate-User")
    if not name:
        return user
    extra: dict[str, list[str]] = {}
    for key, value in request.headers.items():
        if key.lower().startswith("impersonate-extra-"):
            extra.setdefault(key[len("impersonate-extra-") :].lower(), []).append(value)
    groups = list(request.headers.getall("Impersonate-Group", []))
    if not groups and name.startswith("system:serviceaccount:"):
        # A ServiceAccount impersonated without groups gets its own (impersonation.go).
        namespace = name.split(":")[2]
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    if name != "system:anonymous" and "system:authenticated" not in groups:
        groups.append("system:authenticated")
    return UserInfo(
        username=name,
        uid=request.headers.get("Impersonate-Uid", ""),
        groups=tuple(groups),
        extra=extra,
    )


async def _fire(fault: Fault, request: web.Request) -> web.StreamResponse | None:
    """What a fault does to a request: slow it, cut the connection, or answer its Status. A
    429 carries Retry-After and details.retryAfterSeconds, as the max-in-flight and priority
    and fairness filters answer (k8s.io/apiserver pkg/server/filters/maxinflight.go
    tooManyRequests, pkg/endpoints/handlers/responsewriters/errors.go; apimachinery
    errors.NewTooManyRequests)."""
    if fault.delay:
        await asyncio.sleep(fault.delay)
    if fault.drop_connection:
        if request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError
    if fault.status is None:
        return None
    code = fault.status
    details: JsonDict = {}
    if code == 429:
        details["retryAfterSeconds"] = fault.retry_after
    message = fault.message or _DEFAULT_FAULT_MESSAGES.get(code, f"injected fault {code}")
    response = _json(status_json(code, message, fault.reason, details), code)
    if code == 429:
        response.headers["Retry-After"] = str(fault.retry_after)
    return response


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise bad_request(f"the body of the request was in an unknown format: {exc}") from exc


def _manager_from_agent(request: web.Request) -> str:
    """managerOrUserAgent (handlers/create.go): the User-Agent up to its first "/"."""
    agent = request.headers.get("User-Agent", "")
    return agent.split("/", 1)[0] or "unknown"


async def _send(response: web.StreamResponse, event_type: str, obj: JsonDict) -> None:
    line = json.dumps({"type": event_type, "object": obj}) + "\n"
    await response.write(line.encode())


__all__ = [
    "ADMIN",
    "ADMIN_TOKEN",
    "AUTOWRAP_TOKEN",
    "Fault",
    "FakeCluster",
    "for_autowrap",
    "managed",
]
