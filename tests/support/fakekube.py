"""A small, stateful fake of the Kubernetes API for the calls autowrap itself makes.

autowrap talks to the cluster through the official ``kubernetes`` client: it creates
AppWrappers (optionally server-side dry-run), asks SubjectAccessReviews on behalf of the
requesting user, and looks up Kueue LocalQueues. This fake serves exactly those endpoints
over plain HTTP on loopback, answers errors with real metav1.Status bodies (so the client
raises the same ``ApiException`` it would against kube-apiserver), and can inject faults,
including the nasty one where the write happened but the response never arrived.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import itertools
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from aiohttp import web

from tests.support.apiserver import (
    MAX_REQUEST_BODY_BYTES,
    METADATA_NAME_LABEL,
    ApiserverEmulator,
    JsonDict,
    UserInfo,
    generate_name,
    request_entity_too_large,
    rfc3339_now,
    selector_matches,
    status_json,
)
from webhook.names import (
    APPWRAPPER_GROUP,
    APPWRAPPER_PLURAL,
    APPWRAPPER_USER_LABEL,
    APPWRAPPER_USERID_LABEL,
    APPWRAPPER_VERSION,
    SERVICE_NAME,
    SERVICE_NAMESPACE,
)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta1"
AUTHORIZATION_GROUP = "authorization.k8s.io"
APPWRAPPER_API_VERSION = f"{APPWRAPPER_GROUP}/{APPWRAPPER_VERSION}"
APPWRAPPER_KIND = "AppWrapper"
DEFAULT_TOKEN = "fake-token"
NOT_FOUND_MESSAGE = "the server could not find the requested resource"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")

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

AppWrapperCreateHook = Callable[[JsonDict, bool, UserInfo], Awaitable[JsonDict]]


def sanitize_label(value: str) -> str:
    """The AppWrapper operator's SanitizeLabel (pkg/utils/utils.go:624-637 at b47a99ee): the
    first 63 bytes, ``[^-_.\\w]`` (ASCII ``\\w``, as Go's regexp) to ``_``, ``-_.`` trimmed."""
    head = value.encode()[:63].decode("utf-8", "replace")
    return re.sub(r"[^-_.\w]", "_", head, flags=re.ASCII).strip("-_.")


def service_account_user(name: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE) -> UserInfo:
    """The identity a pod's service-account token authenticates as."""
    return UserInfo(
        username=f"system:serviceaccount:{namespace}:{name}",
        uid=str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.{namespace}")),
        groups=(
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ),
    )


ADMISSION_GROUP = "admissionregistration.k8s.io"


def write_kubeconfig(path: Path, server: str, token: str, namespace: str = "default") -> Path:
    """A kubeconfig with bearer-token auth for a fake API at ``server``, read by
    ``kubernetes(.aio).config.load_kube_config``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake-user", "user": {"token": token}}],
        "contexts": [
            {
                "name": "fake",
                "context": {"cluster": "fake", "user": "fake-user", "namespace": namespace},
            }
        ],
        "current-context": "fake",
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class KubeApiError(Exception):
    """Raised by hooks to answer with a metav1.Status, as kube-apiserver would."""

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: JsonDict | None = None
    ) -> None:
        super().__init__(message)
        self.status = status_json(code, message, reason, details)

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> KubeApiError:
        return cls(
            int(status.get("code", 500)),
            str(status.get("message", "")),
            str(status.get("reason", "")),
            status.get("details"),
        )

    @property
    def code(self) -> int:
        return int(self.status["code"])


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received, for assertions (bodies are decoded JSON or None)."""

    method: str
    path: str
    query: Mapping[str, str]
    body: Any
    user: str
    impersonated_user: str | None


@dataclass
class Fault:
    """An injected failure; ``hits`` counts how often it fired."""

    method: str
    path_regex: re.Pattern[str]
    status: int | None
    delay: float
    times: int | None
    drop_connection: bool
    after_effect: bool
    message: str | None
    reason: str | None
    retry_after: int
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method != "*" and self.method.upper() != method.upper():
            return False
        return self.path_regex.search(path) is not None


@dataclass(frozen=True)
class AccessRule:
    """One SubjectAccessReview rule; ``None`` subjects and ``"*"`` attributes match all."""

    allowed: bool
    user: str | None
    in_group: str | None
    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    subresource: str
    reason: str

    def matches(self, user: str, groups: list[str], attrs: Mapping[str, Any]) -> bool:
        if self.user is not None and self.user != user:
            return False
        if self.in_group is not None and self.in_group not in groups:
            return False
        wanted = {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "subresource": self.subresource,
        }
        return all(v == "*" or v == str(attrs.get(k, "") or "") for k, v in wanted.items())


@dataclass
class _Listener:
    runner: web.AppRunner
    site: web.TCPSite


def parse_label_selector(text: str) -> JsonDict:
    """The string form of a label selector (``a=b,c!=d,e,!f,g in (x,y)``) as a LabelSelector."""
    match_labels: dict[str, str] = {}
    expressions: list[JsonDict] = []
    for term in re.split(r",(?![^()]*\))", text.strip()):
        term = term.strip()
        if not term:
            continue
        set_based = re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term)
        if set_based:
            key, op, values = set_based.groups()
            expressions.append(
                {
                    "key": key,
                    "operator": "In" if op == "in" else "NotIn",
                    "values": [v.strip() for v in values.split(",") if v.strip()],
                }
            )
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            expressions.append({"key": key, "operator": "NotIn", "values": [value]})
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            match_labels[key] = value
        elif term.startswith("!"):
            expressions.append({"key": term[1:].strip(), "operator": "DoesNotExist"})
        else:
            expressions.append({"key": term, "operator": "Exists"})
    return {"matchLabels": match_labels, "matchExpressions": expressions}


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(data), content_type="application/json", headers=headers
    )


def _status_response(status: JsonDict, headers: Mapping[str, str] | None = None) -> web.Response:
    return _json(status, int(status["code"]), headers)


def _not_found(resource: str, group: str, name: str) -> KubeApiError:
    qualified = f"{resource}.{group}" if group else resource
    details: JsonDict = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return KubeApiError(404, f'{qualified} "{name}" not found', "NotFound", details)


def _generic_not_found() -> KubeApiError:
    return KubeApiError(404, NOT_FOUND_MESSAGE, "NotFound", {})


class FakeKube:
    """The fake API server. Start it with ``await fake.start()``; state survives restarts."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str = DEFAULT_TOKEN,
        user: UserInfo | None = None,
        require_namespaces: bool = False,
        keep_requests: int | None = None,
    ) -> None:
        """``keep_requests`` bounds the request log to the newest N (for long soaks)."""
        self.host = host
        self.port = port
        self.token = token
        self.user = user or service_account_user()
        self.require_namespaces = require_namespaces
        self.kueue_installed = True
        self.appwrappers: dict[tuple[str, str], JsonDict] = {}
        self.local_queues: dict[tuple[str, str], JsonDict] = {}
        self.namespaces: dict[str, JsonDict] = {}
        self.secrets: dict[tuple[str, str], JsonDict] = {}
        self.webhook_configurations: dict[tuple[str, str], JsonDict] = {}
        self.access_rules: list[AccessRule] = []
        self.sars: list[JsonDict] = []
        # TokenReview: bearer token -> the user it authenticates as; (user, path): the
        # non-resource URLs a SubjectAccessReview allows (``get`` only).
        self.tokens: dict[str, UserInfo] = {}
        self.url_grants: set[tuple[str, str]] = set()
        self.token_reviews = 0
        self.requests: collections.deque[RecordedRequest] = collections.deque(maxlen=keep_requests)
        self.appwrappers_created = 0
        self.faults: list[Fault] = []
        self.on_appwrapper_create: AppWrapperCreateHook | None = None
        # The AppWrapper operator's mutating webhook is installed: every AppWrapper create gets
        # the requester's user and userid labels. False: a cluster where only Kueue's is.
        self.appwrapper_operator_webhook = True
        # Server-side dry-run creates of what an AppWrapper would create (a Volcano Job, a Pod,
        # a Service): ``component_refusal(obj)`` answers a refusal message (as Volcano's
        # webhook or a policy engine would) or None.
        self.component_refusal: Callable[[JsonDict], str | None] = lambda obj: None
        self.component_dry_runs: list[JsonDict] = []
        self._listener: _Listener | None = None
        self._users: dict[int, UserInfo] = {}
        self._resource_versions = itertools.count(1000)

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._listener is not None

    async def start(self) -> None:
        """Listen (again) on the same port, so a restarted fake looks like a recovered API."""
        if self._listener is not None:
            return
        runner = web.AppRunner(self._build_app(), shutdown_timeout=0.5, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.port = int(runner.addresses[0][1])
        self._listener = _Listener(runner, site)

    async def stop(self) -> None:
        """Stop listening and drop open connections; later connects are refused."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.runner.cleanup()

    async def refuse(self) -> None:
        """Model an unreachable API server (connection refused) while keeping all state."""
        await self.stop()

    async def __aenter__(self) -> FakeKube:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig with token auth for ``kubernetes.config.load_kube_config``."""
        return write_kubeconfig(path, self.url, self.token, namespace)

    # -- state set-up --------------------------------------------------------------------------

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> JsonDict:
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": self._system_meta(
                {"name": name, "labels": {**(labels or {}), METADATA_NAME_LABEL: name}}
            ),
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self.namespaces[name] = obj
        return copy.deepcopy(obj)

    def add_local_queue(
        self, namespace: str, name: str, cluster_queue: str = "cluster-queue"
    ) -> JsonDict:
        obj = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
            "kind": "LocalQueue",
            "metadata": self._system_meta({"name": name, "namespace": namespace}),
            "spec": {"clusterQueue": cluster_queue},
        }
        self.local_queues[(namespace, name)] = obj
        return copy.deepcopy(obj)

    def add_appwrapper(self, obj: Mapping[str, Any]) -> JsonDict:
        """Seed an existing AppWrapper (as if created earlier)."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.update(self._system_meta({}))
        meta.setdefault("generation", 1)
        self.appwrappers[(meta["namespace"], meta["name"])] = stored
        return copy.deepcopy(stored)

    def allow(
        self,
        user: str | None = None,
        *,
        in_group: str | None = None,
        verb: str = "*",
        group: str = "*",
        resource: str = "*",
        namespace: str = "*",
        name: str = "*",
        subresource: str = "*",
    ) -> AccessRule:
        """Let a user (or members of ``in_group``) do something; evaluated in order."""
        return self._add_rule(
            True,
            user,
            in_group,
            verb,
            group,
            resource,
            namespace,
            name,
            subresource,
            f"RBAC: allowed by fake rule for {user or in_group}",
        )

    def deny(
        self,
        user: str | None = None,
        *,
        in_group: str | None = None,
        verb: str = "*",
        group: str = "*",
        resource: str = "*",
        namespace: str = "*",
        name: str = "*",
        subresource: str = "*",
        reason: str = "denied by fake rule",
    ) -> AccessRule:
        """An explicit deny (``status.denied: true``), like a webhook authorizer can give."""
        return self._add_rule(
            False, user, in_group, verb, group, resource, namespace, name, subresource, reason
        )

    def _add_rule(
        self,
        allowed: bool,
        user: str | None,
        in_group: str | None,
        verb: str,
        group: str,
        resource: str,
        namespace: str,
        name: str,
        subresource: str,
        reason: str,
    ) -> AccessRule:
        if user is None and in_group is None:
            raise ValueError("an access rule needs user= or in_group=")
        rule = AccessRule(
            allowed, user, in_group, verb, group, resource, namespace, name, subresource, reason
        )
        self.access_rules.append(rule)
        return rule

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
    ) -> Fault:
        """Make matching requests fail (``re.search`` on the path, ``"*"`` for any method).

        ``status=None`` with a ``delay`` only slows the request down. ``after_effect`` runs
        the real operation first and then fails, modelling a write whose response was lost.
        ``times=None`` keeps the fault forever.
        """
        fault = Fault(
            method=method,
            path_regex=re.compile(path_regex),
            status=status,
            delay=delay,
            times=times,
            drop_connection=drop_connection,
            after_effect=after_effect,
            message=message,
            reason=reason,
            retry_after=retry_after,
        )
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def admit_appwrappers_with(self, emulator: ApiserverEmulator) -> None:
        """Send every AppWrapper create through ``emulator``'s admission chain first."""
        self.on_appwrapper_create = admission_create_hook(emulator)

    def requests_to(self, method: str, path_regex: str) -> list[RecordedRequest]:
        pattern = re.compile(path_regex)
        return [r for r in self.requests if r.method == method.upper() and pattern.search(r.path)]

    def _system_meta(self, meta: JsonDict) -> JsonDict:
        return {
            **meta,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(next(self._resource_versions)),
            "creationTimestamp": rfc3339_now(),
        }

    # -- the HTTP app --------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=8 * 1024 * 1024)
        aw = f"/apis/{APPWRAPPER_GROUP}/{APPWRAPPER_VERSION}"
        lq = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
        app.router.add_get("/version", self._version)
        for slash in ("", "/"):
            app.router.add_get(f"/api{slash}", self._core_versions)
            app.router.add_get(f"/apis{slash}", self._groups)
        app.router.add_get("/api/v1", self._core_resources)
        app.router.add_get("/apis/{group}/{version}", self._group_resources)
        app.router.add_get("/api/v1/namespaces", self._list_namespaces)
        app.router.add_get("/api/v1/namespaces/{name}", self._get_namespace)
        app.router.add_get(f"{aw}/{APPWRAPPER_PLURAL}", self._list_appwrappers)
        app.router.add_get(f"{aw}/namespaces/{{ns}}/{APPWRAPPER_PLURAL}", self._list_appwrappers)
        app.router.add_post(f"{aw}/namespaces/{{ns}}/{APPWRAPPER_PLURAL}", self._create_appwrapper)
        app.router.add_get(
            f"{aw}/namespaces/{{ns}}/{APPWRAPPER_PLURAL}/{{name}}", self._get_appwrapper
        )
        app.router.add_delete(
            f"{aw}/namespaces/{{ns}}/{APPWRAPPER_PLURAL}/{{name}}", self._delete_appwrapper
        )
        app.router.add_post(
            f"/apis/{AUTHORIZATION_GROUP}/v1/subjectaccessreviews", self._subject_access_review
        )
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews", self._self_subject_review
        )
        for path in ("/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs",
                     "/api/v1/namespaces/{ns}/pods", "/api/v1/namespaces/{ns}/services"):  # fmt: skip
            app.router.add_post(path, self._dry_run_component)
        app.router.add_get("/api/v1/namespaces/{ns}/secrets/{name}", self._get_secret)
        app.router.add_post("/api/v1/namespaces/{ns}/secrets", self._create_secret)
        app.router.add_put("/api/v1/namespaces/{ns}/secrets/{name}", self._replace_secret)
        webhooks = f"/apis/{ADMISSION_GROUP}/v1/{{plural}}/{{name}}"
        app.router.add_get(webhooks, self._get_webhook_configuration)
        app.router.add_patch(webhooks, self._patch_webhook_configuration)
        app.router.add_get(f"{lq}/localqueues", self._list_local_queues)
        app.router.add_get(f"{lq}/namespaces/{{ns}}/localqueues", self._list_local_queues)
        app.router.add_get(f"{lq}/namespaces/{{ns}}/localqueues/{{name}}", self._get_local_queue)
        return app

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Log, authenticate, inject faults and turn every error into a metav1.Status.

        A body over 3 MiB is refused with 413 where the handler would read it, after
        authentication (k8s.io/apiserver pkg/endpoints/handlers/rest.go:372-389 and
        pkg/server/config.go:474 at 24a394e5)."""
        try:
            body = await self._read_body(request)
            too_large = len(await request.read()) > MAX_REQUEST_BODY_BYTES  # cached by aiohttp
        except web.HTTPRequestEntityTooLarge:  # over aiohttp's client_max_size: never read
            body, too_large = None, True
        user = self._authenticate(request)
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                query=dict(request.query),
                body=body,
                user=user.username if user else "",
                impersonated_user=request.headers.get("Impersonate-User"),
            )
        )
        if user is None:
            return _status_response(status_json(401, "Unauthorized", "Unauthorized"))
        self._users[id(request)] = self._effective_user(request, user)
        try:
            return await self._serve(request, handler, too_large)
        finally:
            self._users.pop(id(request), None)

    async def _serve(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        too_large: bool = False,
    ) -> web.StreamResponse:
        fault = next((f for f in self.faults if f.matches(request.method, request.path)), None)
        if fault is not None:
            fault.hits += 1
        if fault is not None and not fault.after_effect:
            failure = await self._fire(fault, request)
            if failure is not None:
                return failure
        if too_large:  # nothing was written, so an after-effect fault has nothing to follow
            return _status_response(request_entity_too_large())
        try:
            response = await handler(request)
        except KubeApiError as err:
            response = _status_response(err.status)
        except web.HTTPNotFound:
            response = _status_response(_generic_not_found().status)
        except web.HTTPMethodNotAllowed:
            response = _status_response(
                status_json(
                    405,
                    f"the server does not allow this method on the requested resource "
                    f"({request.method})",
                    "MethodNotAllowed",
                    {},
                )
            )
        if fault is not None and fault.after_effect:
            failure = await self._fire(fault, request)
            if failure is not None:
                return failure
        return response

    @staticmethod
    async def _read_body(request: web.Request) -> Any:
        raw = await request.read()  # cached by aiohttp, so handlers can read it again
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _authenticate(self, request: web.Request) -> UserInfo | None:
        header = request.headers.get("Authorization", "")
        return self.user if header == f"Bearer {self.token}" else None

    @staticmethod
    def _effective_user(request: web.Request, user: UserInfo) -> UserInfo:
        """Honour Impersonate-* headers (the fake does not authorize impersonation)."""
        name = request.headers.get("Impersonate-User")
        if not name:
            return user
        extra: dict[str, list[str]] = {}
        for key, value in request.headers.items():
            if key.lower().startswith("impersonate-extra-"):
                extra.setdefault(key[len("impersonate-extra-") :].lower(), []).append(value)
        return UserInfo(
            username=name,
            uid=request.headers.get("Impersonate-Uid", ""),
            groups=tuple(request.headers.getall("Impersonate-Group", [])),
            extra=extra,
        )

    async def _fire(self, fault: Fault, request: web.Request) -> web.StreamResponse | None:
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
        headers: dict[str, str] = {}
        if code == 429:
            details["retryAfterSeconds"] = fault.retry_after
            headers["Retry-After"] = str(fault.retry_after)
        message = fault.message or _DEFAULT_FAULT_MESSAGES.get(code, f"injected fault {code}")
        return _status_response(status_json(code, message, fault.reason, details), headers)

    # -- discovery -----------------------------------------------------------------------------

    async def _version(self, request: web.Request) -> web.Response:
        return _json(
            {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake", "platform": "linux/amd64"}
        )

    async def _core_versions(self, request: web.Request) -> web.Response:
        return _json(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                ],
            }
        )

    async def _core_resources(self, request: web.Request) -> web.Response:
        return _json(
            {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [
                    {
                        "name": "namespaces",
                        "singularName": "namespace",
                        "namespaced": False,
                        "kind": "Namespace",
                        "verbs": ["get", "list"],
                        "shortNames": ["ns"],
                    }
                ],
            }
        )

    def _group_versions(self) -> dict[str, str]:
        groups = {APPWRAPPER_GROUP: APPWRAPPER_VERSION, AUTHORIZATION_GROUP: "v1"}
        if self.kueue_installed:
            groups[KUEUE_GROUP] = KUEUE_VERSION
        return groups

    async def _groups(self, request: web.Request) -> web.Response:
        groups = []
        for group, version in self._group_versions().items():
            gv = {"groupVersion": f"{group}/{version}", "version": version}
            groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    async def _group_resources(self, request: web.Request) -> web.Response:
        group, version = request.match_info["group"], request.match_info["version"]
        if self._group_versions().get(group) != version:
            raise _generic_not_found()
        resources = {
            APPWRAPPER_GROUP: [
                {
                    "name": APPWRAPPER_PLURAL,
                    "singularName": "appwrapper",
                    "namespaced": True,
                    "kind": APPWRAPPER_KIND,
                    "verbs": ["create", "delete", "get", "list"],
                    "shortNames": ["aw"],
                }
            ],
            AUTHORIZATION_GROUP: [
                {
                    "name": "subjectaccessreviews",
                    "singularName": "",
                    "namespaced": False,
                    "kind": "SubjectAccessReview",
                    "verbs": ["create"],
                }
            ],
            KUEUE_GROUP: [
                {
                    "name": "localqueues",
                    "singularName": "localqueue",
                    "namespaced": True,
                    "kind": "LocalQueue",
                    "verbs": ["get", "list"],
                    "shortNames": ["queue", "queues", "lq"],
                }
            ],
        }[group]
        return _json(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": resources,
            }
        )

    # -- namespaces ----------------------------------------------------------------------------

    def _list(
        self, api_version: str, kind: str, items: list[JsonDict], request: web.Request
    ) -> web.Response:
        selector = parse_label_selector(request.query.get("labelSelector", ""))
        chosen = [copy.deepcopy(i) for i in items if selector_matches(selector, _labels(i))]
        return _json(
            {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(next(self._resource_versions))},
                "items": chosen,
            }
        )

    # -- Secrets and webhook configurations (self-managed certificates) ------------------------

    def add_webhook_configuration(self, configuration: JsonDict) -> None:
        """Store a Mutating/ValidatingWebhookConfiguration as `kubectl apply` would."""
        plural = configuration["kind"].lower() + "s"
        self.webhook_configurations[(plural, configuration["metadata"]["name"])] = copy.deepcopy(
            configuration
        )

    async def _get_secret(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.secrets:
            raise _not_found("secrets", "", key[1])
        return _json(self.secrets[key])

    async def _create_secret(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)
        key = (request.match_info["ns"], body["metadata"]["name"])
        if key in self.secrets:
            raise KubeApiError(409, f'secrets "{key[1]}" already exists', "AlreadyExists",
                               {"name": key[1], "kind": "secrets"})  # fmt: skip
        body["metadata"] = self._system_meta({**body["metadata"], "namespace": key[0]})
        self.secrets[key] = body
        return _json(body, 201)

    async def _replace_secret(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.secrets:
            raise _not_found("secrets", "", key[1])
        body = await self._read_body(request)
        wanted = body["metadata"].get("resourceVersion")
        if wanted and wanted != self.secrets[key]["metadata"].get("resourceVersion"):
            raise KubeApiError(409, f'Operation cannot be fulfilled on secrets "{key[1]}": the '
                               "object has been modified; please apply your changes to the "
                               "latest version and try again", "Conflict")  # fmt: skip
        body["metadata"] = {**self.secrets[key]["metadata"], **body["metadata"],
                            "resourceVersion": str(next(self._resource_versions))}  # fmt: skip
        self.secrets[key] = body
        return _json(body)

    async def _get_webhook_configuration(self, request: web.Request) -> web.Response:
        key = (request.match_info["plural"], request.match_info["name"])
        if key not in self.webhook_configurations:
            raise _not_found(key[0], ADMISSION_GROUP, key[1])
        return _json(self.webhook_configurations[key])

    async def _patch_webhook_configuration(self, request: web.Request) -> web.Response:
        """JSON patch only (the patch type autowrap sends), applied as kube-apiserver would."""
        key = (request.match_info["plural"], request.match_info["name"])
        if key not in self.webhook_configurations:
            raise _not_found(key[0], ADMISSION_GROUP, key[1])
        if request.content_type != "application/json-patch+json":
            raise KubeApiError(415, f"unsupported patch type {request.content_type}",
                               "UnsupportedMediaType")  # fmt: skip
        patched = jsonpatch.apply_patch(
            self.webhook_configurations[key], await self._read_body(request)
        )
        self.webhook_configurations[key] = patched
        return _json(patched)

    async def _list_namespaces(self, request: web.Request) -> web.Response:
        return self._list("v1", "Namespace", list(self.namespaces.values()), request)

    async def _get_namespace(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.namespaces:
            raise _not_found("namespaces", "", name)
        return _json(self.namespaces[name])

    # -- AppWrappers ---------------------------------------------------------------------------

    async def _list_appwrappers(self, request: web.Request) -> web.Response:
        ns = request.match_info.get("ns")
        items = [o for (n, _), o in sorted(self.appwrappers.items()) if ns is None or n == ns]
        return self._list(APPWRAPPER_API_VERSION, APPWRAPPER_KIND, items, request)

    async def _get_appwrapper(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.appwrappers:
            raise _not_found(APPWRAPPER_PLURAL, APPWRAPPER_GROUP, key[1])
        return _json(self.appwrappers[key])

    async def _delete_appwrapper(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.appwrappers:
            raise _not_found(APPWRAPPER_PLURAL, APPWRAPPER_GROUP, key[1])
        if _dry_run(request):
            return _json(self.appwrappers[key])
        return _json(self.appwrappers.pop(key))

    async def _create_appwrapper(self, request: web.Request) -> web.Response:
        """POST with kube-apiserver's order: decode, admission hook, BeforeCreate, storage."""
        ns = request.match_info["ns"]
        dry_run = _dry_run(request)
        obj = self._validated_appwrapper(await self._read_body(request), ns)
        user = self._users[id(request)]
        meta = obj.setdefault("metadata", {})
        # handlers/create.go:199 and :259-285: the create's field manager, or the User-Agent
        # up to its first "/"; recorded before admission, so a webhook's fields are unowned.
        manager = (
            request.query.get("fieldManager")
            or (request.headers.get("User-Agent", "").split("/", 1)[0])
        )
        meta["managedFields"] = [{"manager": manager, "operation": "Update",
                                  "apiVersion": f"{APPWRAPPER_GROUP}/{APPWRAPPER_VERSION}",
                                  "time": rfc3339_now(), "fieldsType": "FieldsV1",
                                  "fieldsV1": {"f:metadata": {}, "f:spec": {}}}]  # fmt: skip
        if self.appwrapper_operator_webhook:
            # mappwrapper.kb.io (appwrapper_webhook.go:95-98): the requester's name and uid,
            # over whatever the object said.
            labels = meta.setdefault("labels", {})
            labels[APPWRAPPER_USER_LABEL] = sanitize_label(user.username)
            labels[APPWRAPPER_USERID_LABEL] = sanitize_label(user.uid)
        if self.on_appwrapper_create is not None:
            obj = await self.on_appwrapper_create(copy.deepcopy(obj), dry_run, user)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = generate_name(str(meta["generateName"]))
        self._validate_name(str(meta["name"]))
        key = (ns, str(meta["name"]))
        if key in self.appwrappers:
            raise KubeApiError(
                409,
                f'{APPWRAPPER_PLURAL}.{APPWRAPPER_GROUP} "{key[1]}" already exists',
                "AlreadyExists",
                {"name": key[1], "group": APPWRAPPER_GROUP, "kind": APPWRAPPER_PLURAL},
            )
        system = self._system_meta({})
        meta.setdefault("uid", system["uid"])
        meta.setdefault("creationTimestamp", system["creationTimestamp"])
        meta["generation"] = 1
        if dry_run:
            return _json(obj, 201)
        meta["resourceVersion"] = system["resourceVersion"]
        self.appwrappers[key] = copy.deepcopy(obj)
        self.appwrappers_created += 1
        return _json(obj, 201)

    async def _dry_run_component(self, request: web.Request) -> web.Response:
        """Only server-side dry runs: autowrap never creates these objects itself."""
        if not _dry_run(request):
            raise KubeApiError(403, "forbidden: autowrap only dry-runs components", "Forbidden")
        obj = await self._read_body(request)
        if not isinstance(obj, dict):
            raise KubeApiError(400, "the body is not an object", "BadRequest")
        self.component_dry_runs.append(copy.deepcopy(obj))
        refused = self.component_refusal(obj)
        if refused:
            name = str((obj.get("metadata") or {}).get("name", ""))
            raise KubeApiError(403, f'admission webhook "validatejob.volcano.sh" denied the '
                               f"request: {refused}", "Forbidden", {"name": name})  # fmt: skip
        return _json(obj, 201)

    def _validated_appwrapper(self, body: Any, ns: str) -> JsonDict:
        if not isinstance(body, dict):
            raise KubeApiError(
                400, "the body of the request was in an unknown format", "BadRequest"
            )
        if body.get("apiVersion") != APPWRAPPER_API_VERSION or body.get("kind") != (
            APPWRAPPER_KIND
        ):
            raise KubeApiError(
                400,
                f"the API version in the data ({body.get('apiVersion')}) and kind "
                f"({body.get('kind')}) do not match the expected "
                f"{APPWRAPPER_API_VERSION}, Kind={APPWRAPPER_KIND}",
                "BadRequest",
            )
        if self.require_namespaces and ns not in self.namespaces:
            raise _not_found("namespaces", "", ns)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace") and meta["namespace"] != ns:
            raise KubeApiError(
                400,
                "the namespace of the provided object does not match the "
                "namespace sent on the request",
                "BadRequest",
            )
        if meta.get("resourceVersion"):
            raise KubeApiError(
                400, "resourceVersion should not be set on objects to be created", "BadRequest"
            )
        meta["namespace"] = ns
        for system_field in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(system_field, None)
        obj.pop("status", None)  # the status subresource ignores status on create
        if not meta.get("name") and not meta.get("generateName"):
            raise self._invalid(
                "", "metadata.name", "Required value: name or generateName is required"
            )
        return obj

    def _validate_name(self, name: str) -> None:
        if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            raise self._invalid(
                name,
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.', and must start and end with "
                "an alphanumeric character",
            )

    @staticmethod
    def _invalid(name: str, field_path: str, detail: str) -> KubeApiError:
        return KubeApiError(
            422,
            f'{APPWRAPPER_KIND}.{APPWRAPPER_GROUP} "{name}" is invalid: {field_path}: {detail}',
            "Invalid",
            {
                "name": name,
                "group": APPWRAPPER_GROUP,
                "kind": APPWRAPPER_KIND,
                "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field_path}],
            },
        )

    # -- SubjectAccessReview -------------------------------------------------------------------

    async def _subject_access_review(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)
        # Built-in types take their apiVersion/kind from the URL when the body omits them.
        if not isinstance(body, dict) or body.get("kind", "SubjectAccessReview") != (
            "SubjectAccessReview"
        ):
            raise KubeApiError(
                400, "the body of the request was in an unknown format", "BadRequest"
            )
        spec = body.get("spec") or {}
        user = str(spec.get("user") or "")
        groups = list(spec.get("groups") or [])
        attrs = spec.get("resourceAttributes")
        if not user and not groups:
            raise KubeApiError(
                422,
                'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: '
                'Invalid value: "": at least one of user or group must be specified',
                "Invalid",
            )
        if (attrs is None) == (spec.get("nonResourceAttributes") is None):
            raise KubeApiError(
                422,
                'SubjectAccessReview.authorization.k8s.io "" is invalid: '
                "spec.resourceAttributes: Invalid value: exactly one of "
                "nonResourceAttributes or resourceAttributes must be specified",
                "Invalid",
            )
        self.sars.append(copy.deepcopy(body))
        review = {
            "apiVersion": f"{AUTHORIZATION_GROUP}/v1",
            "kind": "SubjectAccessReview",
            **copy.deepcopy(body),
        }
        review.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        url = spec.get("nonResourceAttributes")
        if url is not None:
            allowed = url.get("verb") == "get" and (user, url.get("path")) in self.url_grants
            review["status"] = {"allowed": allowed,
                                "reason": "granted" if allowed else "no URL grant"}  # fmt: skip
            return _json(review, 201)
        review["status"] = self._authorize(user, groups, attrs)
        return _json(review, 201)

    async def _self_subject_review(self, request: web.Request) -> web.Response:
        """Who the caller is (registry/authentication/selfsubjectreview: the request's user)."""
        who = self._users[id(request)]
        user: JsonDict = {"username": who.username, "groups": list(who.groups)}
        if who.uid:
            user["uid"] = who.uid
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                  "metadata": {"creationTimestamp": None}, "status": {"userInfo": user}}  # fmt: skip
        return _json(review, 201)

    async def _token_review(self, request: web.Request) -> web.Response:
        body = await self._read_body(request)
        self.token_reviews += 1
        token = str(((body or {}).get("spec") or {}).get("token") or "")
        who = self.tokens.get(token)
        status: JsonDict = {"authenticated": False}
        if who is not None:
            status = {"authenticated": True,
                      "user": {"username": who.username, "groups": list(who.groups)}}  # fmt: skip
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                  "spec": {"token": token}, "status": status}  # fmt: skip
        return _json(review, 201)

    def _authorize(self, user: str, groups: list[str], attrs: Mapping[str, Any] | None) -> JsonDict:
        if attrs is not None:
            for rule in self.access_rules:
                if rule.matches(user, groups, attrs):
                    if rule.allowed:
                        return {"allowed": True, "reason": rule.reason}
                    return {"allowed": False, "denied": True, "reason": rule.reason}
        target = attrs or {}
        resource = target.get("resource", "")
        if target.get("group"):
            resource = f"{resource}.{target['group']}"
        return {
            "allowed": False,
            "reason": f'no rule allows user "{user}" to {target.get("verb", "")} '
            f'{resource} in namespace "{target.get("namespace", "")}"',
        }

    # -- LocalQueues ---------------------------------------------------------------------------

    async def _list_local_queues(self, request: web.Request) -> web.Response:
        if not self.kueue_installed:
            raise _generic_not_found()
        ns = request.match_info.get("ns")
        items = [o for (n, _), o in sorted(self.local_queues.items()) if ns is None or n == ns]
        return self._list(f"{KUEUE_GROUP}/{KUEUE_VERSION}", "LocalQueue", items, request)

    async def _get_local_queue(self, request: web.Request) -> web.Response:
        if not self.kueue_installed:
            raise _generic_not_found()
        key = (request.match_info["ns"], request.match_info["name"])
        if key not in self.local_queues:
            raise _not_found("localqueues", KUEUE_GROUP, key[1])
        return _json(self.local_queues[key])


def _dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    for value in values:
        if value != "All":
            raise KubeApiError(
                400, f'dryRun: Unsupported value: "{value}": supported values: "All"', "BadRequest"
            )
    return bool(values)


def admission_create_hook(emulator: ApiserverEmulator) -> AppWrapperCreateHook:
    """A create hook that runs the emulator's admission chain the way kube-apiserver would.

    The emulator does not persist (the fake is the storage); a rejection becomes the same
    metav1.Status the client would receive from kube-apiserver.
    """

    async def hook(obj: JsonDict, dry_run: bool, user: UserInfo) -> JsonDict:
        result = await emulator.create(obj, user=user, dry_run=dry_run, persist=False)
        if not result.allowed:
            raise KubeApiError.from_status(result.status or {})
        return result.object

    return hook


__all__ = [
    "AccessRule",
    "AppWrapperCreateHook",
    "Fault",
    "FakeKube",
    "KubeApiError",
    "RecordedRequest",
    "admission_create_hook",
    "parse_label_selector",
    "service_account_user",
]
