"""The fake cluster's authorizer (testbed/cluster/rbac.py): RBAC evaluated as kube-apiserver
evaluates it, applied to autowrap's own requests with the grants deploy/base gives it, and the
403 Forbidden it answers otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.config.kube_config import new_client_from_config

from testbed.apiserver import UserInfo
from testbed.cluster import resources as r
from testbed.cluster.cluster import ADMIN_TOKEN, for_autowrap
from testbed.cluster.common import DEFAULT_TOKEN, service_account_user
from testbed.cluster.rbac import RBAC_GROUP, Attributes, Rbac, forbidden, request_attributes
from tests.support.operator_edits import edit_cluster_role_verbs
from webhook.model import names

AUTOWRAP = service_account_user()
LEASE = names.CONTROLLER_LEASE


def ask(verb: str, group: str, resource: str, namespace: str = "ml", name: str = "",
        subresource: str = "", user: UserInfo = AUTOWRAP) -> Attributes:  # fmt: skip
    return Attributes(user.username, user.groups, verb, group, resource, subresource,
                      namespace, name)  # fmt: skip


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/namespaces/ml/pods", {}, ("list", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/namespaces/ml/pods", {"watch": "true"},
         ("watch", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/namespaces/ml/pods/p", {}, ("get", "", "pods", "", "ml", "p")),
        ("PATCH", "/api/v1/namespaces/ml/pods/p", {}, ("patch", "", "pods", "", "ml", "p")),
        ("POST", "/api/v1/namespaces/ml/pods/p/binding", {},
         ("create", "", "pods", "binding", "ml", "p")),
        ("PUT", "/apis/batch.volcano.sh/v1alpha1/namespaces/ml/jobs/j/status", {},
         ("update", "batch.volcano.sh", "jobs", "status", "ml", "j")),
        ("DELETE", "/api/v1/namespaces/ml/pods", {},
         ("deletecollection", "", "pods", "", "ml", "")),
        # A namespace is its own namespace (requestinfo.go).
        ("GET", "/api/v1/namespaces/ml", {}, ("get", "", "namespaces", "", "ml", "ml")),
        ("GET", "/api/v1/namespaces", {}, ("list", "", "namespaces", "", "", "")),
        ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {},
         ("create", "authorization.k8s.io", "subjectaccessreviews", "", "", "")),
    ],
)  # fmt: skip
def test_request_attributes_follow_request_info(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    attrs = request_attributes(AUTOWRAP, method, path, query)
    assert attrs.path is None
    assert (attrs.verb, attrs.group, attrs.resource, attrs.subresource, attrs.namespace,
            attrs.name) == expected  # fmt: skip


def test_discovery_is_a_non_resource_request() -> None:
    assert request_attributes(AUTOWRAP, "GET", "/apis/batch.volcano.sh/v1alpha1", {}).path == (
        "/apis/batch.volcano.sh/v1alpha1"
    )
    assert request_attributes(AUTOWRAP, "GET", "/version", {}).path == "/version"


def test_the_manifests_grant_autowrap_what_its_controller_does_and_no_more() -> None:
    rbac = Rbac.from_manifests()
    assert rbac.allowed_by(ask("patch", "", "pods", name="p"))
    assert rbac.allowed_by(ask("list", "kueue.x-k8s.io", "workloads"))
    assert not rbac.allowed_by(ask("update", "", "pods", name="p"))
    assert not rbac.allowed_by(ask("patch", "", "pods", name="p", subresource="status"))
    assert not rbac.allowed_by(ask("get", "", "secrets", name="s"))
    assert not rbac.allowed_by(ask("patch", "", "pods", name="p", user=UserInfo("alice")))


def test_a_role_binds_only_in_its_namespace_and_resource_names_need_a_name() -> None:
    rbac = Rbac.from_manifests()
    ns = names.SERVICE_NAMESPACE
    assert rbac.allowed_by(ask("get", "coordination.k8s.io", "leases", ns, LEASE))
    assert rbac.allowed_by(ask("create", "coordination.k8s.io", "leases", ns))
    assert not rbac.allowed_by(ask("get", "coordination.k8s.io", "leases", ns, "another"))
    assert not rbac.allowed_by(ask("list", "coordination.k8s.io", "leases", ns))
    assert not rbac.allowed_by(ask("get", "coordination.k8s.io", "leases", "ml", LEASE))


def test_every_authenticated_user_may_discover_and_ask_about_itself() -> None:
    rbac = Rbac([])
    alice = UserInfo("alice", groups=("system:authenticated",))
    assert rbac.allowed_by(Attributes("alice", alice.groups, "get", path="/apis"))
    assert rbac.allowed_by(ask("create", "authentication.k8s.io", "selfsubjectreviews", "",
                               user=alice))  # fmt: skip
    assert not rbac.allowed_by(Attributes("alice", alice.groups, "get", path="/metrics"))


def test_the_forbidden_status_is_kube_apiservers() -> None:
    status = forbidden(ask("patch", "", "pods", name="train-0")).status_json()
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert status["message"] == (
        'pods "train-0" is forbidden: User "system:serviceaccount:autowrap-system:autowrap" '
        'cannot patch resource "pods" in API group "" in the namespace "ml"'
    )
    assert status["details"] == {"name": "train-0", "kind": "pods"}
    cluster_wide = forbidden(ask("list", "kueue.x-k8s.io", "clusterqueues", "")).message
    assert cluster_wide == (
        'clusterqueues.kueue.x-k8s.io is forbidden: User "system:serviceaccount:autowrap-system:'
        'autowrap" cannot list resource "clusterqueues" in API group "kueue.x-k8s.io" at the '
        "cluster scope"
    )


async def test_autowraps_requests_are_authorized_by_its_role(tmp_path: Path) -> None:
    async with for_autowrap() as fake:
        fake.add_namespace("ml")
        fake.store.create(r.PODS, {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "p", "namespace": "ml"},
                                   "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        async with await new_client_from_config(
            config_file=str(kubeconfig), persist_config=False
        ) as api:
            core = client.CoreV1Api(api)
            patched = await core.patch_namespaced_pod(
                "p", "ml", {"metadata": {"labels": {"a": "b"}}}
            )
            assert patched.metadata.labels == {"a": "b"}
            with pytest.raises(ApiException) as err:
                await core.delete_namespaced_pod("p", "ml")
            assert err.value.status == 403
            with pytest.raises(ApiException) as err:
                await core.list_namespaced_secret("ml")
            assert err.value.status == 403
        assert fake.store.get(r.PODS, "ml", "p") is not None


async def test_a_refusal_reaches_the_client_as_a_status(tmp_path: Path) -> None:
    async with for_autowrap() as fake:
        headers = {"Authorization": f"Bearer {DEFAULT_TOKEN}"}
        async with (
            aiohttp.ClientSession() as session,
            session.delete(f"{fake.url}/api/v1/namespaces/ml/pods/p", headers=headers) as resp,
        ):
            body: dict[str, Any] = await resp.json()
        assert resp.status == 403
        assert body["kind"] == "Status" and body["reason"] == "Forbidden"
        assert body["message"].endswith(
            'cannot delete resource "pods" in API group "" in the namespace "ml"'
        )


async def test_an_explicit_rule_decides_before_rbac_and_reviews_use_the_same_rbac() -> None:
    async with for_autowrap() as fake:
        fake.deny(AUTOWRAP.username, verb="patch", resource="pods", reason="on hold")
        headers = {"Authorization": f"Bearer {DEFAULT_TOKEN}"}
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": AUTOWRAP.username, "groups": list(AUTOWRAP.groups),
                           "resourceAttributes": {"verb": "list", "resource": "pods",
                                                  "namespace": "ml"}}}  # fmt: skip
        async with aiohttp.ClientSession() as session:
            async with session.patch(
                f"{fake.url}/api/v1/namespaces/ml/pods/p", json={}, headers={
                    **headers, "Content-Type": "application/merge-patch+json"},
            ) as resp:  # fmt: skip
                refused: dict[str, Any] = await resp.json()
            async with session.post(
                f"{fake.url}/apis/authorization.k8s.io/v1/subjectaccessreviews",
                json=review,
                headers=headers,
            ) as resp:
                answered: dict[str, Any] = await resp.json()
        assert refused["code"] == 403 and refused["message"].endswith(": on hold")
        assert answered["status"]["allowed"] is True
        assert answered["status"]["reason"].startswith(
            'RBAC: allowed by ClusterRoleBinding "autowrap"'
        )


async def test_each_write_of_a_role_or_binding_decides_the_next_request_and_review(
    tmp_path: Path,
) -> None:
    """The authorizer reads the roles and bindings stored in the API, as kube-apiserver's reads
    its informers' listers: an operator's edit, a new binding or a deleted one decides autowrap's
    next request, and the SubjectAccessReviews about it, with nothing else done."""
    async with for_autowrap() as fake:
        fake.add_namespace("ml")
        for name in ("p", "q"):
            fake.store.create(r.PODS, {"apiVersion": "v1", "kind": "Pod",
                                       "metadata": {"name": name, "namespace": "ml"},
                                       "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
        mine = fake.write_kubeconfig(tmp_path / "autowrap")
        operators = fake.write_kubeconfig(tmp_path / "admin", token=ADMIN_TOKEN)
        async with (
            await new_client_from_config(config_file=str(mine), persist_config=False) as api,
            await new_client_from_config(config_file=str(operators), persist_config=False) as op,
        ):
            core, leases = client.CoreV1Api(api), client.CoordinationV1Api(api)
            rbac = client.RbacAuthorizationV1Api(op)

            async def refused(call: Any) -> int | None:
                """The status of a refused call, None when it got through."""
                try:
                    await call
                except ApiException as exc:
                    return int(exc.status)
                return None

            async def reviewed(verb: str, resource: str, namespace: str, name: str = "") -> bool:
                review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
                    user=AUTOWRAP.username, groups=list(AUTOWRAP.groups),
                    resource_attributes=client.V1ResourceAttributes(
                        verb=verb, resource=resource, namespace=namespace, name=name,
                        group="coordination.k8s.io" if resource == "leases" else "")))  # fmt: skip
                answered = await client.AuthorizationV1Api(op).create_subject_access_review(review)
                return bool(answered.status.allowed)

            label = {"metadata": {"labels": {"a": "b"}}}
            await edit_cluster_role_verbs(operators, "autowrap", "", "pods",
                                          lambda verbs: verbs.remove("patch"))  # fmt: skip
            assert await refused(core.patch_namespaced_pod("p", "ml", label)) == 403
            assert not await reviewed("patch", "pods", "ml", "p")
            await edit_cluster_role_verbs(operators, "autowrap", "", "pods",
                                          lambda verbs: verbs.append("patch"))  # fmt: skip
            assert await refused(core.patch_namespaced_pod("p", "ml", label)) is None
            assert await reviewed("patch", "pods", "ml", "p")

            # A new ClusterRole and its ClusterRoleBinding grant delete; deleting the binding
            # takes it away again.
            assert await refused(core.delete_namespaced_pod("p", "ml")) == 403
            await rbac.create_cluster_role(client.V1ClusterRole(
                metadata=client.V1ObjectMeta(name="pod-deleter"),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"],
                                           verbs=["delete"])]))  # fmt: skip
            assert await refused(core.delete_namespaced_pod("p", "ml")) == 403
            await rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
                metadata=client.V1ObjectMeta(name="autowrap-deletes-pods"),
                role_ref=client.V1RoleRef(api_group=RBAC_GROUP, kind="ClusterRole",
                                          name="pod-deleter"),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="autowrap",
                                               namespace=names.SERVICE_NAMESPACE)]))  # fmt: skip
            assert await reviewed("delete", "pods", "ml", "p")
            assert await refused(core.delete_namespaced_pod("p", "ml")) is None
            await rbac.delete_cluster_role_binding("autowrap-deletes-pods")
            assert await refused(core.delete_namespaced_pod("q", "ml")) == 403

            # The Role's binding deleted: the Lease in autowrap-system is refused (a 404 before,
            # as the read was allowed and the Lease does not exist).
            ns = names.SERVICE_NAMESPACE
            assert await refused(leases.read_namespaced_lease(LEASE, ns)) == 404
            await rbac.delete_namespaced_role_binding("autowrap-controller-lease", ns)
            assert await refused(leases.read_namespaced_lease(LEASE, ns)) == 403
            assert not await reviewed("get", "leases", ns, LEASE)
