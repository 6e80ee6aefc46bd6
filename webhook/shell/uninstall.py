"""``autowrap uninstall``: take autowrap out of a cluster leaving nothing to resurrect and
nothing stuck.

Removing autowrap's Deployment and the adoption finalizers by hand is not enough: an AppWrapper
queued for an object that is deleted meanwhile would, once Kueue admits it, make its controller
create the object again from the template, and a prepared object that never ran keeps gated
pods that nothing will release. The steps, in an order where no step undoes an earlier one:

1. the webhook configurations and the ValidatingAdmissionPolicies go (nothing new is prepared,
   and nothing fails closed on a service that is leaving);
2. the controller goes (the Deployment, waited for), so nothing re-adopts what follows;
3. each object autowrap prepared: one that never ran (its AppWrapper never admitted, or none)
   is deleted with its AppWrapper, since it cannot run without autowrap; one that ran keeps
   running under its AppWrapper, and only loses the finalizer;
4. AppWrappers autowrap made for objects that are gone and that never ran are deleted;
5. the rest of the install: its ClusterRoles and bindings (except the one the AppWrapper
   controller needs for the Volcano Jobs it still runs) and its namespace, when the install
   created it: the Namespace carries the annotation autowrap.io/created-by-install, which the
   release writes when it creates the namespace and a ValidatingAdmissionPolicy keeps anyone
   from adding later (deploy/base/namespace-guard.yaml). A namespace the install did not create
   is kept, with whatever else it holds; only autowrap's own objects in it are deleted.

With ``keep_queued`` (a directory), each object deleted because it never ran is first written
there as its user applied it (kubectl's last-applied configuration, else the stored object
without autowrap's bookkeeping), one file per object, for its user to submit again.

Every delete names the uid it read. What is kept, and why, is said as ``kept:`` lines, in a
dry run too. ``dry_run`` says what would be done and does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.core import adoption, provenance
from webhook.core.ports import ApiFailure, Conflict
from webhook.model import names, objects
from webhook.shell.kube import APPWRAPPERS, Kind, KubeClient, object_kinds

PART_OF = "app.kubernetes.io/part-of=autowrap"
TIMEOUT = 30.0
# Kept: the AppWrapper controller still needs it for the Volcano Jobs it runs.
KEPT_CLUSTER_ROLES = frozenset({"autowrap-appwrapper-volcano-jobs"})
# The release writes it on the Namespace it creates (deploy/base/namespace.yaml), only then.
CREATED_BY_INSTALL = "autowrap.io/created-by-install"

_ADMISSION = "admissionregistration.k8s.io"
_WEBHOOK_KINDS = (
    Kind(_ADMISSION, "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
         namespaced=False),
    Kind(_ADMISSION, "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration",
         namespaced=False),
    Kind(_ADMISSION, "v1", "validatingadmissionpolicybindings",
         "ValidatingAdmissionPolicyBinding", namespaced=False),
    Kind(_ADMISSION, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
         namespaced=False),
)  # fmt: skip
_RBAC = "rbac.authorization.k8s.io"
_INSTALL_KINDS = (
    Kind(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    Kind(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
)
_DEPLOYMENTS = Kind("apps", "v1", "deployments", "Deployment")
_PODS = Kind("", "v1", "pods", "Pod")
_NAMESPACES = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
# What the install puts in its namespace besides the Deployment (deploy/, every variant),
# deleted one by one where the namespace itself is kept.
_NAMESPACED_KINDS = (
    Kind("", "v1", "services", "Service"),
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "resourcequotas", "ResourceQuota"),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    Kind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    Kind(_RBAC, "v1", "rolebindings", "RoleBinding"),
    Kind(_RBAC, "v1", "roles", "Role"),
    Kind("cert-manager.io", "v1", "certificates", "Certificate"),
    Kind("cert-manager.io", "v1", "issuers", "Issuer"),
    Kind("", "v1", "serviceaccounts", "ServiceAccount"),
)


@dataclass
class Summary:
    """What was done (or, in a dry run, would be), one line each."""

    actions: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    # What uninstall keeps on purpose, and why (said in a dry run too).
    kept: list[str] = field(default_factory=list)


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _where(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Uninstall:
    def __init__(
        self,
        api: KubeClient,
        *,
        namespace: str,
        dry_run: bool = False,
        say: Callable[[str], None] = print,
        wait_seconds: float = 120.0,
        keep_queued: Path | None = None,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._dry_run = dry_run
        self._keep_queued = keep_queued
        self._say = say
        self._wait_seconds = wait_seconds
        self.summary = Summary()

    def _do(self, text: str) -> bool:
        self.summary.actions.append(text)
        self._say(("would " if self._dry_run else "") + text)
        return not self._dry_run

    def _keep(self, text: str) -> None:
        self.summary.kept.append(text)

    async def _list(
        self, kind: Kind, labels: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        try:
            listed = await self._api.list(kind, namespace, timeout=TIMEOUT, labels=labels)
        except ApiFailure as exc:
            if exc.status == 404:
                return []  # the cluster does not serve the kind: nothing of it to remove
            raise
        return [i for i in listed.get("items") or [] if isinstance(i, dict)]

    async def _delete(self, kind: Kind, obj: dict[str, Any], what: str) -> None:
        namespace, name = _where(obj)
        if self._do(f"delete {what}"):
            # A Conflict: the uid changed, another object of that name, not ours to delete.
            with contextlib.suppress(Conflict):
                await self._api.delete(kind, namespace or None, name, uid=_uid(obj) or None,
                                       timeout=TIMEOUT)  # fmt: skip

    async def run(self) -> Summary:
        for kind in _WEBHOOK_KINDS:
            for obj in await self._list(kind, PART_OF):
                await self._delete(kind, obj, f"{kind.kind} {_where(obj)[1]}")
        await self._stop_controller()
        # Who made an AppWrapper is judged against autowrap's ServiceAccount, not against the
        # administrator running this.
        me = provenance.Me(f"system:serviceaccount:{self._namespace}:{names.SERVICE_NAME}")
        for kind in object_kinds().values():
            for obj in await self._list(kind, names.ADOPTION_LABEL):
                await self._leave(kind, obj, me)
        for appwrapper in await self._list(APPWRAPPERS, f"{names.ADOPTED_LABEL}=true"):
            await self._collect(appwrapper, me)
        for kind in _INSTALL_KINDS:
            for obj in await self._list(kind, PART_OF):
                name = _where(obj)[1]
                if name not in KEPT_CLUSTER_ROLES:
                    await self._delete(kind, obj, f"{kind.kind} {name}")
                else:
                    self._keep(
                        f"{kind.kind} {name}: the AppWrapper controller needs it for the Volcano "
                        "Jobs it still runs; delete it once none is left (kubectl delete "
                        f"clusterrole,clusterrolebinding {name})"
                    )
        await self._remove_namespace()
        return self.summary

    async def _remove_namespace(self) -> None:
        """The namespace goes when the install created it; else only autowrap's objects in it."""
        namespace = await self._api.get(_NAMESPACES, None, self._namespace, timeout=TIMEOUT)
        if namespace is None:
            return
        if objects.annotations_of(namespace).get(CREATED_BY_INSTALL) == "true":
            await self._delete(_NAMESPACES, namespace, f"namespace {self._namespace}")
            return
        for kind in _NAMESPACED_KINDS:
            for obj in await self._list(kind, PART_OF, self._namespace):
                await self._delete(kind, obj, f"{kind.kind} {self._namespace}/{_where(obj)[1]}")
        self._keep(
            f"namespace {self._namespace}: the install did not create it (it has no annotation "
            f"{CREATED_BY_INSTALL}), so it stays, with its labels and everything in it that is "
            "not autowrap's"
        )

    async def _stop_controller(self) -> None:
        """The Deployment goes first and its pods are waited for: a controller still running
        would adopt again what the next steps leave."""
        deployment = await self._api.get(_DEPLOYMENTS, self._namespace, names.SERVICE_NAME,
                                         timeout=TIMEOUT)  # fmt: skip
        if deployment is not None:
            await self._delete(_DEPLOYMENTS, deployment,
                               f"Deployment {self._namespace}/{names.SERVICE_NAME}")  # fmt: skip
        if self._dry_run:
            return
        deadline = time.monotonic() + self._wait_seconds
        selector = f"app.kubernetes.io/name={names.SERVICE_NAME}"
        while True:
            try:
                listed = await self._api.list(_PODS, self._namespace, timeout=TIMEOUT,
                                              labels=selector)  # fmt: skip
            except ApiFailure as exc:
                if exc.status == 404:
                    return
                raise
            if not listed.get("items"):
                return
            if time.monotonic() > deadline:
                raise ApiFailure("wait for autowrap's pods", None,
                                 f"autowrap's pods in {self._namespace} are still there after "
                                 f"{self._wait_seconds:.0f}s; run uninstall again once they "
                                 "are gone")  # fmt: skip
            await asyncio.sleep(1.0)

    async def _leave(self, kind: Kind, obj: dict[str, Any], me: provenance.Me) -> None:
        namespace, name = _where(obj)
        what = f"{kind.kind} {namespace}/{name}"
        aw_name = adoption.appwrapper_name_of(obj)
        appwrapper = (
            await self._api.get(APPWRAPPERS, namespace, aw_name, timeout=TIMEOUT)
            if aw_name
            else None
        )
        ours = (
            appwrapper is not None
            and provenance.stranger(appwrapper, me) is None
            and adoption.owns(appwrapper, obj)
        )
        if (
            ours
            and appwrapper is not None
            and (
                adoption.was_admitted(appwrapper)
                or adoption.phase_of(appwrapper) not in adoption.QUEUED_PHASES
            )
        ):
            await self._drop_finalizer(kind, obj, what)
            self.summary.left.append(f"{what} runs on under AppWrapper {aw_name}")
            return
        self._save(obj, what)
        # The finalizer first: deleting the AppWrapper makes its controller delete the object
        # by name, which would otherwise hang on the finalizer.
        await self._drop_finalizer(kind, obj, what)
        if ours and appwrapper is not None:
            await self._delete(APPWRAPPERS, appwrapper,
                               f"AppWrapper {namespace}/{aw_name} (queued, never admitted)")  # fmt: skip
        await self._delete(kind, obj, f"{what} (it never ran and cannot run without autowrap)")

    def _save(self, obj: dict[str, Any], what: str) -> None:
        """With ``keep_queued``: the object as its user submitted it, in a file of its own."""
        if self._keep_queued is None:
            return
        namespace, name = _where(obj)
        path = self._keep_queued / namespace / f"{str(obj.get('kind')).lower()}-{name}.yaml"
        self._keep(f"{what} as its user submitted it, in {path}: submit it again with "
                   f"kubectl apply -f {path}")  # fmt: skip
        if self._dry_run:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(as_submitted(obj), sort_keys=False), encoding="utf-8")

    async def _drop_finalizer(self, kind: Kind, obj: dict[str, Any], what: str) -> None:
        metadata = obj.get("metadata") or {}
        finalizers = [str(f) for f in metadata.get("finalizers") or []]
        if names.ADOPTION_FINALIZER not in finalizers:
            return
        if not self._do(f"remove the finalizer {names.ADOPTION_FINALIZER} from {what}"):
            return
        namespace, name = _where(obj)
        current: dict[str, Any] | None = obj
        for _ in range(5):  # a conflict is another writer: read again and retry
            if current is None or _uid(current) != _uid(obj):
                return
            metadata = current.get("metadata") or {}
            kept = [str(f) for f in metadata.get("finalizers") or []
                    if f != names.ADOPTION_FINALIZER]  # fmt: skip
            patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                  "finalizers": kept or None}}  # fmt: skip
            try:
                await self._api.patch(kind, namespace, name, patch, timeout=TIMEOUT)
                return
            except Conflict:
                current = await self._api.get(kind, namespace, name, timeout=TIMEOUT)
            except ApiFailure as exc:
                if exc.status == 404:
                    return
                raise
        raise ApiFailure(f"patch {kind.plural}", 409, f"{what} kept changing; run uninstall again")

    async def _collect(self, appwrapper: dict[str, Any], me: provenance.Me) -> None:
        namespace, name = _where(appwrapper)
        if provenance.stranger(appwrapper, me) is not None or adoption.was_admitted(appwrapper):
            return
        if adoption.phase_of(appwrapper) not in adoption.QUEUED_PHASES:
            return
        await self._delete(APPWRAPPERS, appwrapper,
                           f"AppWrapper {namespace}/{name} (queued for an object that is gone)")  # fmt: skip


# Fields the API server writes, never part of what a user submits.
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                  "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")  # fmt: skip
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def as_submitted(obj: dict[str, Any]) -> dict[str, Any]:
    """What a user submitted: kubectl's last-applied configuration where ``kubectl apply``
    created the object, else the stored object without autowrap's bookkeeping (its gate, labels,
    finalizer and ownerReference), status and the fields the API server writes."""
    last = objects.annotations_of(obj).get(_LAST_APPLIED)
    if last:
        with contextlib.suppress(ValueError):
            applied = json.loads(last)
            if isinstance(applied, dict) and applied.get("kind") == obj.get("kind"):
                return applied
    result = adoption.unadopted(obj)
    result.pop("status", None)
    metadata = result.get("metadata")
    if isinstance(metadata, dict):
        for key in _SERVER_FIELDS:
            metadata.pop(key, None)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(_LAST_APPLIED, None)
    return result
