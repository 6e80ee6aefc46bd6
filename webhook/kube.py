"""The only module that talks to the Kubernetes API.

The official client is synchronous, so every call runs in a small bounded thread pool and is
awaited with the remaining admission budget: the event loop never blocks, and no call outlives
the apiserver's ``?timeout=``. Reads that would otherwise happen per request (namespace labels,
LocalQueues, whether Kueue is installed) are cached with a short time to live.

``API_CALLS`` lists every (group, resource, verb) this module uses with the serving identity;
``deploy/`` grants exactly these (a test holds the two together).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import orjson

from webhook import names

API_CALLS: Final = (
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "create"),
    (names.APPWRAPPER_GROUP, names.APPWRAPPER_PLURAL, "get"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ("kueue.x-k8s.io", "localqueues", "list"),
    ("", "namespaces", "get"),
)
# The AppWrapper operator's userRBACAdmissionCheck (on by default) asks whether the creator of
# an AppWrapper may create each of its components. autowrap creates the AppWrappers, so its
# identity needs create on what it wraps: Volcano Jobs, Pods and a Pod's headless Service.
# Users cannot reach these grants: the apiserver authorized their own create of the object
# before admission, and the SubjectAccessReview above checks they may create AppWrappers.
COMPONENT_CREATE: Final = (
    ("batch.volcano.sh", "jobs", "create"),
    ("", "pods", "create"),
    ("", "services", "create"),
)
RBAC: Final = API_CALLS + COMPONENT_CREATE
KUEUE_GROUP: Final = "kueue.x-k8s.io"


class ApiFailure(Exception):
    """A call that did not succeed: ``status`` is the HTTP status, None when nothing answered."""

    def __init__(self, call: str, status: int | None, message: str) -> None:
        super().__init__(f"{call}: {message}")
        self.call = call
        self.status = status
        self.message = message


class AlreadyExists(ApiFailure):
    pass


class NoConfiguration(Exception):
    """No usable client configuration: no in-cluster service account, no kubeconfig."""


@dataclass(frozen=True)
class Identity:
    """Who asked: the user of the admission request, as SubjectAccessReview wants it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class _Cached:
    value: Any
    expires: float


class KubeClient:
    def __init__(
        self,
        api_client: Any,
        *,
        workers: int = 8,
        clock: Callable[[], float] = time.monotonic,
        namespace_ttl: float = 60.0,
        queue_ttl: float = 30.0,
        discovery_ttl: float = 300.0,
    ) -> None:
        from kubernetes import client

        self._client = client
        self._api_client = api_client
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._authz: Any = client.AuthorizationV1Api(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self._apis: Any = client.ApisApi(api_client)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kube")
        self._clock = clock
        self._ttl = {"ns": namespace_ttl, "lq": queue_ttl, "disc": discovery_ttl}
        self._cache: dict[tuple[str, str], _Cached] = {}

    @classmethod
    def from_config(cls, kubeconfig: str | None, **kwargs: Any) -> KubeClient:
        """In-cluster config without a kubeconfig path when running in a pod, else kubeconfig."""
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
        # One attempt per call: the admission budget, not urllib3, decides about retries.
        configuration.retries = 0
        return cls(client.ApiClient(configuration), **kwargs)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._api_client.close()

    async def _call(
        self, name: str, timeout: float, fn: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        if timeout <= 0:
            raise ApiFailure(name, None, "no time left in the admission budget")
        kw["_request_timeout"] = timeout
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, lambda: fn(*args, **kw))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise ApiFailure(name, None, f"no answer within {timeout:.1f}s") from None
        except self._client.exceptions.ApiException as exc:
            message = _status_message(exc.body) or str(exc.reason or "")
            if exc.status == 409 and "AlreadyExists" in str(exc.body):
                raise AlreadyExists(name, 409, message) from None
            raise ApiFailure(name, exc.status or None, message) from None
        except Exception as exc:  # urllib3 connection errors and the like: nothing answered
            raise ApiFailure(name, None, f"{type(exc).__name__}: {exc}") from None

    # --- AppWrappers ---------------------------------------------------------------------

    async def create_appwrapper(
        self, namespace: str, body: dict[str, Any], *, dry_run: bool, timeout: float
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        result: dict[str, Any] = await self._call(
            "create appwrapper", timeout, self._custom.create_namespaced_custom_object,
            names.APPWRAPPER_GROUP, names.APPWRAPPER_VERSION, namespace,
            names.APPWRAPPER_PLURAL, body, **kwargs,
        )  # fmt: skip
        return result

    async def get_appwrapper(
        self, namespace: str, name: str, *, timeout: float
    ) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._call(
                "get appwrapper", timeout, self._custom.get_namespaced_custom_object,
                names.APPWRAPPER_GROUP, names.APPWRAPPER_VERSION, namespace,
                names.APPWRAPPER_PLURAL, name,
            )  # fmt: skip
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise
        return result

    # --- authorization ---------------------------------------------------------------------

    async def may_create_appwrappers(
        self, who: Identity, namespace: str, *, timeout: float
    ) -> tuple[bool, str]:
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
        result = await self._call(
            "create subjectaccessreview", timeout, self._authz.create_subject_access_review, body,
            _preload_content=False,
        )  # fmt: skip
        status = orjson.loads(result.data).get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or "")

    # --- cached reads ------------------------------------------------------------------------

    def _cached(self, kind: str, key: str) -> _Cached | None:
        entry = self._cache.get((kind, key))
        return entry if entry is not None and entry.expires > self._clock() else None

    def _store(self, kind: str, key: str, value: Any) -> Any:
        self._cache[(kind, key)] = _Cached(value, self._clock() + self._ttl[kind])
        return value

    async def namespace_labels(self, namespace: str, *, timeout: float) -> dict[str, str]:
        hit = self._cached("ns", namespace)
        if hit is not None:
            labels: dict[str, str] = hit.value
            return labels
        try:
            result = await self._call(
                "get namespace", timeout, self._core.read_namespace, namespace,
                _preload_content=False,
            )  # fmt: skip
        except ApiFailure as exc:
            if exc.status == 404:
                return self._store("ns", namespace, {})  # type: ignore[no-any-return]
            raise
        found = (orjson.loads(result.data).get("metadata") or {}).get("labels") or {}
        return self._store("ns", namespace, dict(found))  # type: ignore[no-any-return]

    async def kueue_version(self, *, timeout: float) -> str | None:
        """The served LocalQueue API version, or None where Kueue is not installed."""
        hit = self._cached("disc", KUEUE_GROUP)
        if hit is not None:
            cached: str | None = hit.value
            return cached
        groups = await self._call("discover api groups", timeout, self._apis.get_api_versions)
        version = None
        for group in groups.groups or []:
            if group.name == KUEUE_GROUP:
                preferred = group.preferred_version
                version = preferred.version if preferred else group.versions[0].version
        return self._store("disc", KUEUE_GROUP, version)  # type: ignore[no-any-return]

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
        hit = self._cached("lq", namespace)
        if hit is not None and queue in hit.value:
            return True
        result = await self._call(
            "list localqueues", timeout, self._custom.list_namespaced_custom_object,
            KUEUE_GROUP, version, namespace, "localqueues", _preload_content=False,
        )  # fmt: skip
        items = orjson.loads(result.data).get("items") or []
        queues = frozenset(str((i.get("metadata") or {}).get("name")) for i in items)
        self._store("lq", namespace, queues)
        return queue in queues


def _status_message(body: object) -> str:
    if not body:
        return ""
    try:
        data = orjson.loads(body if isinstance(body, bytes | str) else str(body))
    except orjson.JSONDecodeError:
        return str(body)[:300]
    return str(data.get("message") or "") if isinstance(data, dict) else ""


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
        try:
            secret = self._core.read_namespaced_secret(name, namespace)
        except self._client.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(secret.data or {})

    def write_secret(
        self, namespace: str, name: str, data: dict[str, str], *, create: bool
    ) -> bool:
        """Create or replace the Secret; False when another replica created it first."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }
        try:
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
        """Point every webhook of a configuration at the CA; returns how many changed."""
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
                raise
            ops = [
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle}
                for i, hook in enumerate(current.webhooks or [])
                if hook.client_config.ca_bundle != ca_bundle
            ]
            if ops:
                patch(configuration, ops)
            return len(ops)
        raise ApiFailure(f"set caBundle of {configuration}", 404, "no such webhook configuration")
