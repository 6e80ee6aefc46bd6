"""The only module that talks to the Kubernetes API.

The official client's asyncio package (``kubernetes.aio``) supplies the configuration
(kubeconfig, in-cluster, exec and auth plugins, token refresh), TLS and its aiohttp session;
``Api`` sends every request and reads every watch stream on that session as JSON bytes (orjson,
once each way), so objects stay plain dicts end to end and nothing passes through the generated
models. ``Api`` is one small generic REST layer over any resource (``Kind``). Every call carries
a timeout: admission passes what is left of the apiserver's ``?timeout=`` budget, the
controller its own.

``API_CALLS`` lists every (group, resource, verb) the serving identity uses; ``deploy/``
grants exactly these (a test holds the two together).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import quote, urlencode

import aiohttp
import orjson

from webhook.core import kinds, provenance, queues
from webhook.core.ports import AlreadyExists, ApiFailure, Conflict, Gone, Identity
from webhook.model import names, objects

log = logging.getLogger("autowrap")


@dataclass(frozen=True)
class Kind:
    """A resource of the API: where it lives, and whether it is namespaced."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


KUEUE_GROUP: Final = "kueue.x-k8s.io"
APPWRAPPERS: Final = Kind(names.APPWRAPPER_GROUP, names.APPWRAPPER_VERSION,
                          names.APPWRAPPER_PLURAL, "AppWrapper")  # fmt: skip
VOLCANO_JOBS: Final = Kind("batch.volcano.sh", "v1alpha1", "jobs", "Job")
PODS: Final = Kind("", "v1", "pods", "Pod")
EVENTS: Final = Kind("", "v1", "events", "Event")
NAMESPACES: Final = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICES: Final = Kind("", "v1", "services", "Service")
LEASES: Final = Kind("coordination.k8s.io", "v1", "leases", "Lease")
LOCAL_QUEUES: Final = Kind(KUEUE_GROUP, "v1beta1", "localqueues", "LocalQueue")
CLUSTER_QUEUES: Final = Kind(KUEUE_GROUP, "v1beta1", "clusterqueues", "ClusterQueue",
                             namespaced=False)  # fmt: skip
ACCESS_REVIEWS: Final = Kind("authorization.k8s.io", "v1", "subjectaccessreviews",
                             "SubjectAccessReview", namespaced=False)  # fmt: skip
TOKEN_REVIEWS: Final = Kind("authentication.k8s.io", "v1", "tokenreviews", "TokenReview",
                            namespaced=False)  # fmt: skip
SELF_REVIEWS: Final = Kind("authentication.k8s.io", "v1", "selfsubjectreviews",
                           "SelfSubjectReview", namespaced=False)  # fmt: skip

# Lists are paged (``limit``/``continue``) and pages sized by bytes: the first asks for
# ``FIRST_PAGE`` objects, each next one for as many as the last page's average size fits in
# ``PAGE_BYTES`` (``next_page_limit``), so objects filled up to the apiserver's 1.5 MiB never
# arrive hundreds at once.
PAGE_SIZE: Final = 500
FIRST_PAGE: Final = 20
PAGE_BYTES: Final = 4 << 20


def next_page_limit(limit: int, items: int, size: int, most: int) -> int:
    """The next page's limit: as many objects as the last page's average size fits in
    ``PAGE_BYTES``, at least one, at most four times ``limit`` and at most ``most``."""
    if not items or size <= 0:
        return min(limit * 4, most)
    fits = PAGE_BYTES * items // size
    return max(1, min(fits, limit * 4, most))


Kept = list[dict[str, Any]]  # objects as a ``list_kept`` reader keeps them


@dataclass
class Page:
    """One page of a LIST, as ``Api.pages`` hands it over."""

    items: list[Any]
    """Its objects as decoded; emptied once the reader asks for the next page."""
    starts_list: bool
    """The list's first page, or the first of the list started over (its continue token
    expired): whatever earlier pages gave is then to be forgotten."""
    last: bool
    """No page follows."""
    version: str
    """Its ``metadata.resourceVersion``: the last page's is the list's, where a watch starts."""


CONFIGMAPS: Final = Kind("", "v1", "configmaps", "ConfigMap")
DEPLOYMENTS: Final = Kind("apps", "v1", "deployments", "Deployment")
ENDPOINT_SLICES: Final = Kind("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
WORKLOADS: Final = Kind(KUEUE_GROUP, "v1beta1", "workloads", "Workload")
RESOURCE_FLAVORS: Final = Kind(KUEUE_GROUP, "v1beta1", "resourceflavors", "ResourceFlavor",
                               namespaced=False)  # fmt: skip
CRDS: Final = Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                   "CustomResourceDefinition", namespaced=False)  # fmt: skip
MUTATING_CONFIGURATIONS: Final = Kind("admissionregistration.k8s.io", "v1",
                                      "mutatingwebhookconfigurations",
                                      "MutatingWebhookConfiguration", namespaced=False)  # fmt: skip
VALIDATING_CONFIGURATIONS: Final = Kind("admissionregistration.k8s.io", "v1",
                                        "validatingwebhookconfigurations",
                                        "ValidatingWebhookConfiguration", namespaced=False)  # fmt: skip
ADMISSION_POLICIES: Final = Kind("admissionregistration.k8s.io", "v1",
                                 "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
                                 namespaced=False)  # fmt: skip
ADMISSION_POLICY_BINDINGS: Final = Kind("admissionregistration.k8s.io", "v1",
                                        "validatingadmissionpolicybindings",
                                        "ValidatingAdmissionPolicyBinding", namespaced=False)  # fmt: skip
CERTIFICATES: Final = Kind("cert-manager.io", "v1", "certificates", "Certificate")

# Admission (redirect mode) and the caches behind it.
API_CALLS: Final = (
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "create"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "get"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
    # Who autowrap is, to recognise the AppWrappers it created (webhook.core.provenance). Every
    # authenticated user may ask this (system:basic-user); granted here all the same.
    ("authentication.k8s.io", "selfsubjectreviews", "create"),
    (KUEUE_GROUP, "localqueues", "list"),
    (KUEUE_GROUP, "localqueues", "watch"),
    (KUEUE_GROUP, "localqueues", "get"),
    (KUEUE_GROUP, "clusterqueues", "get"),
    (KUEUE_GROUP, "resourceflavors", "get"),
    ("", "namespaces", "get"),
    ("", "namespaces", "list"),
    ("", "namespaces", "watch"),
)
# The adopt-mode controller: watches, adopts, releases, reports, and holds its Lease.
CONTROLLER_CALLS: Final = (
    ("batch.volcano.sh", "jobs", "get"),
    ("batch.volcano.sh", "jobs", "list"),
    ("batch.volcano.sh", "jobs", "watch"),
    ("batch.volcano.sh", "jobs", "patch"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "patch"),
    # Kueue's admission of an AppWrapper, from its Workload (released pods follow it).
    (KUEUE_GROUP, "workloads", "list"),
    # ... and why Kueue has not admitted it yet, followed to mirror it on the object.
    (KUEUE_GROUP, "workloads", "watch"),
    # Never called: setting an object's ownerReferences in an update requires delete on it
    # where OwnerReferencesPermissionEnforcement is enabled (OpenShift; adopt-mode.md K4).
    ("batch.volcano.sh", "jobs", "delete"),
    ("", "pods", "delete"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "list"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "watch"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "patch"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "delete"),
    ("", "events", "create"),
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
)
# The AppWrapper operator's userRBACAdmissionCheck (on by default) asks whether the creator of
# an AppWrapper may create each of its components. autowrap creates the AppWrappers, so its
# identity needs create on what it wraps: Volcano Jobs, Pods and a Pod's headless Service.
# Users cannot reach these grants: the apiserver authorized their own create of the object
# before admission, and (redirect) the SubjectAccessReview checks they may create AppWrappers.
COMPONENT_CREATE: Final = (
    ("batch.volcano.sh", "jobs", "create"),
    ("", "pods", "create"),
    ("", "services", "create"),
)
# ``autowrap serve --metrics-auth``: who presents the bearer token (TokenReview), and may they
# get /metrics (a SubjectAccessReview, already granted above for redirect mode).
METRICS_AUTH_CALLS: Final = (("authentication.k8s.io", "tokenreviews", "create"),)
RBAC: Final = API_CALLS + CONTROLLER_CALLS + COMPONENT_CREATE + METRICS_AUTH_CALLS

# ``autowrap doctor``: the calls it makes with the user's own kubeconfig, never autowrap's
# ServiceAccount's (so they are not in ``RBAC``, and ``deploy/`` does not grant them). Reads,
# SubjectAccessReviews about autowrap's ServiceAccount and one dry run made as it; with ``--smoke``, the create,
# watch and delete of one small Volcano Job and one Pod in the namespace given.
DOCTOR_CALLS: Final = (
    ("", "namespaces", "list"),
    ("", "configmaps", "get"),
    ("", "services", "get"),
    ("discovery.k8s.io", "endpointslices", "list"),
    ("apps", "deployments", "get"),
    # The controllers that may create pods, against autowrap's list of controller identities.
    ("apps", "deployments", "list"),
    ("apps", "statefulsets", "list"),
    ("rbac.authorization.k8s.io", "clusterroles", "list"),
    ("rbac.authorization.k8s.io", "roles", "list"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "list"),
    ("rbac.authorization.k8s.io", "rolebindings", "list"),
    ("coordination.k8s.io", "leases", "get"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "get"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies", "get"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings", "list"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
    (KUEUE_GROUP, "localqueues", "list"),
    (KUEUE_GROUP, "clusterqueues", "get"),
    (KUEUE_GROUP, "resourceflavors", "get"),
    ("cert-manager.io", "certificates", "get"),
    # Whether the webhook port admits only the control plane (the NetworkPolicy autowrap-webhook).
    ("networking.k8s.io", "networkpolicies", "get"),
    # Whether OwnerReferencesPermissionEnforcement would refuse adoption: one dry-run Event
    # (never stored) made as autowrap's ServiceAccount, impersonated.
    ("", "serviceaccounts", "impersonate"),
    ("", "events", "create"),
)
SMOKE_CALLS: Final = (
    ("batch.volcano.sh", "jobs", "create"),
    ("batch.volcano.sh", "jobs", "get"),
    ("batch.volcano.sh", "jobs", "delete"),
    ("", "pods", "create"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "delete"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "get"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "list"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "watch"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "delete"),
    (KUEUE_GROUP, "workloads", "list"),
    (KUEUE_GROUP, "workloads", "watch"),
    (KUEUE_GROUP, "localqueues", "list"),
)

# Every write names autowrap as its field manager (metadata.managedFields records it).
_AS_AUTOWRAP: Final = {"fieldManager": names.FIELD_MANAGER}

JSON_PATCH: Final = "application/json-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"
# Metadata-only reads: the apiserver answers with each object's metadata alone
# (PartialObjectMetadata, meta.k8s.io/v1; k8s.io/apiserver pkg/endpoints/handlers/response.go
# doTransformObject), as client-go's metadata client asks for it (k8s.io/client-go/metadata,
# the informers controller-runtime builds for metav1.PartialObjectMetadata:
# pkg/cache/internal/informers.go). A LIST asks for the list shape, a watch for the object
# shape; plain JSON follows as the fallback a server without the transform answers with.
METADATA_LIST_ACCEPT: Final = (
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
METADATA_ACCEPT: Final = (
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)

# Watches: a quiet watch gets a bookmark about every minute, so a stream silent for longer is
# presumed dead and re-opened from the last version; TCP keepalive notices a vanished peer in
# about 30 s (15 s idle, then 3 probes 5 s apart).
WATCH_IDLE_SECONDS: Final = 90.0
CONNECT_SECONDS: Final = 10.0
KEEPALIVE_IDLE: Final = 15
KEEPALIVE_INTERVAL: Final = 5
KEEPALIVE_PROBES: Final = 3


def _each_kept(items: list[Any], keep: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Kept:
    """What ``keep`` makes of each object of a page (no reference to any left once it returns)."""
    return [cut for item in items if isinstance(item, dict) and (cut := keep(item)) is not None]


def _rbac_forbidden(exc: ApiFailure) -> bool:
    """A 403 from the authorizer (autowrap's identity lacks the grant), not an admission
    webhook's denial: the authorizer says "... is forbidden: User "..." cannot create resource"."""
    return (
        exc.status == 403
        and "cannot create resource" in exc.message
        and not exc.message.startswith("admission webhook")
    )


class NoConfiguration(Exception):
    """No usable client configuration: no in-cluster service account, no kubeconfig."""


_TEST_FAILED = "test failed"


def _failure(call: str, status: int, body: bytes) -> ApiFailure:
    message, reason = _status_message(body), ""
    try:
        decoded = orjson.loads(body) if body else {}
        reason = str(decoded.get("reason") or "") if isinstance(decoded, dict) else ""
    except orjson.JSONDecodeError:
        pass
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExists(call, status, message, reason)
    if status == 409:
        return Conflict(call, status, message, reason)
    if status == 422 and _TEST_FAILED in message:
        # A JSON patch's ``test`` found another value (k8s.io/apiserver patch.go answers the
        # json-patch library's "testing value ... failed" with 422): the object changed since
        # it was read, as a stale resourceVersion says with 409.
        return Conflict(call, status, message, reason)
    if status == 410:
        return Gone(call, status, message, reason)
    return ApiFailure(call, status, message, reason)


def _status_message(body: object) -> str:
    if not body:
        return ""
    try:
        data = orjson.loads(body if isinstance(body, bytes | str) else str(body))
    except orjson.JSONDecodeError:
        return str(body)[:300]
    return str(data.get("message") or "") if isinstance(data, dict) else ""


async def load_configuration(kubeconfig: str | None) -> Any:
    """The client configuration: ``kubeconfig`` when given; else in-cluster when running in a
    pod, else the usual kubeconfig resolution."""
    from kubernetes.aio import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            await config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                await config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or "in-cluster config or the default kubeconfig"
        raise NoConfiguration(f"{where}: {exc}") from None
    # The client opens its session with trust_env=True, which looks proxy settings up again
    # for every request, in a thread (two thread-pool round trips per call: 20-35 % of the
    # controller's CPU in bench/). Honour proxies only where one is configured.
    if not any(os.environ.get(v) for v in _PROXY_VARIABLES):
        configuration.client_session_kwargs = {"trust_env": False}
    return configuration


_PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
)


class Api:
    """Plain-dict REST for any ``Kind``, on the official asyncio client's session.

    ``kubernetes.aio`` supplies what it is good at: the configuration (kubeconfig, in-cluster,
    exec and auth plugins, token refresh), TLS and its aiohttp session with the connection pool.
    Requests and watch streams go over that session as bytes: bodies are encoded once with
    orjson and answers decoded once, never through the generated client's
    ``sanitize_for_serialization``, ``deserialize`` or ``Watch.unmarshal_event`` (which decodes
    every event three times). Every call carries an explicit timeout.
    """

    def __init__(self, api_client: Any, *, headers: Mapping[str, str] | None = None) -> None:
        self._api_client = api_client
        # Told of every call ``request`` makes: (call, HTTP status or None, seconds).
        self.observe: Callable[[str, int | None, float], None] | None = None
        self._me: provenance.Me | None = None
        self._headers = dict(headers or {})

    def impersonating(self, user: str) -> Api:
        """The same connection, each request made as ``user`` (Impersonate-User, which the
        caller's own credentials must be allowed; a ServiceAccount's groups are added by the
        apiserver): how ``autowrap doctor`` asks the cluster what it would answer autowrap's
        ServiceAccount, without its token."""
        return Api(self._api_client, headers={"Impersonate-User": user})

    @classmethod
    async def connect(cls, kubeconfig: str | None) -> Api:
        from kubernetes.aio import client

        return cls(client.ApiClient(await load_configuration(kubeconfig)))

    async def close(self) -> None:
        await self._api_client.close()

    # --- transport ---------------------------------------------------------------------------

    def _session(self) -> Any:
        """The client's aiohttp session (its pool), opened on first use as the client does."""
        rest = self._api_client.rest_client
        if rest.pool_manager is None:
            rest.pool_manager = rest._create_pool_manager()
        return rest.pool_manager

    async def _prepare(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None,
        content_type: str | None,
        accept: str = "application/json",
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        """The URL, the headers (the client's defaults and its current credentials: an exec
        plugin's token is refreshed here when it expired) and the session's request options."""
        configuration = self._api_client.configuration
        headers: dict[str, str] = dict(self._api_client.default_headers)
        headers.update(self._headers)
        headers["Accept"] = accept
        if content_type:
            headers["Content-Type"] = content_type
        queries: list[tuple[str, str]] = []
        await self._api_client.update_params_for_auth(
            headers, queries, ["BearerToken"], path, method, None
        )
        url = configuration.host + path
        params = [(k, str(v)) for k, v in (query or {}).items()] + queries
        if params:
            url += "?" + urlencode(params)
        options: dict[str, Any] = {}
        if configuration.tls_server_name:
            options["server_hostname"] = configuration.tls_server_name
        if configuration.proxy:
            options["proxy"] = configuration.proxy
        if configuration.proxy_headers:
            options["proxy_headers"] = configuration.proxy_headers
        return url, headers, options

    async def request(
        self,
        call: str,
        method: str,
        path: str,
        *,
        timeout: float,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One call; the decoded answer, or ``ApiFailure`` saying what went wrong. ``body`` is
        a JSON-serializable value (encoded with orjson) or bytes already encoded."""
        decoded, _ = await self._exchange(call, method, path, timeout=timeout, query=query,
                                          body=body, content_type=content_type)  # fmt: skip
        return decoded

    async def _exchange(
        self,
        call: str,
        method: str,
        path: str,
        *,
        timeout: float,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[dict[str, Any], int]:
        """``request``, with the size of the answer in bytes (what list pages are sized by)."""
        if timeout <= 0:
            raise ApiFailure(call, None, "no time left in the budget")
        started, status = time.perf_counter(), None
        try:
            data = None if body is None or isinstance(body, bytes) else orjson.dumps(body)
            async with asyncio.timeout(timeout):
                url, headers, options = await self._prepare(
                    method, path, query, content_type if body is not None else None, accept
                )
                async with self._session().request(
                    method, url, headers=headers, data=data if data is not None else body,
                    timeout=aiohttp.ClientTimeout(total=timeout), **options,
                ) as response:  # fmt: skip
                    status = response.status
                    answer = await response.read()
        except TimeoutError:
            raise ApiFailure(call, None, f"no answer within {timeout:.1f}s") from None
        except orjson.JSONEncodeError as exc:
            raise ApiFailure(call, None, f"the request body is not JSON: {exc}") from None
        except Exception as exc:  # connection refused, reset, TLS, credentials: nothing answered
            raise ApiFailure(call, None, f"{type(exc).__name__}: {exc}") from None
        finally:
            if self.observe is not None:
                self.observe(call, status, time.perf_counter() - started)
        if not 200 <= status < 300:
            raise _failure(call, status, answer)
        try:
            decoded = orjson.loads(answer) if answer else {}
        except orjson.JSONDecodeError as exc:
            raise ApiFailure(call, status, f"the answer is not JSON: {exc}") from None
        return (decoded if isinstance(decoded, dict) else {}), len(answer)

    # --- verbs -------------------------------------------------------------------------------

    async def get(
        self, kind: Kind, namespace: str | None, name: str, *, timeout: float
    ) -> dict[str, Any] | None:
        try:
            return await self.request(f"get {kind.plural}", "GET", kind.path(namespace, name),
                                      timeout=timeout)  # fmt: skip
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        timeout: float,
        labels: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> dict[str, Any]:
        """One LIST; with ``limit``, one page of it: ``metadata.continue`` in the answer asks
        for the next (``continue_token``), and a token the apiserver no longer honours is
        ``Gone`` (410)."""
        page, _ = await self.list_page(kind, namespace, timeout=timeout, labels=labels,
                                       limit=limit, continue_token=continue_token)  # fmt: skip
        return page

    async def list_page(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        timeout: float,
        labels: str = "",
        limit: int = 0,
        continue_token: str = "",
        metadata_only: bool = False,
    ) -> tuple[dict[str, Any], int]:
        """``list``, with the answer's size in bytes; ``metadata_only`` asks for each item's
        metadata alone (``METADATA_LIST_ACCEPT``: items are PartialObjectMetadata, or whole
        objects from a server that cannot cut them)."""
        query: dict[str, Any] = {}
        if labels:
            query["labelSelector"] = labels
        if limit:
            query["limit"] = limit
        if continue_token:
            query["continue"] = continue_token
        return await self._exchange(
            f"list {kind.plural}", "GET", kind.path(namespace), timeout=timeout, query=query,
            accept=METADATA_LIST_ACCEPT if metadata_only else "application/json",
        )  # fmt: skip

    async def pages(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        timeout: float,
        labels: str = "",
        first: int,
        most: int,
        metadata_only: bool = False,
    ) -> AsyncGenerator[Page, None]:
        """A whole LIST, one page at a time: the one pager behind the informers' lists and
        ``list_kept``.

        Why pages, and why sized by bytes: anyone with edit rights may fill objects up to the
        apiserver's 1.5 MiB, so a list of them decoded at once, or in pages of a fixed count,
        would hold hundreds of MiB on the loop that also serves the webhooks. The first page
        asks for ``first`` objects, each next for as many as the last page's average size fits
        in ``PAGE_BYTES`` (``next_page_limit``, at most ``most``); each page has ``timeout``,
        and ``metadata_only`` asks for each item's metadata alone (``list_page``). A page is
        emptied as soon as its reader asks for the next one, before that one is fetched, so
        what is held at a time is one page and what the reader kept of the others.

        A continue token the apiserver no longer honours (410 Gone: its version was
        compacted) starts the list over, paged again, with a page whose ``starts_list`` is set:
        the reader forgets what the expired list gave. client-go's pager lists again too
        (``FullListIfExpired``, tools/pager/pager.go ``ListPager.List``), in one unpaged LIST
        there, which is what pages are here to avoid. A 410 to a request without a token is not
        an expired token's: it is raised."""
        token, limit, starts_list = "", first, True
        while True:
            try:
                answer, size = await self.list_page(
                    kind, namespace, timeout=timeout, labels=labels, limit=limit,
                    continue_token=token, metadata_only=metadata_only,
                )  # fmt: skip
            except Gone:
                if not token:
                    raise
                log.info("list continue token expired, listing again",
                         extra={"fields": {"resource": kind.plural}})  # fmt: skip
                token, limit, starts_list = "", first, True
                continue
            decoded = answer.pop("items", None)
            items: list[Any] = decoded if isinstance(decoded, list) else []
            metadata = objects.as_map(answer.get("metadata"))
            limit = next_page_limit(limit, len(items), size, most)
            token = str(metadata.get("continue") or "")
            yield Page(items, starts_list, not token, str(metadata.get("resourceVersion") or ""))
            items.clear()  # the page goes before the next arrives, whatever its reader still holds
            if not token:
                return
            starts_list = False

    async def list_kept(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        timeout: float,
        labels: str = "",
        keep: Callable[[dict[str, Any]], dict[str, Any] | None],
        first_page: int = FIRST_PAGE,
    ) -> Kept:
        """Every object of a LIST (``pages``, from ``first_page`` objects), each cut by
        ``keep`` (or dropped: None) as soon as its page is decoded, so that what is held at a
        time is one page and what ``keep`` returns, whatever the objects carry."""
        kept: Kept = []
        async for page in self.pages(kind, namespace, timeout=timeout, labels=labels,
                                     first=min(first_page, FIRST_PAGE), most=PAGE_SIZE):  # fmt: skip
            if page.starts_list:
                kept = []
            kept += _each_kept(page.items, keep)
        return kept

    async def create(
        self,
        kind: Kind,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        timeout: float,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        query = {"fieldManager": names.FIELD_MANAGER}
        if dry_run:
            query["dryRun"] = "All"
        return await self.request(f"create {kind.plural}", "POST", kind.path(namespace),
                                  timeout=timeout, query=query, body=body)  # fmt: skip

    async def replace(
        self, kind: Kind, obj: Mapping[str, Any], *, timeout: float
    ) -> dict[str, Any]:
        """PUT: fails with ``Conflict`` when the object changed since ``obj`` was read."""
        metadata = obj.get("metadata") or {}
        path = kind.path(metadata.get("namespace"), metadata.get("name"))
        return await self.request(f"update {kind.plural}", "PUT", path, timeout=timeout,
                                  query=_AS_AUTOWRAP, body=obj)  # fmt: skip

    async def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        timeout: float,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        return await self.request(f"patch {kind.plural}", "PATCH", kind.path(namespace, name),
                                  timeout=timeout, query=_AS_AUTOWRAP, body=body,
                                  content_type=content_type)  # fmt: skip

    async def server_version(self, *, timeout: float) -> dict[str, Any]:
        """kube-apiserver's ``/version`` (major, minor, gitVersion)."""
        return await self.request("get version", "GET", "/version", timeout=timeout)

    async def served_groups(self, *, timeout: float) -> dict[str, tuple[str, ...]]:
        """Every API group discovery publishes, with its served versions (preferred first)."""
        answer = await self.request("discover api groups", "GET", "/apis", timeout=timeout)
        out: dict[str, tuple[str, ...]] = {}
        for group in answer.get("groups") or []:
            preferred = str((group.get("preferredVersion") or {}).get("version") or "")
            versions = [str(v.get("version")) for v in group.get("versions") or []]
            ordered = [preferred] if preferred in versions else []
            out[str(group.get("name"))] = tuple(ordered + [v for v in versions if v != preferred])
        return out

    async def may(
        self, user: str, groups: tuple[str, ...], attributes: Mapping[str, str], *, timeout: float
    ) -> bool:
        """May ``user`` (in ``groups``) do what ``attributes`` say (verb, group, resource,
        namespace; a SubjectAccessReview asked with these credentials)?"""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": list(groups),
                         "resourceAttributes": dict(attributes)}}  # fmt: skip
        try:
            result = await self.create(ACCESS_REVIEWS, None, body, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "create subjectaccessreview"
            raise
        return bool((result.get("status") or {}).get("allowed"))

    async def own_identity(self, *, timeout: float) -> provenance.Me:
        """Who these credentials authenticate as: a SelfSubjectReview, asked once."""
        if self._me is None:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            try:
                answer = await self.create(SELF_REVIEWS, None, body, timeout=timeout)
            except ApiFailure as exc:
                exc.call = "create selfsubjectreview"
                raise
            user = (answer.get("status") or {}).get("userInfo") or {}
            if not user.get("username"):
                raise ApiFailure("create selfsubjectreview", 200, "the answer names no user")
            self._me = provenance.Me(str(user["username"]), str(user.get("uid") or ""))
        return self._me

    async def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        timeout: float,
        uid: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Delete (only the object with ``uid``, when given); False when it was already gone."""
        options: dict[str, Any] = {"propagationPolicy": propagation}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self.request(f"delete {kind.plural}", "DELETE", kind.path(namespace, name),
                               timeout=timeout, body=options)  # fmt: skip
        except ApiFailure as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def watch(
        self,
        kind: Kind,
        namespace: str | None = None,
        *,
        resource_version: str,
        labels: str = "",
        timeout_seconds: int = 300,
        idle_seconds: float = WATCH_IDLE_SECONDS,
        metadata_only: bool = False,
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """Events from ``resource_version`` on, bookmarks included (their resourceVersion is
        where the next watch starts); raises ``Gone`` when the apiserver no longer has that
        version, and ends when the server closes the watch or when nothing at all arrived for
        ``idle_seconds`` (a connection that died silently: the caller watches again from the
        last version it saw, no relist). Each event is read as one line and decoded once.

        The apiserver sends a bookmark about every minute on a quiet watch (storage/cacher
        ``defaultBookmarkFrequency``), so ``idle_seconds`` stays above that; a peer that
        vanished without a reset is noticed sooner, by TCP keepalive (``_keepalive``).
        ``metadata_only``: each event's object is its metadata alone (``METADATA_ACCEPT``)."""
        call = f"watch {kind.plural}"
        params = {"watch": "true", "allowWatchBookmarks": "true",
                  "resourceVersion": resource_version, "timeoutSeconds": str(timeout_seconds)}  # fmt: skip
        if labels:
            params["labelSelector"] = labels
        timeout = aiohttp.ClientTimeout(
            total=timeout_seconds + idle_seconds,
            sock_connect=CONNECT_SECONDS,
            sock_read=idle_seconds,
        )
        streaming = False
        try:
            accept = METADATA_ACCEPT if metadata_only else "application/json"
            url, headers, options = await self._prepare(
                "GET", kind.path(namespace), params, None, accept
            )
            async with self._session().get(url, headers=headers, timeout=timeout,
                                           **options) as response:  # fmt: skip
                if response.status != 200:
                    raise _failure(call, response.status, await response.read())
                _keepalive(response)
                streaming = True
                line = bytearray()
                async for chunk in response.content.iter_any():
                    start = 0
                    while (end := chunk.find(b"\n", start)) >= 0:
                        line += chunk[start:end]
                        start = end + 1
                        if line.strip():
                            yield _event(call, line)
                        line.clear()
                    line += chunk[start:]
                if line.strip():
                    yield _event(call, line)
        except ApiFailure:
            raise
        except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            if streaming:  # idle past the bound, or cut off mid-stream: the caller watches again
                return
            raise ApiFailure(call, None, f"{type(exc).__name__}: {exc}") from None
        except Exception as exc:  # connection refused, reset, TLS, credentials
            raise ApiFailure(call, None, f"{type(exc).__name__}: {exc}") from None


def _event(call: str, line: bytes | bytearray) -> tuple[str, dict[str, Any]]:
    """One watch event, decoded once; an ERROR event is raised (410: ``Gone``)."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ApiFailure(call, 200, f"the watch stream is not JSON: {exc}") from None
    kind, obj = (event.get("type"), event.get("object")) if isinstance(event, dict) else ("", None)
    if not isinstance(obj, dict) or not kind:
        raise ApiFailure(call, 200, "the watch stream sent something other than an event")
    if kind == "ERROR":
        code = obj.get("code")
        status = code if isinstance(code, int) else None
        message = str(obj.get("message") or "")
        if status == 410:
            raise Gone(call, 410, message, str(obj.get("reason") or ""))
        raise ApiFailure(call, status, message, str(obj.get("reason") or ""))
    return str(kind), obj


def _keepalive(response: aiohttp.ClientResponse) -> None:
    """TCP keepalive on a watch's connection, so that a peer gone without a reset (a node
    lost, a load balancer that dropped the flow) ends the watch in about
    ``KEEPALIVE_IDLE + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL`` seconds."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)


class Cache(Protocol):
    """A watch-backed copy of one resource (``webhook.shell.informer.Informer``)."""

    synced: asyncio.Event

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


@dataclass
class _Cached:
    value: Any
    expires: float


# How long a SubjectAccessReview's "allowed" is taken as said (kube-apiserver's webhook
# authorizer keeps one 5 minutes by default, controller-runtime's delegating authorizer 10 s),
# and for how many users and namespaces at most.
ALLOWED_TTL = 10.0
MAX_ALLOWED_KEPT = 4096


class KubeClient(Api):
    """What admission asks of the API, with short-lived caches for the per-request reads."""

    def __init__(
        self,
        api_client: Any,
        *,
        clock: Callable[[], float] = time.monotonic,
        namespace_ttl: float = 60.0,
        queue_ttl: float = 30.0,
        discovery_ttl: float = 300.0,
        allowed_ttl: float = ALLOWED_TTL,
    ) -> None:
        super().__init__(api_client)
        self._clock = clock
        self._allowed_ttl = allowed_ttl
        # (who, namespace) -> until when a SubjectAccessReview's "allowed" is taken as said.
        self._allowed: dict[tuple[Identity, str], float] = {}
        self._ttl = {
            "ns": namespace_ttl,
            "lq": queue_ttl,
            "disc": discovery_ttl,
            "cq": queue_ttl,
            "rf": queue_ttl,
            "norbac": discovery_ttl,
        }
        self._cache: dict[tuple[str, str], _Cached] = {}
        self._namespaces: Cache | None = None
        self._local_queues: Cache | None = None

    def use_caches(self, *, namespaces: Cache | None, local_queues: Cache | None) -> None:
        """Answer namespace labels and LocalQueue lookups from watch-backed caches once they
        have listed (before that, and without them, each miss is one API call)."""
        self._namespaces, self._local_queues = namespaces, local_queues

    @classmethod
    async def connect(cls, kubeconfig: str | None, **kwargs: Any) -> KubeClient:
        from kubernetes.aio import client

        return cls(client.ApiClient(await load_configuration(kubeconfig)), **kwargs)

    # --- AppWrappers ---------------------------------------------------------------------

    async def create_appwrapper(
        self, namespace: str, body: dict[str, Any], *, dry_run: bool, timeout: float
    ) -> dict[str, Any]:
        try:
            return await self.create(APPWRAPPERS, namespace, body, timeout=timeout, dry_run=dry_run)
        except ApiFailure as exc:
            exc.call = "create appwrapper"
            raise

    async def get_appwrapper(
        self, namespace: str, name: str, *, timeout: float
    ) -> dict[str, Any] | None:
        try:
            return await self.get(APPWRAPPERS, namespace, name, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "get appwrapper"
            raise

    async def appwrapper_terminating(self, namespace: str, name: str, *, timeout: float) -> bool:
        """Whether an AppWrapper of this name exists and is being deleted: its metadata alone,
        read live (a cache that lags would let a create through that its deletion then takes
        along: adopt-mode.md A7)."""
        try:
            found, _ = await self._exchange(
                "get appwrappers", "GET", APPWRAPPERS.path(namespace, name), timeout=timeout,
                accept=METADATA_ACCEPT,
            )  # fmt: skip
        except ApiFailure as exc:
            if exc.status == 404:
                return False
            exc.call = "get appwrapper"
            raise
        return bool((found.get("metadata") or {}).get("deletionTimestamp"))

    # --- authorization ---------------------------------------------------------------------

    async def may_create_appwrappers(
        self, who: Identity, namespace: str, *, timeout: float
    ) -> tuple[bool, str]:
        """A SubjectAccessReview as ``who``. An "allowed" is kept ``allowed_ttl`` seconds for
        that exact user (name, uid, groups, extra) and namespace, so that a burst of one user's
        creates asks once; a denial is never kept, so a permission just granted works at once,
        and one revoked stops working for autowrap within the TTL."""
        key = (who, namespace)
        until = self._allowed.get(key)
        if until is not None and until > self._clock():
            return True, ""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": who.username,
                "uid": who.uid or None,
                "groups": list(who.groups),
                "extra": {k: list(v) for k, v in who.extra},
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "create",
                    "group": names.APPWRAPPER_GROUP,
                    "version": names.APPWRAPPER_VERSION,
                    "resource": names.APPWRAPPER_PLURAL,
                },
            },
        }
        try:
            result = await self.create(ACCESS_REVIEWS, None, body, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "create subjectaccessreview"
            raise
        status = result.get("status") or {}
        allowed = bool(status.get("allowed"))
        if allowed and self._allowed_ttl > 0:
            self._keep_allowed(key)
        return allowed, str(status.get("reason") or "")

    def _keep_allowed(self, key: tuple[Identity, str]) -> None:
        now = self._clock()
        if len(self._allowed) >= MAX_ALLOWED_KEPT:
            self._allowed = {k: t for k, t in self._allowed.items() if t > now}
            if len(self._allowed) >= MAX_ALLOWED_KEPT:
                self._allowed.clear()
        self._allowed[key] = now + self._allowed_ttl

    async def review_token(self, token: str, *, timeout: float) -> Identity | None:
        """Who a bearer token authenticates as (a TokenReview); None when it does not."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": {"token": token}}  # fmt: skip
        try:
            result = await self.create(TOKEN_REVIEWS, None, body, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "create tokenreview"
            raise
        status = result.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return None
        extra = user.get("extra") or {}
        return Identity(
            username=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items()),
        )

    async def may_get_url(self, who: Identity, path: str, *, timeout: float) -> tuple[bool, str]:
        """May ``who`` get the non-resource URL ``path`` (a SubjectAccessReview)?"""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": who.username,
                "uid": who.uid or None,
                "groups": list(who.groups),
                "extra": {k: list(v) for k, v in who.extra},
                "nonResourceAttributes": {"path": path, "verb": "get"},
            },
        }
        try:
            result = await self.create(ACCESS_REVIEWS, None, body, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "create subjectaccessreview"
            raise
        status = result.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")

    # --- cached reads ------------------------------------------------------------------------

    def _cached(self, kind: str, key: str) -> _Cached | None:
        entry = self._cache.get((kind, key))
        return entry if entry is not None and entry.expires > self._clock() else None

    def _store(self, kind: str, key: str, value: Any) -> Any:
        self._cache[(kind, key)] = _Cached(value, self._clock() + self._ttl[kind])
        return value

    def known_namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """A namespace's labels as the caches hold them now, without a call; None when no
        cache knows the namespace yet."""
        if self._namespaces is not None and self._namespaces.synced.is_set():
            cached = self._namespaces.get("", namespace)
            return None if cached is None else objects.labels_of(cached)
        hit = self._cached("ns", namespace)
        return None if hit is None else dict(hit.value)

    async def namespace_labels(self, namespace: str, *, timeout: float) -> dict[str, str]:
        if self._namespaces is not None and self._namespaces.synced.is_set():
            cached = self._namespaces.get("", namespace) or {}
            return dict((cached.get("metadata") or {}).get("labels") or {})
        hit = self._cached("ns", namespace)
        if hit is not None:
            labels: dict[str, str] = hit.value
            return labels
        try:
            found = await self.get(NAMESPACES, None, namespace, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "get namespace"
            raise
        labels = dict(((found or {}).get("metadata") or {}).get("labels") or {})
        return self._store("ns", namespace, labels)  # type: ignore[no-any-return]

    async def kueue_version(self, *, timeout: float) -> str | None:
        """The served LocalQueue API version, or None where Kueue is not installed."""
        hit = self._cached("disc", KUEUE_GROUP)
        if hit is not None:
            cached: str | None = hit.value
            return cached
        try:
            groups = await self.request("discover api groups", "GET", "/apis", timeout=timeout)
        except ApiFailure as exc:
            exc.call = "discover api groups"
            raise
        version = None
        for group in groups.get("groups") or []:
            if group.get("name") == KUEUE_GROUP:
                preferred = group.get("preferredVersion") or {}
                version = preferred.get("version") or (group.get("versions") or [{}])[0].get(
                    "version"
                )
        return self._store("disc", KUEUE_GROUP, version)  # type: ignore[no-any-return]

    async def _local_queues_listed(
        self, namespace: str, version: str, *, timeout: float
    ) -> dict[str, Any]:
        kind = Kind(KUEUE_GROUP, version, "localqueues", "LocalQueue")
        try:
            listed = await self.list(kind, namespace, timeout=timeout)
        except ApiFailure as exc:
            exc.call = "list localqueues"
            raise
        queues = {str((i.get("metadata") or {}).get("name")): i for i in listed.get("items") or []}
        return self._store("lq", namespace, queues)  # type: ignore[no-any-return]

    async def local_queue_exists(
        self, namespace: str, queue: str, *, timeout: float
    ) -> bool | None:
        """Whether the LocalQueue exists; None where Kueue is not installed.

        The namespace's queues are cached; a queue missing from the cache is looked up once more
        before it is declared missing, so a queue created a moment ago is found.
        """
        version = await self.kueue_version(timeout=timeout)
        if version is None:
            return None
        return await self._local_queue(namespace, queue, version, timeout=timeout) is not None

    async def _local_queue(
        self, namespace: str, queue: str, version: str, *, timeout: float
    ) -> dict[str, Any] | None:
        """The LocalQueue from the watch-backed cache; a miss there is confirmed with one GET
        (a queue created a moment ago may not have reached the cache yet). Without the cache,
        the namespace's queues are listed and kept for a while."""
        if self._local_queues is not None and self._local_queues.synced.is_set():
            found = self._local_queues.get(namespace, queue)
            if found is not None:
                return found
            kind = Kind(KUEUE_GROUP, version, "localqueues", "LocalQueue")
            try:
                return await self.get(kind, namespace, queue, timeout=timeout)
            except ApiFailure as exc:
                exc.call = "get localqueue"
                raise
        hit = self._cached("lq", namespace)
        if hit is not None and queue in hit.value:
            return hit.value[queue]  # type: ignore[no-any-return]
        return (await self._local_queues_listed(namespace, version, timeout=timeout)).get(queue)

    async def refusal(
        self, namespace: str, components: list[dict[str, Any]], *, timeout: float
    ) -> str | None:
        """What the cluster says to creating these objects (a server-side dry run: its schema,
        every admission webhook, policy engines), or None when it would accept them all. An
        object that already exists got through admission (AlreadyExists comes from storage,
        after validation: adopt-mode.md A4), so that counts as accepted.

        Where autowrap's own identity may not create the kind (RBAC: the ClusterRole without
        COMPONENT_CREATE, deploy/overlays/without-component-create) the dry run cannot be
        made: the component is not judged, and the kind is not tried again for a while."""
        for obj in components:
            kind = component_kind(obj)
            label = f"{obj.get('kind')} {objects_name(obj)}"
            if kind is None:
                continue  # a kind autowrap does not create through AppWrappers: not judged here
            if self._cached("norbac", kind.plural) is not None:
                continue
            try:
                await self.create(kind, namespace, obj, timeout=timeout, dry_run=True)
            except AlreadyExists:
                continue
            except ApiFailure as exc:
                if _rbac_forbidden(exc):
                    self._store("norbac", kind.plural, True)
                    continue
                if (
                    exc.status == 404
                    and exc.reason == "NotFound"
                    and "namespaces" not in exc.message
                ):
                    return f"the cluster does not serve {kind.plural}.{kind.group or 'core'} ({label}): {exc.message}"
                if (
                    exc.status is not None
                    and 400 <= exc.status < 500
                    and exc.status not in (408, 429)
                ):
                    return f"the cluster refuses the {label} the AppWrapper would create: {exc.message}"
                raise
        return None

    async def redirect_reason(self, namespace: str, queue: str, *, timeout: float) -> str | None:
        """Why adopt mode cannot serve the queue: its ClusterQueue sends work to other clusters
        (MultiKueue: the local AppWrapper controller ignores the AppWrapper, adopt-mode.md Q6)
        or places pods by topology (TAS: Kueue's gate cannot be added to existing pods, Q5)."""
        version = await self.kueue_version(timeout=timeout)
        if version is None:
            return None
        local_queue = await self._local_queue(namespace, queue, version, timeout=timeout)
        cluster_queue = str(((local_queue or {}).get("spec") or {}).get("clusterQueue") or "")
        if not cluster_queue:
            return None
        found = await self._cluster_scoped("cq", "clusterqueues", version, cluster_queue,
                                           timeout=timeout)  # fmt: skip
        if found is None:
            return None
        topology: dict[str, bool] = {}
        for name in queues.flavor_names(found):
            flavor = await self._cluster_scoped("rf", "resourceflavors", version, name,
                                                timeout=timeout)  # fmt: skip
            topology[name] = bool(((flavor or {}).get("spec") or {}).get("topologyName"))
        return queues.redirect_reason(cluster_queue, found, lambda name: topology.get(name, False))

    async def kueue_workloads(
        self, namespace: str, appwrapper_uid: str, *, timeout: float
    ) -> list[dict[str, Any]]:
        """Kueue labels each Workload with the uid of the job it stands for
        (constants.JobUIDLabel); listed live, since the answer decides whether an update may
        stop what runs."""
        version = await self.kueue_version(timeout=timeout)
        if version is None or not appwrapper_uid:
            return []
        kind = Kind(KUEUE_GROUP, version, "workloads", "Workload")
        listed = await self.list(kind, namespace, timeout=timeout,
                                 labels=f"{names.KUEUE_JOB_UID_LABEL}={appwrapper_uid}")  # fmt: skip
        return [w for w in listed.get("items") or [] if isinstance(w, dict)]

    async def _cluster_scoped(
        self, cache: str, plural: str, version: str, name: str, *, timeout: float
    ) -> dict[str, Any] | None:
        """A Kueue ClusterQueue or ResourceFlavor (cached); None when it does not exist or
        autowrap may not read it (then only what the LocalQueue says is judged)."""
        hit = self._cached(cache, name)
        if hit is not None:
            return hit.value  # type: ignore[no-any-return]
        kind = Kind(KUEUE_GROUP, version, plural, plural, namespaced=False)
        try:
            found = await self.get(kind, None, name, timeout=timeout)
        except ApiFailure as exc:
            if exc.status != 403:
                exc.call = f"get {plural}"
                raise
            found = None
        return self._store(cache, name, found)  # type: ignore[no-any-return]


_COMPONENT_KINDS: Final = {(k.api_version, k.kind): k for k in (VOLCANO_JOBS, PODS, SERVICES)}


def component_kind(obj: Mapping[str, Any]) -> Kind | None:
    """The resource of a component autowrap wraps (Volcano Job, Pod, a Pod's Service)."""
    return _COMPONENT_KINDS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))


def objects_name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("name") or "")


def sync_api_client(kubeconfig: str | None) -> Any:
    """A synchronous client, for the self-managed certificate set-up that runs once before
    the event loop starts serving."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or "in-cluster config or the default kubeconfig"
        raise NoConfiguration(f"{where}: {exc}") from None
    return client.ApiClient(configuration)


class CertificateStore:
    """The self-managed certificate mode's calls: one Secret, two webhook configurations.

    Synchronous on purpose: it runs once before the server starts listening.
    """

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._client = client
        self._core: Any = client.CoreV1Api(api_client)
        self._admission: Any = client.AdmissionregistrationV1Api(api_client)

    def read_secret(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's data (base64 values), or None when it does not exist."""
        found = self.read_secret_version(namespace, name)
        return None if found is None else found[0]

    def read_secret_version(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        """The Secret's data and resourceVersion, or None when it does not exist."""
        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except self._client.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(secret.data or {}), str(secret.metadata.resource_version or "")

    def write_secret(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        *,
        create: bool,
        resource_version: str = "",
    ) -> bool:
        """Create or replace the Secret; False when another replica created it first or (with
        ``resource_version``, a precondition of the replace) changed it since it was read. A
        replace keeps the Secret's labels and annotations: they are the installer's (Helm's
        ownership, ``app.kubernetes.io/part-of``, which ``autowrap uninstall`` finds it by)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        try:
            if not create:
                current = self._core.read_namespaced_secret(name, namespace).metadata
                for field in ("labels", "annotations"):
                    if getattr(current, field, None):
                        metadata[field] = dict(getattr(current, field))
                if resource_version:
                    metadata["resourceVersion"] = resource_version
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": metadata,
                "data": data,
            }
            if create:
                self._core.create_namespaced_secret(namespace, body)
            else:
                self._core.replace_namespaced_secret(name, namespace, body)
        except self._client.exceptions.ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def set_ca_bundle(self, configuration: str, ca_bundle: str) -> int:
        """Point every webhook of a configuration at the CA; returns how many changed.

        The name is looked up as a mutating, then as a validating configuration. The
        self-managed grants name each configuration under its own kind only
        (deploy/overlays/self-managed/rbac.yaml), so the other kind answers 403, not 404: that
        is "not this kind" too, and it is raised only if neither kind has the name."""
        refused: Exception | None = None
        for read, patch in (
            (self._admission.read_mutating_webhook_configuration,
             self._admission.patch_mutating_webhook_configuration),
            (self._admission.read_validating_webhook_configuration,
             self._admission.patch_validating_webhook_configuration),
        ):  # fmt: skip
            try:
                current = read(configuration)
            except self._client.exceptions.ApiException as exc:
                if exc.status == 404:
                    continue
                if exc.status == 403:
                    refused = exc
                    continue
                raise
            ops = [
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle}
                for i, hook in enumerate(current.webhooks or [])
                if hook.client_config.ca_bundle != ca_bundle
            ]
            if ops:
                patch(configuration, ops)
            return len(ops)
        if refused is not None:
            raise refused
        raise ApiFailure(f"set caBundle of {configuration}", 404, "no such webhook configuration")


def object_kinds() -> dict[tuple[str, str], Kind]:
    """The API resource of every kind autowrap wraps, from the adapters themselves, by
    (apiVersion, kind)."""
    found = {}
    for adapter in kinds.KINDS:
        group, _, version = adapter.api_version.rpartition("/")
        found[(adapter.api_version, adapter.kind)] = Kind(
            group, version, adapter.resource, adapter.kind
        )
    return found
