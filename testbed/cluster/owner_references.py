"""kube-apiserver's OwnerReferencesPermissionEnforcement admission plugin, for the fake cluster
(off upstream by default, on in OpenShift; adopt-mode.md K4).

Imitates kubernetes plugin/pkg/admission/gc/gc_admission.go ``Validate``: a write that does not
change ``metadata.ownerReferences`` passes; a create may set any ownerReference ("you logically
had the power to never create it"), an update that changes them needs ``delete`` on the object
itself; and each ownerReference that newly sets ``blockOwnerDeletion: true`` needs ``update`` on
the owner's ``finalizers`` subresource. Nothing else is asked: a user may name as owner any
object whose uid they can read, which is why autowrap never trusts an ownerReference alone
(docs/security.md, "What autowrap trusts").

Installed as an in-process validating hook (``FakeCluster.add_validating_webhook``), it answers
as kube-apiserver's plugin does: ``admission.NewForbidden``, a 403 whose message names the
object (``jobs.batch.volcano.sh "train" is forbidden: cannot set an ownerRef …``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from testbed.cluster import rbac as authz
from testbed.cluster.resources import find

JsonDict = dict[str, Any]
NAME = "OwnerReferencesPermissionEnforcement"


def enforcement(cluster: Any) -> Callable[[JsonDict], str | JsonDict | None]:
    """The plugin's check against ``cluster``'s authorizer (its access rules, then its
    default), as a ``deny`` callable for ``cluster.add_validating_webhook(NAME, ...)``."""

    def allowed(user: Mapping[str, Any], attrs: Mapping[str, Any]) -> bool:
        username = str(user.get("username") or "")
        groups = list(user.get("groups") or [])
        otherwise = bool(cluster.default_allow) and username not in cluster.under_rbac
        review = authz.Attributes.of_review(username, groups, attrs)
        return authz.decide(review, cluster.access_rules, cluster.rbac, otherwise=otherwise).allowed

    def forbidden(request: JsonDict, why: str) -> JsonDict:
        """admission.NewForbidden (k8s.io/apiserver pkg/admission/errors.go): a Forbidden
        StatusError on the object, the plugin's error after "is forbidden: "."""
        resource = request.get("resource") or {}
        group, plural = str(resource.get("group") or ""), str(resource.get("resource") or "")
        qualified = f"{plural}.{group}" if group else plural
        name = str(request.get("name") or "")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": 403, "reason": "Forbidden",
                "message": f'{qualified} "{name}" is forbidden: {why}',
                "details": {"name": name, "group": group, "kind": plural}}  # fmt: skip

    def deny(request: JsonDict) -> str | JsonDict | None:
        operation = request.get("operation")
        if operation not in ("CREATE", "UPDATE") or request.get("subResource"):
            return None
        new = _owners(request.get("object"))
        old = _owners(request.get("oldObject"))
        if new == old:
            return None
        user = request.get("userInfo") or {}
        resource = request.get("resource") or {}
        if operation == "UPDATE" and not allowed(user, {
            "verb": "delete", "group": resource.get("group", ""),
            "resource": resource.get("resource", ""), "subresource": "",
            "namespace": request.get("namespace", ""), "name": request.get("name", ""),
        }):  # fmt: skip
            # gc_admission.go: the authorizer's reason and error follow, empty for RBAC's "no".
            return forbidden(
                request, "cannot set an ownerRef on a resource you can't delete: , <nil>"
            )
        before = {str(r.get("uid")) for r in old if r.get("blockOwnerDeletion") is True}
        for ref in new:
            if ref.get("blockOwnerDeletion") is not True or str(ref.get("uid")) in before:
                continue
            owner = find(cluster.store.resources, str(ref.get("apiVersion")), str(ref.get("kind")))
            if owner is None:
                # meta.NoKindMatchError after it, searched in the reference's one version.
                return forbidden(request, (
                    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping "
                    f"for APIVersion {ref.get('apiVersion')} Kind {ref.get('kind')}: no matches "
                    f'for kind "{ref.get("kind")}" in version "{ref.get("apiVersion")}"'
                ))  # fmt: skip
            if not allowed(user, {
                "verb": "update", "group": owner.group, "resource": owner.plural,
                "subresource": "finalizers", "namespace": request.get("namespace", ""),
                "name": str(ref.get("name") or ""),
            }):  # fmt: skip
                return forbidden(request, (
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource "
                    "you can't set finalizers on: , <nil>"
                ))  # fmt: skip
        return None

    return deny


def _owners(obj: Any) -> list[Mapping[str, Any]]:
    if not isinstance(obj, Mapping):
        return []
    metadata = obj.get("metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    return [r for r in refs or [] if isinstance(r, Mapping)]
