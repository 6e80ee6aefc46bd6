"""The storage layer of the fake cluster: objects, resource versions, watches and the GC.

Behaviour follows k8s.io/apiserver pkg/registry/generic/registry/store.go @24a394e5 (cited as
``store.go:N``) and the watch cache of pkg/storage/cacher. Everything is synchronous and runs
on the event loop's thread, so one write is atomic with respect to every other coroutine; the
garbage collector runs to a fixpoint inside the write that triggered it (upstream it is an
asynchronous controller, so tests must not assume it is slower than this).

Known simplifications: no admission here (that is the :class:`FakeCluster`'s front door), GC
deletions bypass admission webhooks, and the watch history is one global window.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import copy
import datetime
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from testbed import prerequisites, schemas
from testbed.apiserver import (
    METADATA_NAME_LABEL,
    generate_name,
    rfc3339_now,
    selector_matches,
    status_json,
)
from testbed.cluster import fields as managed
from testbed.cluster import patches, poddefaults, podupdate
from testbed.cluster.common import parse_label_selector
from testbed.cluster.resources import (
    ALL,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    PODS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
    find,
)

JsonDict = dict[str, Any]
WriteCallback = Callable[[str, Resource, JsonDict, JsonDict | None], None]

OPTIMISTIC_LOCK_MESSAGE = (  # store.go:263
    "the object has been modified; please apply your changes to the latest version and try again"
)
ORPHAN_FINALIZER = "orphan"  # metav1.FinalizerOrphanDependents
FOREGROUND_FINALIZER = "foregroundDeletion"  # metav1.FinalizerDeleteDependents
NAMESPACE_FINALIZER = "kubernetes"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_POD_GRACE_SECONDS = 30
PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_DNS_LABEL_RE = re.compile(rf"^{_DNS_LABEL}$")
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")


# The kinds whose strategy counts metadata.generation (PrepareForCreate sets 1, a change of
# the spec adds one): pods (KEP-5067), webhook configurations and every custom resource. A
# Service, ConfigMap, Secret, Lease, Event or Namespace has none.
_GENERATION_COUNTED = (PODS, MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS)
# ObjectMeta's fields that Go writes only when they hold something (omitempty).
_OMITTED_EMPTY_META = ("labels", "annotations", "finalizers", "ownerReferences", "managedFields")
# A Pod's maps that Go writes only when they hold something (omitempty on a map); its lists
# all are (every slice of PodSpec and Container but ``containers`` is omitempty).
_POD_OMITTED_EMPTY_MAPS = ("nodeSelector", "overhead")
_CONTAINER_PARTS = ("initContainers", "containers", "ephemeralContainers")


def counts_generation(res: Resource) -> bool:
    return res.custom or res in _GENERATION_COUNTED


def as_go_encodes(res: Resource, obj: JsonDict) -> JsonDict:
    """``obj`` as kube-apiserver stores and serves it, decoded into its Go type and encoded
    again: empty ObjectMeta maps and lists left out (a custom resource's metadata goes through
    ObjectMeta too), and, on a Pod, every empty list of its spec and containers and its empty
    maps (``schedulingGates: []`` once the last gate is removed is no field at all)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in _OMITTED_EMPTY_META:
            if key in meta and meta[key] in ({}, [], None):
                del meta[key]
    spec = obj.get("spec")
    if res == PODS and isinstance(spec, dict):
        for key in [k for k, v in spec.items() if v == [] or v is None]:
            if key != "containers":
                del spec[key]
        for key in _POD_OMITTED_EMPTY_MAPS:
            if spec.get(key) == {}:
                del spec[key]
        for part in _CONTAINER_PARTS:
            for container in spec.get(part) or []:
                if not isinstance(container, dict):
                    continue
                for key in [k for k, v in container.items() if v == [] or v is None]:
                    del container[key]
                resources = container.get("resources")
                if isinstance(resources, dict):
                    for key in ("limits", "requests", "claims"):
                        if resources.get(key) in ({}, []):
                            del resources[key]
    return obj


def _pod_status_update(new: JsonDict, old: JsonDict) -> JsonDict:
    """What ``pods/status`` stores of an update: podStatusStrategy.PrepareForUpdate (kubernetes
    pkg/registry/core/pod/strategy.go:216-233 at 008b3652) keeps the old spec and
    ownerReferences and clears deletionTimestamp (restored from the old object by
    rest.BeforeUpdate, as the system fields below), and keeps everything else the request
    sends: status, and the labels, annotations and finalizers of its metadata. Unlike a
    custom resource's status (apiextensions' statusStrategy copies the old object whole), a
    pod's claim labels can change here."""
    kept = copy.deepcopy(new)
    kept["spec"] = copy.deepcopy(old.get("spec"))
    kept_meta = kept.setdefault("metadata", {})
    for system in (*_SYSTEM_META, "generation", "namespace", "ownerReferences"):
        if system in _meta(old):
            kept_meta[system] = copy.deepcopy(_meta(old)[system])
        else:
            kept_meta.pop(system, None)
    return kept


class ApiError(Exception):
    """A failed request, carrying the metav1.Status kube-apiserver would send."""

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: JsonDict | None = None
    ) -> None:
        super().__init__(message)
        self._status = status_json(code, message, reason, details)

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> ApiError:
        return cls(
            int(status.get("code", 500)),
            str(status.get("message", "")),
            str(status.get("reason") or ""),
            status.get("details"),
        )

    @property
    def status(self) -> int:
        return int(self._status["code"])

    @property
    def reason(self) -> str:
        return str(self._status.get("reason", ""))

    @property
    def message(self) -> str:
        return str(self._status["message"])

    def status_json(self) -> JsonDict:
        return copy.deepcopy(self._status)


def _details(res: Resource, name: str, **extra: Any) -> JsonDict:
    out: JsonDict = {"name": name}
    if res.group:
        out["group"] = res.group
    out["kind"] = res.plural  # apierrors puts the resource in Kind
    out.update(extra)
    return out


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, f'{res.qualified} "{name}" not found', "NotFound", _details(res, name))


def conflict(res: Resource, name: str, why: str) -> ApiError:
    """apierrors.NewConflict (k8s.io/apimachinery pkg/api/errors/errors.go:232)."""
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
        "Conflict",
        _details(res, name),
    )


def invalid(res: Resource, name: str, field: str, cause_type: str, detail: str) -> ApiError:
    """apierrors.NewInvalid with one field error."""
    return ApiError(
        422,
        f'{res.qualified_kind} "{name}" is invalid: {field}: {detail}',
        "Invalid",
        {
            "name": name,
            **({"group": res.group} if res.group else {}),
            "kind": res.kind,
            "causes": [{"reason": cause_type, "message": detail, "field": field}],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def _meta(obj: Mapping[str, Any]) -> JsonDict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(obj: Mapping[str, Any]) -> JsonDict:
    """Everything generation counts: the object minus metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


# -- selectors ---------------------------------------------------------------------------------

Matcher = Callable[[Mapping[str, Any]], bool]


def label_matcher(labels: str | Mapping[str, str] | None) -> Matcher:
    if not labels:
        return lambda _obj: True
    if isinstance(labels, Mapping):
        selector: JsonDict = {"matchLabels": dict(labels)}
    else:
        selector = parse_label_selector(labels)
    return lambda obj: selector_matches(selector, _labels(obj))


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


def field_matcher(res: Resource, fields: str | None) -> Matcher:
    """A field selector over the labels the type supports; others are a 400 like upstream."""
    if not fields:
        return lambda _obj: True
    terms: list[tuple[str, bool, str]] = []
    for term in fields.split(","):
        term = term.strip()
        if not term:
            continue
        negate = "!=" in term
        key, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        key = key.strip()
        if key not in ("metadata.name", "metadata.namespace", *res.field_labels):
            raise bad_request(f'field label not supported: "{key}"')
        terms.append((key, negate, value.strip()))
    return lambda obj: all((_field_value(obj, k) == v) != neg for k, neg, v in terms)


# -- watch plumbing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Event:
    rv: int
    res: Resource
    type: str
    obj: JsonDict
    old: JsonDict | None


@dataclass
class _Watcher:
    res: Resource
    namespace: str | None
    matches: Matcher
    queue: asyncio.Queue[tuple[str, JsonDict]]

    def translate(self, event: _Event) -> tuple[str, JsonDict] | None:
        """The event this watcher sees: selector changes turn into ADDED/DELETED."""
        if event.res != self.res:
            return None
        ns = _meta(event.obj).get("namespace")
        if self.namespace and ns != self.namespace:
            return None
        now = self.matches(event.obj)
        before = event.old is not None and self.matches(event.old)
        if event.type == "DELETED":
            return ("DELETED", event.obj) if now or before else None
        if event.type == "ADDED":
            return ("ADDED", event.obj) if now else None
        if now and before:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before and event.old is not None:
            # The object left the selection: a DELETED event with its previous content at the
            # event's resourceVersion (cacher/cache_watcher.go convertToWatchEvent).
            gone = copy.deepcopy(event.old)
            _meta(gone)["resourceVersion"] = _meta(event.obj).get("resourceVersion")
            return ("DELETED", gone)
        return None


# -- the store ---------------------------------------------------------------------------------


Key = tuple[str, str]  # (namespace, name): "" for the namespace of a cluster-scoped object


class Table(dict[Key, JsonDict]):
    """One resource's objects by key, with the keys also kept in order (``order``), as etcd
    keeps them: a page of a LIST is read from the key after the last page's (a range read
    from the continue key, storage/etcd3/store.go GetList) instead of sorting and filtering
    the whole collection for every page. Objects are written with ``[]`` and removed with
    ``del`` (``pop``, ``update`` and ``setdefault`` would leave ``order`` behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[Key] = []

    def __setitem__(self, key: Key, obj: JsonDict) -> None:
        if key not in self:
            bisect.insort(self.order, key)
        super().__setitem__(key, obj)

    def __delitem__(self, key: Key) -> None:
        super().__delitem__(key)
        del self.order[bisect.bisect_left(self.order, key)]


class Store:
    """Objects by resource, with kube-apiserver's write semantics and a watch history.

    ``history_limit`` is how many events the watch cache keeps: a watch from an older
    resourceVersion gets 410 Expired. ``graceful_pod_deletion`` follows the pod strategy's
    CheckGracefulDelete: a pod bound to a node (``spec.nodeName``) and not terminal is only
    marked for deletion (deletionTimestamp + grace period) until a delete with
    ``grace_period_seconds=0`` arrives, which is what the kubelet sends.
    ``validate_schemas``: custom resources whose CRD is in ../shared/crds are checked against
    its openAPIV3Schema on every write (422 Invalid, like the CR strategy's Validate); unknown
    fields are accepted rather than pruned. Without ../shared/crds that is a warning, or an
    error under AUTOWRAP_TESTS_REQUIRE_ALL (testbed/prerequisites.py).
    """

    def __init__(
        self,
        resources: Iterable[Resource] = ALL,
        *,
        history_limit: int = 10_000,
        require_namespaces: bool = True,
        graceful_pod_deletion: bool = True,
        validate_schemas: bool = True,
    ) -> None:
        self.resources: tuple[Resource, ...] = tuple(resources)
        self.require_namespaces = require_namespaces
        self.graceful_pod_deletion = graceful_pod_deletion
        self.validate_schemas = prerequisites.schema_validation(validate_schemas)
        self._objects: dict[Resource, Table] = {r: Table() for r in self.resources}
        self._rv = 0
        self._history: collections.deque[_Event] = collections.deque(maxlen=history_limit)
        self._oldest_rv = 1  # rv of the oldest event ever retained
        self._watchers: list[_Watcher] = []
        self._callbacks: list[WriteCallback] = []
        self._pending: list[_Event] = []
        self._settling = False
        if NAMESPACES in self._objects:
            for name in SYSTEM_NAMESPACES:
                self.create(NAMESPACES, {"metadata": {"name": name}})

    def serve(self, *resources: Resource) -> None:
        """Serve more resources from now on, empty (a CRD or an API group installed later)."""
        for res in resources:
            if res not in self._objects:
                self.resources += (res,)
                self._objects[res] = Table()

    def load_schemas(self) -> None:
        """Compile the CRD schemas this store checks, ahead of the first write (the fake
        cluster does it before it serves: a first write otherwise spends a second of an
        admission webhook's budget reading a CRD)."""
        if self.validate_schemas:
            for res in self.resources:
                if res.crd_file is not None:
                    schemas.load(res.crd_file, res.version)

    # -- public reads ----------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def served(self, res: Resource) -> bool:
        return res in self._objects

    def _table(self, res: Resource) -> Table:
        table = self._objects.get(res)
        if table is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return table

    @staticmethod
    def _key(res: Resource, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if res.namespaced else "", name)

    def get(self, res: Resource, namespace: str | None, name: str) -> JsonDict | None:
        found = self._table(res).get(self._key(res, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        labels: str | Mapping[str, str] | None = None,
        fields: str | None = None,
    ) -> list[JsonDict]:
        return self.list_page(res, namespace, labels=labels, fields=fields)[0]

    def list_page(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        labels: str | Mapping[str, str] | None = None,
        fields: str | None = None,
        after: Key | None = None,
        limit: int = 0,
        copies: bool = True,
    ) -> tuple[list[JsonDict], bool, int | None]:
        """One page of :meth:`list`, in key order: at most ``limit`` objects (0: all) whose
        (namespace, name) comes after ``after``; whether more match after the page; and how
        many objects follow it, given only when no selector is (None otherwise).

        Read as etcd3's GetList reads a page (storage/etcd3/store.go): from the key after
        ``after`` (the continue key) forward, filtering as it goes, until the page is full and
        one more match is seen, so a page costs what it returns and what it skips, not the
        whole collection (etcd stops at a full page and hands a continue token whenever keys
        remain, matching or not: its last page may come back empty, never this one's). Its ``remainingItemCount`` is the count of keys left in the range,
        and only without a selector ("Instead of returning inaccurate count for non-empty
        selectors, we return nil", ibid.). ``copies=False`` hands over the stored objects
        themselves, for a caller that encodes them before anything else runs (a LIST answer):
        copying every object of every page was most of what a page cost."""
        match_labels, match_fields = label_matcher(labels), field_matcher(res, fields)
        table = self._table(res)
        order = table.order
        start, end = 0, len(order)
        if namespace and res.namespaced:
            start = bisect.bisect_left(order, namespace, key=lambda k: k[0])
            end = bisect.bisect_right(order, namespace, key=lambda k: k[0])
        if after is not None:
            start = max(start, bisect.bisect_right(order, after))
        page: list[JsonDict] = []
        for index in range(start, end):
            obj = table[order[index]]
            if not (match_labels(obj) and match_fields(obj)):
                continue
            if limit and len(page) >= limit:
                return page, True, None if labels or fields else end - index
            page.append(copy.deepcopy(obj) if copies else obj)
        return page, False, None

    def on_write(self, callback: WriteCallback) -> None:
        """``callback(type, resource, object, old)`` after every committed write (and GC)."""
        self._callbacks.append(callback)

    # -- create ----------------------------------------------------------------------------

    def create(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> JsonDict:
        """store.go create (:545-623): system fields, name, then AlreadyExists from storage."""
        new = self.prepare_create(res, obj, field_manager=field_manager)
        return self.commit_create(res, new, dry_run=dry_run)

    def prepare_create(
        self, res: Resource, obj: Mapping[str, Any], *, field_manager: str | None = None
    ) -> JsonDict:
        """Checks and defaults that come before admission (decode, PrepareForCreate)."""
        self._table(res)
        if not isinstance(obj, Mapping):
            raise bad_request("the body of the request was in an unknown format")
        new = copy.deepcopy(dict(obj))
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if meta.get("resourceVersion"):
            # etcd3 store Create refuses it; surfaced as an internal error upstream
            raise ApiError(
                500, "resourceVersion should not be set on objects to be created", "InternalError"
            )
        if res.namespaced:
            if not meta.get("namespace"):
                raise bad_request("an empty namespace may not be set during creation")
        else:
            meta.pop("namespace", None)
        for system in _SYSTEM_META:  # rest.FillObjectMetaSystemFields / BeforeCreate
            meta.pop(system, None)
        if res.status_subresource:  # PrepareForCreate of the CR and pod strategies
            new.pop("status", None)
            if res == PODS:
                new["status"] = {"phase": "Pending"}
        if res == PODS:  # decoding defaults and canonicalises its resources
            poddefaults.default_pod(new)
        if res == NAMESPACES:  # namespace strategy PrepareForCreate
            meta.setdefault("labels", {})[METADATA_NAME_LABEL] = meta.get("name", "")
            new["spec"] = {"finalizers": [NAMESPACE_FINALIZER]}
            new["status"] = {"phase": "Active"}
        if field_manager:
            new = managed.track_update(None, new, res, field_manager)
        return new

    def commit_create(self, res: Resource, new: JsonDict, *, dry_run: bool = False) -> JsonDict:
        """From name generation to storage: store.go:551-555, :569, :596-611."""
        table = self._table(res)
        meta = new["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generate_name(str(meta["generateName"]))
        name = str(meta.get("name") or "")
        self._validate_name(res, name)
        ns = meta.get("namespace") if res.namespaced else None
        if res.namespaced and self.require_namespaces and NAMESPACES in self._objects:
            namespace = self._objects[NAMESPACES].get(("", str(ns)))
            if namespace is None:
                raise not_found(NAMESPACES, str(ns))
            if _meta(namespace).get("deletionTimestamp"):
                raise ApiError(
                    403,
                    f'{res.plural} "{name}" is forbidden: unable to create new content in '
                    f"namespace {ns} because it is being terminated",
                    "Forbidden",
                    _details(res, name),
                )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339_now()
        if counts_generation(res):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if res == PODS:  # decoded again after the mutating webhooks
            poddefaults.default_pod(new)
        as_go_encodes(res, new)
        self._check_schema(res, new)
        if res == PODS:
            self._check_pod(new, None)
        key = self._key(res, ns, name)
        existing = table.get(key)
        if existing is not None:
            message = f'{res.qualified} "{name}" already exists'
            if _meta(existing).get("deletionTimestamp"):
                message = f"object is being deleted: {message}"  # store.go:605-610
            raise ApiError(409, message, "AlreadyExists", _details(res, name))
        if dry_run:
            return copy.deepcopy(new)
        self._commit(res, "ADDED", new, None)
        self._settle()
        return copy.deepcopy(table.get(key, new))

    def validate(
        self, res: Resource, obj: JsonDict, *, creating: bool, old: JsonDict | None = None
    ) -> None:
        """The strategy's validation of a create or an update, as rest.BeforeCreate and
        rest.BeforeUpdate run it (k8s.io/apiserver pkg/registry/rest/create.go:130-133,
        update.go:154-157 at 24a394e5): the name on create, then a custom resource's CRD
        schema; raises the 422 Invalid. The front door runs it between name generation and
        the validating webhooks (registry/store.go:569 before :575, :825 before :839-843);
        commit_create and commit_update run the same checks, so a direct write gets them too.
        ``old``: the stored object an update replaces (a pod's update is checked against it).
        """
        if creating:
            self._validate_name(res, str(_meta(obj).get("name") or ""))
        self._check_schema(res, obj)
        if res == PODS:
            self._check_pod(obj, old)

    @staticmethod
    def _check_pod(pod: JsonDict, old: JsonDict | None) -> None:
        """The pod strategy's Validate/ValidateUpdate: ValidatePodCreate's gated-pod rule and
        ValidatePodUpdate's frozen spec (testbed/cluster/podupdate.py)."""
        if old is None:
            errors = podupdate.create_errors(pod)
        else:
            errors = podupdate.pod_update_errors(pod, old)
        if errors:
            message, details = podupdate.invalid_pod(str(_meta(pod).get("name") or ""), errors)
            raise ApiError(422, message, "Invalid", details)

    def _check_schema(self, res: Resource, obj: JsonDict) -> None:
        if not self.validate_schemas or res.crd_file is None:
            return
        problems = schemas.errors(obj, res.crd_file, res.version)
        if problems:
            name = str(_meta(obj).get("name", ""))
            field, _, detail = problems[0].partition(": ")
            error = invalid(res, name, field, "FieldValueInvalid", detail)
            causes = [
                {"reason": "FieldValueInvalid", "field": f, "message": d}
                for f, _, d in (p.partition(": ") for p in problems)
            ]
            raise ApiError(422, error.message, "Invalid", {**error.status_json()["details"],
                                                           "causes": causes})  # fmt: skip

    def _validate_name(self, res: Resource, name: str) -> None:
        if not name:
            raise invalid(res, "", "metadata.name", "FieldValueRequired",
                          "Required value: name or generateName is required")  # fmt: skip
        label_only = res in (NAMESPACES,) or res.plural == "services" and not res.group
        ok = (
            (len(name) <= 63 and _DNS_LABEL_RE.match(name))
            if label_only
            else (len(name) <= 253 and _DNS_SUBDOMAIN.match(name))
        )
        if not ok:
            what = "RFC 1123 label" if label_only else "RFC 1123 subdomain"
            raise invalid(
                res, name, "metadata.name", "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )  # fmt: skip

    # -- update ----------------------------------------------------------------------------

    def apply(self, res: Resource, obj: Mapping[str, Any]) -> JsonDict:
        """``obj`` stored as ``kubectl apply`` leaves it: created, or replacing what is stored
        under its name (the stored metadata kept where ``obj`` says nothing of it, at the stored
        resourceVersion)."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") if res.namespaced else None
        current = self.get(res, namespace, meta["name"])
        body = copy.deepcopy(dict(obj))
        if current is None:
            return self.create(res, body)
        body["metadata"] = {**current["metadata"], **body.get("metadata", {}),
                            "resourceVersion": current["metadata"]["resourceVersion"]}  # fmt: skip
        return self.update(res, body)

    def update(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> JsonDict:
        """PUT: optimistic concurrency, status subresource split, finalizer-driven removal."""
        new = self.prepare_update(res, obj, subresource=subresource, field_manager=field_manager)
        return self.commit_update(res, new, subresource=subresource, dry_run=dry_run)

    def prepare_update(
        self,
        res: Resource,
        obj: Mapping[str, Any],
        *,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> JsonDict:
        """The object the update would store, before admission; raises like the real PUT."""
        if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
            raise bad_request("the body of the request was in an unknown format")
        meta = dict(obj["metadata"])
        name = str(meta.get("name") or "")
        old = self._current(res, meta.get("namespace"), name)
        self._check_preconditions(res, old, meta.get("uid"), meta.get("resourceVersion"))
        if not meta.get("resourceVersion") and res.custom:
            # the CR strategy's AllowUnconditionalUpdate is false
            raise invalid(res, name, "metadata.resourceVersion", "FieldValueInvalid",
                          "Invalid value: 0x0: must be specified for an update")  # fmt: skip
        new = copy.deepcopy(dict(obj))
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        if subresource == "status" and res == PODS:
            new = _pod_status_update(new, old)
        elif subresource == "status":  # status strategy PrepareForUpdate: only status changes
            kept = copy.deepcopy(old)
            if "status" in new:
                kept["status"] = new["status"]
            else:
                kept.pop("status", None)
            new = kept
        else:
            if res.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            new_meta = new.setdefault("metadata", {})
            for system in (*_SYSTEM_META, "generation", "namespace"):
                if system in _meta(old):
                    new_meta[system] = copy.deepcopy(_meta(old)[system])
                else:
                    new_meta.pop(system, None)
            if res == NAMESPACES:
                new["spec"] = copy.deepcopy(old.get("spec"))
                new_meta.setdefault("labels", {})[METADATA_NAME_LABEL] = name
            if res == PODS:
                poddefaults.default_pod(new)
        new["metadata"]["resourceVersion"] = _meta(old)["resourceVersion"]
        if _meta(old).get("deletionTimestamp"):
            added = set(_meta(new).get("finalizers") or []) - set(
                _meta(old).get("finalizers") or []
            )
            if added:  # ValidateObjectMetaUpdate
                raise invalid(res, name, "metadata.finalizers", "FieldValueForbidden",
                              "Forbidden: no new finalizers can be added if the object is being "
                              "deleted")  # fmt: skip
        if field_manager:
            new = managed.track_update(old, new, res, field_manager)
        elif "managedFields" not in new["metadata"] and "managedFields" in _meta(old):
            new["metadata"]["managedFields"] = copy.deepcopy(_meta(old)["managedFields"])
        return new

    def commit_update(
        self, res: Resource, new: JsonDict, *, subresource: str = "", dry_run: bool = False
    ) -> JsonDict:
        """GuaranteedUpdate (store.go:709-870): re-check the version, no-op detection."""
        meta = new["metadata"]
        name = str(meta.get("name") or "")
        old = self._current(res, meta.get("namespace"), name)
        self._check_preconditions(res, old, meta.get("uid"), meta.get("resourceVersion"))
        # Only a write of the object itself counts in generation: not its status, nor a pod's
        # binding, which sets spec.nodeName (BindingREST's setPodHostAndAnnotations writes to
        # storage without the pod strategy that counts it: a real pod is bound at generation 1).
        if res == PODS and not subresource:
            poddefaults.default_pod(new)
        as_go_encodes(res, new)
        if not subresource and counts_generation(res) and _body(new) != _body(old):
            meta["generation"] = int(_meta(old).get("generation") or 0) + 1
        self._check_schema(res, new)
        if res == PODS and not subresource:
            self._check_pod(new, old)
        if new == old:
            return copy.deepcopy(old)  # a no-op update is not written (no new resourceVersion)
        if dry_run:
            return copy.deepcopy(new)
        key = self._key(res, meta.get("namespace"), name)
        if self._should_delete_during_update(new, old):  # store.go:628-650, :845-870
            self._remove(res, key, new)
        else:
            self._commit(res, "MODIFIED", new, old)
        self._settle()
        current = self._table(res).get(key)
        return copy.deepcopy(current if current is not None else new)

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        annotations: Mapping[str, str] | None = None,
        dry_run: bool = False,
    ) -> JsonDict:
        """The ``pods/binding`` subresource, as kube-apiserver stores it
        (pkg/registry/core/pod/storage/storage.go ``BindingREST.Create`` →
        ``setPodHostAndAnnotations``): in one write, ``spec.nodeName`` is set, the Binding's
        annotations merged and the ``PodScheduled`` condition set to True (no reason, as
        ``podutil.UpdatePodCondition`` writes it). A pod being deleted, already bound or still
        gated (KEP-3521) is refused with a Conflict on pods/binding (``assignPod``)."""
        old = self._current(PODS, namespace, name)
        self._check_preconditions(PODS, old, uid, resource_version)
        pod = copy.deepcopy(old)
        spec, meta = pod.setdefault("spec", {}), pod["metadata"]
        why = ""
        if meta.get("deletionTimestamp"):
            why = f"pod {name} is being deleted, cannot be assigned to a host"
        elif spec.get("nodeName"):
            why = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        elif spec.get("schedulingGates"):
            why = f"pod {name} has non-empty .spec.schedulingGates"
        if why:
            raise ApiError(409, f'Operation cannot be fulfilled on pods/binding "{name}": {why}',
                           "Conflict", {"name": name, "kind": "pods/binding"})  # fmt: skip
        spec["nodeName"] = node
        if annotations:
            meta.setdefault("annotations", {}).update(annotations)
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        stamp = _rfc3339(_now())
        for condition in conditions:
            if condition.get("type") == "PodScheduled":
                if condition.get("status") != "True":
                    condition["lastTransitionTime"] = stamp
                condition.update(status="True", lastProbeTime=None)
                condition.pop("reason", None)
                condition.pop("message", None)
                break
        else:
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": stamp})  # fmt: skip
        return self.commit_update(PODS, pod, subresource="binding", dry_run=dry_run)

    @staticmethod
    def _should_delete_during_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
        if _meta(new).get("finalizers"):
            return False
        if not _meta(old).get("deletionTimestamp"):
            return False
        return not _meta(old).get("deletionGracePeriodSeconds")

    def _current(self, res: Resource, namespace: Any, name: str) -> JsonDict:
        found = self._table(res).get(self._key(res, str(namespace or ""), name))
        if found is None:
            raise not_found(res, name)
        return found

    @staticmethod
    def _check_preconditions(
        res: Resource, obj: Mapping[str, Any], uid: Any, resource_version: Any
    ) -> None:
        """storage.Preconditions.Check (pkg/storage/interfaces.go:155-170) and the
        optimistic lock of an update (store.go:800-810)."""
        meta, name = _meta(obj), str(_meta(obj).get("name"))
        if uid and uid != meta.get("uid"):
            raise conflict(res, name, f"Precondition failed: UID in precondition: {uid}, "
                                      f"UID in object meta: {meta.get('uid')}")  # fmt: skip
        if resource_version and str(resource_version) != meta.get("resourceVersion"):
            raise conflict(res, name, OPTIMISTIC_LOCK_MESSAGE)

    @staticmethod
    def _check_delete_preconditions(
        res: Resource, obj: Mapping[str, Any], uid: Any, resource_version: Any
    ) -> None:
        """rest.BeforeDelete (k8s.io/apiserver pkg/registry/rest/delete.go), which checks a
        delete's preconditions before storage does, in its own words and under the object's
        kind: ``Operation cannot be fulfilled on Pod "x": the UID in the precondition ...``."""
        meta, name = _meta(obj), str(_meta(obj).get("name"))
        if uid and uid != meta.get("uid"):
            why = (f"the UID in the precondition ({uid}) does not match the UID in record "
                   f"({meta.get('uid')}). The object might have been deleted and then recreated")  # fmt: skip
        elif resource_version and str(resource_version) != meta.get("resourceVersion"):
            why = (f"the ResourceVersion in the precondition ({resource_version}) does not match "
                   f"the ResourceVersion in record ({meta.get('resourceVersion')}). The object "
                   "might have been modified")  # fmt: skip
        else:
            return
        details: JsonDict = {"name": name, "kind": res.kind}
        if res.group:
            details["group"] = res.group
        raise ApiError(409, f'Operation cannot be fulfilled on {res.qualified_kind} "{name}": {why}',
                       "Conflict", details)  # fmt: skip

    # -- patch and apply -------------------------------------------------------------------

    def patched(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        *,
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
    ) -> tuple[JsonDict | None, JsonDict]:
        """(old, new): the object a PATCH would store, before admission. ``old`` is None when
        an apply creates the object."""
        allowed = patches.CUSTOM_PATCH_TYPES if res.custom else patches.PATCH_TYPES
        if patch_type not in allowed:
            # handlers/patch.go:86-89 with negotiation/errors.go:84-98
            raise ApiError(
                415,
                "the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(allowed)}",
                "UnsupportedMediaType",
            )
        if isinstance(body, (bytes, str)):
            try:
                body = (
                    yaml.safe_load(body) if patch_type == patches.APPLY_PATCH else json.loads(body)
                )
            except (ValueError, yaml.YAMLError) as exc:
                raise bad_request(f"error decoding patch: {exc}") from exc
        found = self._table(res).get(self._key(res, namespace, name))
        if patch_type == patches.APPLY_PATCH:
            if not field_manager:
                # ValidatePatchOptions, refused as an Invalid PatchOptions (handlers/patch.go)
                raise ApiError(
                    422,
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                    "is required for apply patch",
                    "Invalid",
                    {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                        {"reason": "FieldValueRequired", "field": "fieldManager",
                         "message": "Required value: is required for apply patch"}]},
                )  # fmt: skip
            if not isinstance(body, Mapping):
                raise bad_request("the body of the request was in an unknown format")
            applied = copy.deepcopy(dict(body))
            applied.setdefault("metadata", {})
            named = _meta(applied).get("name", name)
            applied["metadata"]["name"] = name
            if res.namespaced:
                applied["metadata"]["namespace"] = namespace
            try:
                merged = managed.apply(found, applied, res, field_manager, force=force)
            except managed.ApplyConflict as exc:
                raise ApiError(409, str(exc), "Conflict", {"causes": exc.causes()}) from exc
            # The name is checked on the patched object (patch.go: after the apply merged).
            if named != name:
                raise bad_request(f"the name of the object ({named}) does not match the name "
                                  f"on the URL ({name})")  # fmt: skip
            if found is None:
                merged["metadata"].pop("resourceVersion", None)
                return None, self.prepare_create(res, merged)
            merged["metadata"]["resourceVersion"] = _meta(found)["resourceVersion"]
            return copy.deepcopy(found), self.prepare_update(res, merged, subresource=subresource)
        if found is None:
            raise not_found(res, name)
        try:
            if patch_type == patches.JSON_PATCH:
                result = patches.json_patch(found, body)
            elif patch_type == patches.MERGE_PATCH:
                if not isinstance(body, Mapping):
                    raise patches.PatchError("the body of the request was in an unknown format")
                result = patches.merge_patch(found, body)
            else:
                result = patches.strategic_merge_patch(found, body, res.kind)
        except patches.PatchError as exc:
            raise ApiError(exc.code, str(exc), "Invalid" if exc.code == 422 else None) from exc
        result.setdefault("metadata", {})
        if _meta(result).get("name") != name:
            raise bad_request("the name of the object does not match the name on the URL")
        # a resourceVersion the patch did not change is the one just read: no precondition
        return copy.deepcopy(found), self.prepare_update(
            res, result, subresource=subresource, field_manager=field_manager
        )

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: str,
        *,
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> JsonDict:
        old, new = self.patched(res, namespace, name, body, patch_type, subresource=subresource,
                                field_manager=field_manager, force=force)  # fmt: skip
        if old is None:
            return self.commit_create(res, new, dry_run=dry_run)
        return self.commit_update(res, new, subresource=subresource, dry_run=dry_run)

    # -- delete ----------------------------------------------------------------------------

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = "Background",
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> JsonDict | None:
        """store.go Delete (:1203-1293). Returns the object as it is after the call: with a
        deletionTimestamp while finalizers (or a pod's grace period) hold it, else as it was
        when removed. ``None`` is never returned for an existing object."""
        old = self._current(res, namespace, name)
        self._check_delete_preconditions(res, old, uid, resource_version)
        if propagation is not None and propagation not in PROPAGATION_POLICIES:
            raise invalid(res, name, "propagationPolicy", "FieldValueNotSupported",
                          f'Unsupported value: "{propagation}": supported values: '
                          '"Background", "Foreground", "Orphan"')  # fmt: skip
        key = self._key(res, namespace, name)
        obj = copy.deepcopy(old)
        meta = obj["metadata"]
        grace = self._grace_period(res, obj, grace_period_seconds)
        if meta.get("deletionTimestamp"):  # a pending deletion: finalizers cannot change now
            if grace == 0 and meta.get("deletionGracePeriodSeconds") and not meta.get("finalizers"):
                if dry_run:
                    return obj
                self._remove(res, key, obj)
                self._settle()
                return obj
            return obj
        finalizers = [
            f
            for f in meta.get("finalizers") or []
            if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)
        ]
        policy = propagation or self._finalizer_policy(meta.get("finalizers") or [])
        if policy == "Orphan":  # store.go:955-1000
            finalizers.append(ORPHAN_FINALIZER)
        elif policy == "Foreground":  # store.go:1004-1038
            finalizers.append(FOREGROUND_FINALIZER)
        if finalizers or grace or res == NAMESPACES:
            if int(meta.get("generation") or 0) > 0:  # markAsDeleting, store.go:1088-1093
                meta["generation"] = int(meta["generation"]) + 1
            deadline = _now() + datetime.timedelta(seconds=grace)
            meta["deletionTimestamp"] = _rfc3339(deadline)
            meta["deletionGracePeriodSeconds"] = grace
            if finalizers:
                meta["finalizers"] = finalizers
            else:
                meta.pop("finalizers", None)
            if res == NAMESPACES:
                obj.setdefault("status", {})["phase"] = "Terminating"
            if dry_run:
                return obj
            self._commit(res, "MODIFIED", obj, old)
            self._settle()
            current = self._table(res).get(key)
            return copy.deepcopy(current if current is not None else obj)
        if res == PODS:
            # The pod strategy deletes gracefully even with no grace period: BeforeDelete
            # stamps the deletion (and counts it in generation), the update is stored, then
            # the pod is removed, and the delete answers the stamped pod
            # (store.go updateForGracefulDeletionAndFinalizers, deleteImmediately).
            if int(meta.get("generation") or 0) > 0:
                meta["generation"] = int(meta["generation"]) + 1
            meta["deletionTimestamp"] = rfc3339_now()
            meta["deletionGracePeriodSeconds"] = 0
            if not dry_run:
                self._commit(res, "MODIFIED", obj, old)
                obj = copy.deepcopy(obj)
        if dry_run:
            return obj
        self._remove(res, key, obj)
        self._settle()
        return obj

    @staticmethod
    def _finalizer_policy(finalizers: list[str]) -> str:
        if ORPHAN_FINALIZER in finalizers:
            return "Orphan"
        if FOREGROUND_FINALIZER in finalizers:
            return "Foreground"
        return "Background"

    def _grace_period(self, res: Resource, obj: Mapping[str, Any], requested: int | None) -> int:
        """Pod strategy CheckGracefulDelete: only bound, non-terminal pods wait."""
        if res != PODS or not self.graceful_pod_deletion:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        if requested is not None:
            return max(int(requested), 0)
        return int(spec.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_SECONDS))

    # -- watch -----------------------------------------------------------------------------

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        labels: str | Mapping[str, str] | None = None,
        fields: str | None = None,
        bookmark_interval: float | None = None,
        initial_events_end: bool = False,
    ) -> Watch:
        """ADDED/MODIFIED/DELETED (and BOOKMARK) events, the cacher's Watch semantics.

        No ``resource_version`` (or "0"): synthetic ADDED for every current object, then
        changes. A number: every change after it, or ApiError 410 Expired, raised here, when
        it is older than the retained history (watch_cache_history.go:236-238).
        ``bookmark_interval``: a BOOKMARK whenever no event came for that long.
        ``initial_events_end``: after the initial ADDED events, the bookmark annotated
        ``k8s.io/initial-events-end`` (watch-list, KEP-3157).
        The watch is registered at once (no event can fall between this call and the first
        ``anext``); ``aclose()`` it, or exhaust it, to unregister.
        """
        self._table(res)
        matches = _and(label_matcher(labels), field_matcher(res, fields))
        watcher = _Watcher(res, namespace, matches, asyncio.Queue())
        backlog: list[tuple[str, JsonDict]] = []
        if resource_version in (None, "", "0"):
            current = sorted(
                self.list(res, namespace, labels=labels, fields=fields),
                key=lambda o: int(_meta(o).get("resourceVersion") or 0),
            )
            backlog = [("ADDED", obj) for obj in current]
        else:
            try:
                since = int(str(resource_version))
            except ValueError as exc:
                raise bad_request(f'invalid resource version "{resource_version}"') from exc
            oldest = self._history[0].rv if self._history else self._rv + 1
            if since < oldest - 1:
                raise ApiError(410, f"too old resource version: {since} ({oldest - 1})", "Expired")
            for event in self._history:
                if event.rv > since:
                    seen = watcher.translate(event)
                    if seen is not None:
                        backlog.append((seen[0], copy.deepcopy(seen[1])))
        if initial_events_end:
            backlog.append(("BOOKMARK", self._bookmark(res, initial_end=True)))
        for item in backlog:
            watcher.queue.put_nowait(item)
        self._watchers.append(watcher)
        return Watch(self, watcher, bookmark_interval)

    def _bookmark(self, res: Resource, *, initial_end: bool = False) -> JsonDict:
        meta: JsonDict = {"resourceVersion": str(self._rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}

    def retains(self, resource_version: int) -> bool:
        """Whether a read at ``resource_version`` can still be served: it is not older than
        the retained history (what a compaction removed is gone)."""
        oldest = self._history[0].rv if self._history else self._rv + 1
        return resource_version >= oldest - 1

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does: older watches get 410."""
        self._history.clear()

    # -- commit, removal and the garbage collector -----------------------------------------

    def _commit(self, res: Resource, event_type: str, obj: JsonDict, old: JsonDict | None) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = self._key(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if event_type == "DELETED":
            table = self._table(res)
            if key in table:
                del table[key]
        else:
            self._table(res)[key] = copy.deepcopy(obj)
        event = _Event(self._rv, res, event_type, copy.deepcopy(obj),
                       copy.deepcopy(old) if old is not None else None)  # fmt: skip
        self._history.append(event)
        for watcher in self._watchers:
            seen = watcher.translate(event)
            if seen is not None:
                watcher.queue.put_nowait((seen[0], copy.deepcopy(seen[1])))
        self._pending.append(event)

    def _remove(self, res: Resource, key: tuple[str, str], obj: JsonDict) -> None:
        old = self._table(res).get(key)
        self._commit(res, "DELETED", copy.deepcopy(obj), old)

    def _flush(self) -> None:
        events, self._pending = self._pending, []
        for event in events:
            for callback in list(self._callbacks):
                callback(event.type, event.res, copy.deepcopy(event.obj),
                         copy.deepcopy(event.old) if event.old is not None else None)  # fmt: skip

    def _all(self) -> list[tuple[Resource, JsonDict]]:
        return [(res, obj) for res, table in self._objects.items() for obj in table.values()]

    def _owner_state(self, ref: Mapping[str, Any], namespace: str) -> tuple[str, JsonDict | None]:
        """ "absent", "present", "foreground" (being deleted in foreground) or "unknown"."""
        res = find(self.resources, str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
        if res is None:
            return "unknown", None  # no REST mapping: the GC cannot decide, so it keeps it
        owner = self._table(res).get(self._key(res, namespace, str(ref.get("name", ""))))
        if owner is None or _meta(owner).get("uid") != ref.get("uid"):
            return "absent", None
        meta = _meta(owner)
        if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (meta.get("finalizers") or []):
            return "foreground", owner
        return "present", owner

    def _settle(self) -> None:
        """After a write: garbage-collect (unless already inside the GC), then callbacks."""
        if self._settling:
            return
        self._settling = True
        try:
            self._collect_garbage()
        finally:
            self._settling = False
        self._flush()

    def _collect_garbage(self) -> None:
        """The garbage collector and namespace controller, run to a fixpoint.

        pkg/controller/garbagecollector: a dependent all of whose owners are absent is deleted
        (with Foreground propagation when an owner waits for it); dangling references next to
        live owners are removed; ``orphan`` owners first strip their dependents' references;
        ``foregroundDeletion`` owners lose the finalizer once no dependent with
        blockOwnerDeletion remains. The namespace controller empties a terminating namespace
        and removes it once empty.
        """
        for _ in range(10_000):
            if not self._gc_step():
                return
        raise RuntimeError("garbage collection did not settle")

    def _gc_step(self) -> bool:
        for res, obj in self._all():
            meta = _meta(obj)
            refs = meta.get("ownerReferences") or []
            if not refs:
                continue
            ns = str(meta.get("namespace") or "")
            states = [self._owner_state(ref, ns) for ref in refs]
            kinds = [s for s, _ in states]
            if all(k in ("absent", "foreground") for k in kinds):
                if meta.get("deletionTimestamp"):
                    continue
                policy = "Foreground" if "foreground" in kinds else "Background"
                self.delete(res, ns or None, str(meta["name"]), propagation=policy,
                            grace_period_seconds=None)  # fmt: skip
                return True
            if "absent" in kinds:
                kept = [r for r, (k, _) in zip(refs, states, strict=True) if k != "absent"]
                self._gc_update(
                    res, obj, lambda m, kept=kept: m.__setitem__("ownerReferences", kept)
                )
                return True
        for res, obj in self._all():
            meta = _meta(obj)
            if not meta.get("deletionTimestamp"):
                continue
            finalizers = list(meta.get("finalizers") or [])
            if ORPHAN_FINALIZER in finalizers:
                for dep_res, dep in self._dependents(meta.get("uid")):
                    uid = meta.get("uid")
                    self._gc_update(dep_res, dep, lambda m, uid=uid: _drop_owner(m, uid))
                self._gc_update(res, obj, lambda m: _drop_finalizer(m, ORPHAN_FINALIZER))
                return True
            if FOREGROUND_FINALIZER in finalizers:
                blocking = [
                    d for d_res, d in self._dependents(meta.get("uid"))
                    if any(r.get("uid") == meta.get("uid") and r.get("blockOwnerDeletion")
                           for r in _meta(d).get("ownerReferences") or [])
                ]  # fmt: skip
                if not blocking:
                    self._gc_update(res, obj, lambda m: _drop_finalizer(m, FOREGROUND_FINALIZER))
                    return True
            if res == NAMESPACES:
                name = str(meta["name"])
                content = [
                    (r, o) for r, o in self._all()
                    if r.namespaced and _meta(o).get("namespace") == name
                ]  # fmt: skip
                live = [(r, o) for r, o in content if not _meta(o).get("deletionTimestamp")]
                if live:
                    r, o = live[0]
                    self.delete(r, name, str(_meta(o)["name"]), grace_period_seconds=0)
                    return True
                if not content:
                    self._remove(res, ("", name), copy.deepcopy(obj))
                    return True
        return False

    def _dependents(self, uid: Any) -> list[tuple[Resource, JsonDict]]:
        return [
            (res, obj)
            for res, obj in self._all()
            if any(r.get("uid") == uid for r in _meta(obj).get("ownerReferences") or [])
        ]

    def _gc_update(self, res: Resource, obj: JsonDict, change: Callable[[JsonDict], None]) -> None:
        new = copy.deepcopy(obj)
        change(new["metadata"])
        key = self._key(res, new["metadata"].get("namespace"), new["metadata"]["name"])
        if self._should_delete_during_update(new, obj):
            self._remove(res, key, new)
        else:
            self._commit(res, "MODIFIED", new, obj)


class Watch:
    """One registered watch; an async iterator of ``(type, object)``."""

    def __init__(self, store: Store, watcher: _Watcher, bookmark_interval: float | None) -> None:
        self._store = store
        self._watcher = watcher
        self._interval = bookmark_interval
        self.closed = False

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, JsonDict]:
        if self.closed:
            raise StopAsyncIteration
        queue = self._watcher.queue
        if self._interval is None:
            return await queue.get()
        try:
            async with asyncio.timeout(self._interval):
                return await queue.get()
        except TimeoutError:
            if not queue.empty():
                return queue.get_nowait()
            return "BOOKMARK", self._store._bookmark(self._watcher.res)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            if self._watcher in self._store._watchers:
                self._store._watchers.remove(self._watcher)


def _drop_owner(meta: JsonDict, uid: Any) -> None:
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != uid]
    if refs:
        meta["ownerReferences"] = refs
    else:
        meta.pop("ownerReferences", None)


def _drop_finalizer(meta: JsonDict, finalizer: str) -> None:
    rest = [f for f in meta.get("finalizers") or [] if f != finalizer]
    if rest:
        meta["finalizers"] = rest
    else:
        meta.pop("finalizers", None)


def _and(a: Matcher, b: Matcher) -> Matcher:
    return lambda obj: a(obj) and b(obj)
