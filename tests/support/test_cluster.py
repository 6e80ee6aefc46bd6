"""The fake cluster: store semantics, then the HTTP API driven by the real kubernetes.aio client."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.config.kube_config import new_client_from_config
from kubernetes.aio.watch import Watch

from testbed import prerequisites
from testbed.apiserver import UserInfo
from testbed.cluster import patches
from testbed.cluster import resources as r
from testbed.cluster.cluster import FakeCluster, for_autowrap
from testbed.cluster.common import parse_label_selector, sanitize_label, service_account_user
from testbed.cluster.store import ApiError, Store
from tests.builders import VolcanoJobBuilder
from webhook.model.names import SERVICE_NAMESPACE

Obj = dict[str, Any]


def pod(name: str, ns: str = "default", **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, **meta},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def owner_ref(owner: Obj, res: r.Resource, **extra: Any) -> Obj:
    return {
        "apiVersion": res.api_version,
        "kind": res.kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        **extra,
    }


# -- store ---------------------------------------------------------------------------------------


def test_store_create_fills_system_fields_and_refuses_duplicates() -> None:
    store = Store()
    created = store.create(r.PODS, pod("", generateName="w-"))
    meta = created["metadata"]
    assert meta["name"].startswith("w-") and len(meta["name"]) == 7
    assert meta["uid"] and meta["creationTimestamp"] and meta["generation"] == 1
    assert meta["resourceVersion"] == store.resource_version
    assert created["status"] == {"phase": "Pending"}
    with pytest.raises(ApiError) as err:
        store.create(r.PODS, pod(meta["name"]))
    assert (err.value.status, err.value.reason) == (409, "AlreadyExists")
    with pytest.raises(ApiError) as err:
        store.create(r.PODS, pod("Bad_Name"))
    assert (err.value.status, err.value.reason) == (422, "Invalid")
    with pytest.raises(ApiError) as err:
        store.create(r.PODS, pod("x", ns="nowhere"))
    assert err.value.status == 404


def test_store_list_pages_walk_the_keys_in_order_through_writes() -> None:
    """Each page is read from the key after the last one's on: the pages of a LIST, with or
    without a selector or a namespace, give what one LIST gives, in (namespace, name) order,
    whatever was created and deleted before; remainingItemCount only comes without a selector
    (etcd3's GetList)."""
    store = Store()
    store.create(r.NAMESPACES, {"metadata": {"name": "b"}})
    for i in (7, 3, 9, 0, 5, 1, 8, 2, 6, 4):
        for ns in ("default", "b"):
            store.create(r.PODS, pod(f"p{i}", ns=ns, labels={"odd": str(i % 2 == 1).lower()}))
    for ns, name in (("b", "p0"), ("default", "p5"), ("b", "p9")):
        store.delete(r.PODS, ns, name)
    store.create(r.PODS, pod("p10", ns="b", labels={"odd": "false"}))

    def walk(namespace: str | None, labels: str | None) -> tuple[list[tuple[str, str]], list[Any]]:
        keys: list[tuple[str, str]] = []
        counts: list[Any] = []
        after = None
        while True:
            items, more, remaining = store.list_page(r.PODS, namespace, labels=labels,
                                                     after=after, limit=3)  # fmt: skip
            keys += [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items]
            if not more:
                return keys, counts
            counts.append(remaining)
            after = keys[-1]

    for namespace in (None, "default", "b"):
        for labels in (None, "odd=true", "odd=false"):
            whole = store.list(r.PODS, namespace, labels=labels)
            expected = sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in whole)
            keys, counts = walk(namespace, labels)
            assert keys == expected, (namespace, labels)
            if labels is not None:
                assert counts == [None] * len(counts)
            else:  # what follows each page in the namespace (or the whole collection)
                assert counts == [len(expected) - 3 * n for n in range(1, len(counts) + 1)]
    assert walk("default", "odd=true")[0] == [("default", f"p{i}") for i in (1, 3, 7, 9)]


def test_store_update_conflict_generation_and_status_split() -> None:
    store = Store()
    job = store.create(r.VCJOBS, {"metadata": {"name": "j", "namespace": "default"},
                                  "spec": {"tasks": [{"name": "t", "replicas": 1}]},
                                  "status": {"state": "x"}})  # fmt: skip
    assert "status" not in job  # the status subresource ignores status on create
    stale = copy.deepcopy(job)
    job["metadata"]["labels"] = {"a": "b"}
    labelled = store.update(r.VCJOBS, job)
    assert labelled["metadata"]["generation"] == 1
    with pytest.raises(ApiError) as err:
        store.update(r.VCJOBS, stale)
    assert (err.value.status, err.value.reason) == (409, "Conflict")
    assert "the object has been modified" in err.value.message
    labelled["spec"]["minAvailable"] = 2
    labelled["status"] = {"state": {"phase": "Running"}}
    bumped = store.update(r.VCJOBS, labelled)
    assert bumped["metadata"]["generation"] == 2 and "status" not in bumped
    bumped["status"] = {"state": {"phase": "Running"}}
    bumped["spec"]["minAvailable"] = 9
    with_status = store.update(r.VCJOBS, bumped, subresource="status")
    assert with_status["status"] == {"state": {"phase": "Running"}}
    assert with_status["spec"]["minAvailable"] == 2
    unconditional = copy.deepcopy(with_status)
    del unconditional["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as err:  # custom resources need a resourceVersion
        store.update(r.VCJOBS, unconditional)
    assert err.value.status == 422


def test_store_finalizers_hold_deletion_until_removed() -> None:
    store = Store()
    store.create(r.VCJOBS, {"metadata": {"name": "j", "namespace": "default",
                                         "finalizers": ["autowrap.io/adoption"]}})  # fmt: skip
    deleting = store.delete(r.VCJOBS, "default", "j")
    assert deleting is not None and deleting["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError) as err:
        store.create(r.VCJOBS, {"metadata": {"name": "j", "namespace": "default"}})
    assert err.value.message.startswith("object is being deleted: ")
    current = store.get(r.VCJOBS, "default", "j")
    assert current is not None
    current["metadata"]["finalizers"].append("more")
    with pytest.raises(ApiError) as err:
        store.update(r.VCJOBS, current)
    assert err.value.status == 422
    current["metadata"]["finalizers"] = []
    store.update(r.VCJOBS, current)
    assert store.get(r.VCJOBS, "default", "j") is None


def test_store_delete_preconditions() -> None:
    store = Store()
    created = store.create(r.CONFIGMAPS, {"metadata": {"name": "c", "namespace": "default"}})
    with pytest.raises(ApiError) as err:
        store.delete(r.CONFIGMAPS, "default", "c", uid="other")
    assert err.value.status == 409
    assert err.value.message.startswith(
        'Operation cannot be fulfilled on ConfigMap "c": the UID in the precondition (other) '
        "does not match the UID in record"
    ), err.value.message
    with pytest.raises(ApiError):
        store.delete(r.CONFIGMAPS, "default", "c", resource_version="1")
    store.delete(r.CONFIGMAPS, "default", "c", uid=created["metadata"]["uid"])
    assert store.get(r.CONFIGMAPS, "default", "c") is None


def _chain(store: Store, block: bool = True) -> tuple[Obj, Obj, Obj]:
    aw = store.create(r.APPWRAPPERS, {"metadata": {"name": "aw", "namespace": "default"}})
    job = store.create(r.VCJOBS, {"metadata": {
        "name": "aw", "namespace": "default",
        "ownerReferences": [owner_ref(aw, r.APPWRAPPERS, controller=True)]}})  # fmt: skip
    member = store.create(r.PODS, pod("aw-0", ownerReferences=[
        owner_ref(job, r.VCJOBS, controller=True, blockOwnerDeletion=block)]))  # fmt: skip
    return aw, job, member


def test_store_background_gc_cascades() -> None:
    store = Store()
    _chain(store)
    store.delete(r.APPWRAPPERS, "default", "aw")
    assert store.list(r.VCJOBS) == [] and store.list(r.PODS) == []


def test_store_foreground_waits_for_blocking_dependents() -> None:
    store = Store()
    _, _, member = _chain(store)
    store.update(r.PODS, {**member, "metadata": {**member["metadata"], "finalizers": ["hold"]}})
    deleting = store.delete(r.APPWRAPPERS, "default", "aw", propagation="Foreground")
    assert deleting is not None and "foregroundDeletion" in deleting["metadata"]["finalizers"]
    assert store.get(r.VCJOBS, "default", "aw") is not None  # held by its blocking pod
    held = store.get(r.PODS, "default", "aw-0")
    assert held is not None and held["metadata"]["deletionTimestamp"]
    held["metadata"]["finalizers"] = []
    store.update(r.PODS, held)
    assert store.get(r.APPWRAPPERS, "default", "aw") is None
    assert store.get(r.VCJOBS, "default", "aw") is None


def test_store_orphan_keeps_dependents_without_the_reference() -> None:
    store = Store()
    _chain(store)
    store.delete(r.APPWRAPPERS, "default", "aw", propagation="Orphan")
    assert store.get(r.APPWRAPPERS, "default", "aw") is None
    job = store.get(r.VCJOBS, "default", "aw")
    assert job is not None and "ownerReferences" not in job["metadata"]
    assert store.get(r.PODS, "default", "aw-0") is not None


def test_store_bound_pod_deletion_is_graceful() -> None:
    store = Store()
    bound = pod("b")
    bound["spec"]["nodeName"] = "node-1"
    store.create(r.PODS, bound)
    marked = store.delete(r.PODS, "default", "b")
    assert marked is not None and marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.get(r.PODS, "default", "b") is not None
    store.delete(r.PODS, "default", "b", grace_period_seconds=0)  # the kubelet's delete
    assert store.get(r.PODS, "default", "b") is None


def test_store_patch_types() -> None:
    store = Store()
    gated = pod("g")
    gated["spec"]["schedulingGates"] = [{"name": "autowrap.io/adoption"}, {"name": "other"}]
    gated["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}]
    store.create(r.PODS, gated)
    smp = {
        "metadata": {"labels": {"x": "1"}, "finalizers": ["f"]},
        "spec": {
            "schedulingGates": [{"name": "autowrap.io/adoption", "$patch": "delete"}],
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}],
        },
    }
    # The patch semantics alone: kube-apiserver would refuse storing this one (a toleration
    # replaced, a container's env changed: ValidatePodUpdate, tests/support/test_pod_update.py).
    merged = patches.strategic_merge_patch(store.get(r.PODS, "default", "g") or {}, smp, "Pod")
    assert merged["spec"]["schedulingGates"] == [{"name": "other"}]
    assert merged["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]  # atomic
    assert merged["spec"]["containers"] == [
        {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
    ]
    allowed = {"metadata": smp["metadata"], "spec": {
        "schedulingGates": smp["spec"]["schedulingGates"],
        "tolerations": [*gated["spec"]["tolerations"], {"key": "b", "operator": "Exists"}]}}  # fmt: skip
    out = store.patch(r.PODS, "default", "g", allowed, "application/strategic-merge-patch+json")
    assert out["spec"]["schedulingGates"] == [{"name": "other"}]
    assert out["metadata"]["labels"]["x"] == "1"
    out = store.patch(r.PODS, "default", "g", {"metadata": {"labels": {"x": None}}},
                      "application/merge-patch+json")  # fmt: skip
    assert "x" not in out["metadata"].get("labels", {})  # an empty map is no field
    out = store.patch(r.PODS, "default", "g",
                      [{"op": "remove", "path": "/spec/schedulingGates/0"}],
                      "application/json-patch+json")  # fmt: skip
    assert "schedulingGates" not in out["spec"]  # a Pod's emptied list is no field
    store.create(r.VCJOBS, {"metadata": {"name": "j", "namespace": "default"}})
    with pytest.raises(ApiError) as err:
        store.patch(r.VCJOBS, "default", "j", {}, "application/strategic-merge-patch+json")
    assert err.value.status == 415


async def test_store_watch_from_version_and_expiry() -> None:
    store = Store()
    start = store.resource_version
    store.create(r.PODS, pod("a", labels={"app": "x"}))
    events = store.watch(r.PODS, "default", resource_version=start, labels="app=x")
    kind, obj = await anext(events)
    assert (kind, obj["metadata"]["name"]) == ("ADDED", "a")
    current = store.get(r.PODS, "default", "a")
    assert current is not None
    current["metadata"]["labels"] = {"app": "y"}
    store.update(r.PODS, current)
    kind, obj = await anext(events)  # leaving the selector is a DELETED
    assert kind == "DELETED"
    await events.aclose()
    store.compact()
    with pytest.raises(ApiError) as err:
        await anext(store.watch(r.PODS, resource_version=start))
    assert (err.value.status, err.value.reason) == (410, "Expired")
    assert "too old resource version" in err.value.message


async def test_store_watch_bookmarks() -> None:
    store = Store()
    events = store.watch(r.PODS, resource_version=store.resource_version, bookmark_interval=0.01)
    kind, obj = await anext(events)
    assert kind == "BOOKMARK" and obj["metadata"]["resourceVersion"] == store.resource_version
    await events.aclose()


def test_store_on_write_sees_gc() -> None:
    store = Store()
    seen: list[tuple[str, str]] = []
    store.on_write(lambda kind, res, obj, old: seen.append((kind, res.plural)))
    _chain(store)
    store.delete(r.APPWRAPPERS, "default", "aw")
    assert ("DELETED", "jobs") in seen and ("DELETED", "pods") in seen


# -- HTTP, driven by the real kubernetes.aio client --------------------------------------------

VC = ("batch.volcano.sh", "v1alpha1")
AW = ("workload.codeflare.dev", "v1beta2")


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(bookmark_interval=0.05) as fake:
        yield fake


@pytest.fixture
async def api(cluster: FakeCluster, tmp_path: Path) -> AsyncIterator[client.ApiClient]:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = await new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    try:
        yield api_client
    finally:
        await api_client.close()


def vcjob(name: str, **meta: Any) -> Obj:
    return VolcanoJobBuilder(name).meta(**meta).build()


async def test_http_pod_crud_and_errors(api: client.ApiClient, cluster: FakeCluster) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("p1", labels={"app": "a"}))
    assert created.metadata.uid and created.status.phase == "Pending"
    read = await core.read_namespaced_pod("p1", "default")
    assert read.metadata.resource_version == created.metadata.resource_version
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("p1"))
    assert err.value.status == 409 and '"AlreadyExists"' in err.value.body
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_pod("missing", "default")
    assert err.value.status == 404
    await core.create_namespaced_pod("default", pod("p2"))
    listed = await core.list_namespaced_pod("default", label_selector="app=a")
    assert [p.metadata.name for p in listed.items] == ["p1"]
    by_field = await core.list_pod_for_all_namespaces(field_selector="metadata.name=p2")
    assert [p.metadata.name for p in by_field.items] == ["p2"]
    stale = copy.deepcopy(read)
    read.metadata.labels = {"app": "b"}
    await core.replace_namespaced_pod("p1", "default", read)
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_pod("p1", "default", stale)
    assert err.value.status == 409 and "the object has been modified" in err.value.body
    dry = await core.create_namespaced_pod("default", pod("p3"), dry_run="All")
    assert dry.metadata.name == "p3"
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("p3", "default")
    deleted = await core.delete_namespaced_pod("p2", "default")
    assert deleted.metadata.name == "p2"
    assert cluster.requests_to("DELETE", r"/pods/p2$")[0].user == "kubernetes-admin"


async def test_http_body_over_3_mib_is_request_entity_too_large(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    # k8s.io/apiserver pkg/endpoints/handlers/rest.go:372-389, pkg/server/config.go:474.
    core = client.CoreV1Api(api)
    big = pod("big", annotations={"pad": "x" * (3 * 1024 * 1024)})
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", big)
    assert err.value.status == 413
    assert json.loads(err.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    }
    assert cluster.store.get(r.PODS, "default", "big") is None
    small = await core.create_namespaced_pod("default", pod("big"))
    small.metadata.annotations = {"pad": "x" * (3 * 1024 * 1024)}
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_pod("big", "default", small)
    assert err.value.status == 413 and "limit is 3145728" in err.value.body


async def test_http_patch_types(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    gated = pod("g")
    gated["spec"]["schedulingGates"] = [{"name": "autowrap.io/adoption"}]
    await core.create_namespaced_pod("default", gated)
    # a dict body goes out as a strategic merge patch
    out = await core.patch_namespaced_pod("g", "default", {
        "metadata": {"labels": {"x": "1"}},
        "spec": {"schedulingGates": [{"name": "autowrap.io/adoption", "$patch": "delete"}]}})  # fmt: skip
    assert not out.spec.scheduling_gates and out.metadata.labels == {"x": "1"}
    out = await core.patch_namespaced_pod(
        "g", "default", [{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]
    )
    assert out.metadata.annotations == {"a": "b"}
    out = await core.patch_namespaced_pod("g", "default", {"metadata": {"labels": None}},
                                          _content_type="application/merge-patch+json")  # fmt: skip
    assert out.metadata.labels is None
    # pods/status keeps the request's labels but never its spec (podStatusStrategy
    # PrepareForUpdate, kubernetes pkg/registry/core/pod/strategy.go:216-233 at 008b3652).
    status = await core.patch_namespaced_pod_status(
        "g", "default", {"status": {"phase": "Running"}, "metadata": {"labels": {"no": "x"}},
                         "spec": {"activeDeadlineSeconds": 5}},
    )  # fmt: skip
    assert status.status.phase == "Running" and status.metadata.labels == {"no": "x"}
    assert status.spec.active_deadline_seconds is None
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(*VC, "default", "jobs", vcjob("j"))
    merged = await custom.patch_namespaced_custom_object(
        *VC, "default", "jobs", "j", {"metadata": {"labels": {"q": "1"}}}
    )
    assert merged["metadata"]["labels"] == {"q": "1"}
    with pytest.raises(ApiException) as err:
        await custom.patch_namespaced_custom_object(
            *VC, "default", "jobs", "j", {"metadata": {}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
    assert err.value.status == 415


async def test_http_server_side_apply_replaces_atomic_tasks(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    manifest = vcjob("j", namespace="default", labels={"team": "a"})
    apply = "application/apply-patch+yaml"
    created = await custom.patch_namespaced_custom_object(
        *VC, "default", "jobs", "j", manifest, field_manager="kubectl", _content_type=apply
    )
    # kube-apiserver answers 201 to an apply that creates (handlers/patch.go); this client
    # maps only 200 for custom objects, so it returns None, as it does against a real cluster
    assert created is None
    first = await custom.get_namespaced_custom_object(*VC, "default", "jobs", "j")
    assert first["metadata"]["labels"] == {"team": "a"}
    managers = {m["manager"]: m for m in first["metadata"]["managedFields"]}
    assert "f:team" in managers["kubectl"]["fieldsV1"]["f:metadata"]["f:labels"]
    # a controller adds a label and changes the task list (as admission would)
    mutated = copy.deepcopy(first)
    mutated["metadata"]["labels"]["owned-by"] = "autowrap"
    mutated["spec"]["tasks"][0]["template"]["spec"]["schedulingGates"] = [{"name": "g"}]
    await custom.replace_namespaced_custom_object(*VC, "default", "jobs", "j", mutated)
    again = await custom.patch_namespaced_custom_object(
        *VC, "default", "jobs", "j", manifest, field_manager="kubectl", _content_type=apply,
        force=True,
    )  # fmt: skip
    assert again["spec"]["tasks"] == manifest["spec"]["tasks"]  # atomic: replaced whole
    assert again["metadata"]["labels"] == {"team": "a", "owned-by": "autowrap"}
    reduced = copy.deepcopy(manifest)
    reduced["metadata"]["labels"] = {}
    dropped = await custom.patch_namespaced_custom_object(
        *VC, "default", "jobs", "j", reduced, field_manager="kubectl", _content_type=apply
    )
    assert dropped["metadata"]["labels"] == {"owned-by": "autowrap"}


async def test_http_apply_conflict_without_force(cluster: FakeCluster) -> None:
    job = vcjob("c", namespace="default")
    await cluster.apply(r.VCJOBS, job, field_manager="one")
    changed = copy.deepcopy(job)
    changed["spec"]["tasks"][0]["replicas"] = 3
    with pytest.raises(ApiError) as err:
        await cluster.apply(r.VCJOBS, changed, field_manager="two")
    assert err.value.status == 409 and 'conflict with "one"' in err.value.message
    forced = await cluster.apply(r.VCJOBS, changed, field_manager="two", force=True)
    assert forced["spec"]["tasks"][0]["replicas"] == 3


async def test_http_delete_finalizers_and_gc(api: client.ApiClient, cluster: FakeCluster) -> None:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    aw = await custom.create_namespaced_custom_object(*AW, "default", "appwrappers", {
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "aw"}, "spec": {"components": []}})  # fmt: skip
    job = vcjob("aw", finalizers=["autowrap.io/adoption"],
                ownerReferences=[owner_ref(aw, r.APPWRAPPERS, controller=True)])  # fmt: skip
    await custom.create_namespaced_custom_object(*VC, "default", "jobs", job)
    stored_job = await custom.get_namespaced_custom_object(*VC, "default", "jobs", "aw")
    await core.create_namespaced_pod("default", pod("aw-worker-0", ownerReferences=[
        owner_ref(stored_job, r.VCJOBS, controller=True, blockOwnerDeletion=True)]))  # fmt: skip
    with pytest.raises(ApiException) as err:
        await custom.delete_namespaced_custom_object(
            *AW, "default", "appwrappers", "aw", body={"preconditions": {"uid": "wrong"}}
        )
    assert err.value.status == 409
    gone = await custom.delete_namespaced_custom_object(
        *AW, "default", "appwrappers", "aw", propagation_policy="Background"
    )
    assert gone["status"] == "Success" and gone["details"]["uid"] == aw["metadata"]["uid"]
    held = await custom.get_namespaced_custom_object(*VC, "default", "jobs", "aw")
    assert held["metadata"]["deletionTimestamp"]  # the GC deleted it; the finalizer holds it
    assert (await core.list_namespaced_pod("default")).items  # the job still exists
    await custom.patch_namespaced_custom_object(
        *VC, "default", "jobs", "aw", [{"op": "remove", "path": "/metadata/finalizers"}],
        _content_type="application/json-patch+json",
    )  # fmt: skip
    assert not (await core.list_namespaced_pod("default")).items
    with pytest.raises(ApiException) as err:
        await custom.get_namespaced_custom_object(*VC, "default", "jobs", "aw")
    assert err.value.status == 404


async def test_http_watch_resume_bookmarks_and_gone(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("w1"))
    listed = await core.list_namespaced_pod("default")
    start = listed.metadata.resource_version
    await core.create_namespaced_pod("default", pod("w2"))
    await core.delete_namespaced_pod("w1", "default")
    seen: list[tuple[str, str]] = []
    watch = Watch()
    async with watch:
        async for event in watch.stream(core.list_namespaced_pod, "default",
                                        resource_version=start, allow_watch_bookmarks=True,
                                        timeout_seconds=30):  # fmt: skip
            if event["type"] == "BOOKMARK":
                seen.append(("BOOKMARK", ""))
                break
            seen.append((event["type"], event["object"].metadata.name))
    # A pod deleted at once is stamped first (deletionTimestamp, a MODIFIED), then removed.
    assert seen == [("ADDED", "w2"), ("MODIFIED", "w1"), ("DELETED", "w1"), ("BOOKMARK", "")]
    cluster.store.compact()
    await core.create_namespaced_pod("default", pod("w3"))
    with pytest.raises(ApiException) as err:
        async with Watch() as old:
            async for _ in old.stream(core.list_namespaced_pod, "default",
                                      resource_version=start, timeout_seconds=5):  # fmt: skip
                pass
    assert err.value.status == 410 and "too old resource version" in str(err.value.reason)


async def test_http_watch_custom_objects_all_namespaces(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    custom = client.CustomObjectsApi(api)
    cluster.add_namespace("ml")
    events: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def follow() -> None:
        async with Watch() as watch:
            async for event in watch.stream(custom.list_cluster_custom_object, *VC, "jobs",
                                            timeout_seconds=30):  # fmt: skip
                await events.put((event["type"], event["object"]["metadata"]["namespace"]))

    task = asyncio.create_task(follow())
    await cluster.create(r.VCJOBS, vcjob("a", namespace="ml"))
    await cluster.create(r.VCJOBS, vcjob("b", namespace="default"))
    assert {await events.get(), await events.get()} == {("ADDED", "ml"), ("ADDED", "default")}
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_http_leases_behave_like_the_real_ones(api: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(api)
    body = client.V1Lease(metadata=client.V1ObjectMeta(name="autowrap"),
                          spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15))  # fmt: skip
    created = await leases.create_namespaced_lease("default", body)
    first = await leases.read_namespaced_lease("autowrap", "default")
    second = copy.deepcopy(first)
    first.spec.holder_identity = "b"
    await leases.replace_namespaced_lease("autowrap", "default", first)
    second.spec.holder_identity = "c"
    with pytest.raises(ApiException) as err:  # the loser of a race gets a conflict
        await leases.replace_namespaced_lease("autowrap", "default", second)
    assert err.value.status == 409
    current = await leases.read_namespaced_lease("autowrap", "default")
    assert current.spec.holder_identity == "b"
    assert current.metadata.uid == created.metadata.uid
    with pytest.raises(ApiException) as err:
        await leases.create_namespaced_lease("default", body)
    assert err.value.status == 409


async def test_http_discovery_lists_registered_resources(tmp_path: Path) -> None:
    async with FakeCluster(resources=r.WITHOUT_KUEUE) as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kc")
        async with await new_client_from_config(config_file=str(kubeconfig),
                                                persist_config=False) as api:  # fmt: skip
            groups = await client.ApisApi(api).get_api_versions()
            names = {g.name for g in groups.groups}
            assert {"batch.volcano.sh", "workload.codeflare.dev"} <= names
            assert "kueue.x-k8s.io" not in names
            core = await client.CoreV1Api(api).get_api_resources()
            assert {"pods", "pods/status", "namespaces", "events"} <= {
                x.name for x in core.resources
            }
            with pytest.raises(ApiException) as err:
                await client.CustomObjectsApi(api).list_namespaced_custom_object(
                    "kueue.x-k8s.io", "v1beta1", "default", "localqueues"
                )
            assert err.value.status == 404


async def test_http_subject_access_review_and_auth(
    api: client.ApiClient, cluster: FakeCluster, tmp_path: Path
) -> None:
    auth = client.AuthorizationV1Api(api)

    def review(user: str) -> client.V1SubjectAccessReview:
        return client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user, resource_attributes=client.V1ResourceAttributes(
                verb="create", group="workload.codeflare.dev", resource="appwrappers",
                namespace="default")))  # fmt: skip

    assert (await auth.create_subject_access_review(review("alice"))).status.allowed
    cluster.deny("mallory", resource="appwrappers")
    denied = await auth.create_subject_access_review(review("mallory"))
    assert not denied.status.allowed and denied.status.denied
    # An explicit denial (a webhook authorizer's) gives its own reason, which may be none.
    cluster.deny("eve", resource="appwrappers", reason="")
    silent = await auth.create_subject_access_review(review("eve"))
    assert silent.status.denied and not silent.status.reason
    cluster.token = "other"
    bad = FakeCluster.write_kubeconfig(cluster, tmp_path / "bad")
    async with await new_client_from_config(config_file=str(bad), persist_config=False) as anon:
        with pytest.raises(ApiException) as err:
            await client.CoreV1Api(anon).list_namespaced_pod("default")
        assert err.value.status == 401


async def test_http_a_namespaced_kind_is_created_only_in_a_namespace(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    # installer.go routes only LIST and WATCHLIST across namespaces.
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{cluster.url}/api/v1/pods", json=pod("nowhere"),
                     headers={"Authorization": f"Bearer {cluster.token}"}) as response,
    ):  # fmt: skip
        assert response.status == 405
    listed = await client.CoreV1Api(api).list_pod_for_all_namespaces()
    assert [p.metadata.name for p in listed.items] == []


async def test_http_fault_injection(api: client.ApiClient, cluster: FakeCluster) -> None:
    cluster.inject("POST", r"/pods$", 500, message="boom")
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("f"))
    assert err.value.status == 500 and "boom" in err.value.body
    assert (await core.create_namespaced_pod("default", pod("f"))).metadata.name == "f"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(500, "InternalError"), (403, "Forbidden"), (409, "Conflict"), (429, "TooManyRequests"),
     (503, "ServiceUnavailable")],
)  # fmt: skip
async def test_http_injected_statuses_come_with_a_status_body(
    api: client.ApiClient, cluster: FakeCluster, status: int, reason: str
) -> None:
    fault = cluster.inject("POST", r"/pods$", status=status)
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("f"))
    body = json.loads(err.value.body)
    assert (err.value.status, body["kind"], body["reason"]) == (status, "Status", reason)
    if status == 429:
        assert (err.value.headers or {})["Retry-After"] == "1"
        assert body["details"]["retryAfterSeconds"] == 1
    assert fault.hits == 1 and cluster.store.get(r.PODS, "default", "f") is None
    assert await core.create_namespaced_pod("default", pod("f"))  # times=1: served next time


async def test_http_an_after_effect_fault_stores_then_fails(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    cluster.inject("POST", r"/pods$", status=504, after_effect=True)
    with pytest.raises(ApiException) as err:
        await client.CoreV1Api(api).create_namespaced_pod("default", pod("f"))
    assert err.value.status == 504
    assert cluster.store.get(r.PODS, "default", "f") is not None


async def test_http_a_dropped_connection_gets_no_response_after_the_write(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    cluster.inject("POST", r"/pods$", status=None, drop_connection=True, after_effect=True)
    with pytest.raises(aiohttp.ClientError):
        await client.CoreV1Api(api).create_namespaced_pod("default", pod("f"))
    assert cluster.store.get(r.PODS, "default", "f") is not None


async def test_http_a_fault_without_status_only_delays_and_times_none_repeats(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    fault = cluster.inject("GET", r"/namespaces$", status=None, delay=0.2, times=None)
    core = client.CoreV1Api(api)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await core.list_namespace()
    await core.list_namespace()
    assert loop.time() - started >= 0.4 and fault.hits == 2
    cluster.clear_faults()
    assert cluster.faults == []


async def test_http_a_stopped_cluster_refuses_connections_and_keeps_its_state(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("kept"))
    port = cluster.port
    await cluster.stop()
    with pytest.raises(aiohttp.ClientError):
        await core.list_namespace()
    await cluster.start()
    assert cluster.port == port
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod("kept"))
    assert err.value.status == 409


async def test_http_impersonation_headers_change_who_acts(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{cluster.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            headers=[("Authorization", f"Bearer {cluster.token}"), ("Impersonate-User", "bob"),
                     ("Impersonate-Uid", "u-1"), ("Impersonate-Group", "ml-team"),
                     ("Impersonate-Group", "system:authenticated")],
        ) as response,
    ):  # fmt: skip
        review = await response.json()
    assert response.status == 201
    assert review["status"]["userInfo"] == {
        "username": "bob", "uid": "u-1", "groups": ["ml-team", "system:authenticated"]
    }  # fmt: skip
    assert cluster.requests[-1].impersonated_user == "bob"


async def test_http_token_reviews_authenticate_as_requests_do_and_url_reviews_follow_rules(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    prometheus = UserInfo(username="system:serviceaccount:monitoring:prometheus", uid="p-1")
    cluster.users["prom-token"] = prometheus
    cluster.default_allow = False
    cluster.allow(prometheus.username, verb="get", path="/metrics")
    authn, authz = client.AuthenticationV1Api(api), client.AuthorizationV1Api(api)

    def token_review(token: str) -> client.V1TokenReview:
        return client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))

    known = await authn.create_token_review(token_review("prom-token"))
    unknown = await authn.create_token_review(token_review("made-up"))
    assert known.status.authenticated and known.status.user.username == prometheus.username
    assert known.status.user.uid == "p-1"
    assert not unknown.status.authenticated and cluster.token_reviews == 2

    def url_review(user: str, path: str = "/metrics") -> client.V1SubjectAccessReview:
        return client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user, non_resource_attributes=client.V1NonResourceAttributes(
                path=path, verb="get")))  # fmt: skip

    def resource_review(user: str) -> client.V1SubjectAccessReview:
        return client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=user, resource_attributes=client.V1ResourceAttributes(
                verb="get", resource="pods", namespace="default")))  # fmt: skip

    allowed = await authz.create_subject_access_review(url_review(prometheus.username))
    other_path = await authz.create_subject_access_review(url_review(prometheus.username, "/x"))
    nosy = await authz.create_subject_access_review(url_review("nosy"))
    # A URL rule grants no resource, as RBAC keeps nonResourceURLs and resources apart.
    pods = await authz.create_subject_access_review(resource_review(prometheus.username))
    assert allowed.status.allowed
    assert not other_path.status.allowed and not nosy.status.allowed and not pods.status.allowed
    assert nosy.status.reason == 'no rule allows user "nosy" to get /metrics'
    assert pods.status.reason == (
        'no rule allows user "system:serviceaccount:monitoring:prometheus" to get pods in '
        'namespace "default"'
    )


async def test_http_webhook_configurations_take_json_patches(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    hook = {"name": "v.example.com", "clientConfig": {"caBundle": ""}, "sideEffects": "None",
            "admissionReviewVersions": ["v1"]}  # fmt: skip
    cluster.add_webhook_configuration(
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "v"}, "webhooks": [hook]}
    )  # fmt: skip
    admission = client.AdmissionregistrationV1Api(api)
    await admission.patch_validating_webhook_configuration(
        "v", [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="}]
    )
    (stored,) = cluster.webhook_configurations()
    assert stored["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    with pytest.raises(ValueError, match="not a webhook configuration"):
        cluster.add_webhook_configuration({"apiVersion": "v1", "kind": "ConfigMap"})


async def test_http_the_request_log_can_be_bounded(tmp_path: Path) -> None:
    async with FakeCluster(keep_requests=2) as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        async with await new_client_from_config(
            config_file=str(kubeconfig), persist_config=False
        ) as bounded:
            for _ in range(3):
                await client.CoreV1Api(bounded).list_namespace()
        assert len(fake.requests) == 2


async def test_for_autowrap_is_autowraps_service_account_under_deny_by_default(
    tmp_path: Path,
) -> None:
    async with for_autowrap() as fake:
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        async with await new_client_from_config(
            config_file=str(kubeconfig), persist_config=False
        ) as sa:
            me = await client.AuthenticationV1Api(sa).create_self_subject_review(
                client.V1SelfSubjectReview()
            )
            review = await client.AuthorizationV1Api(sa).create_subject_access_review(
                client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
                    user="alice", resource_attributes=client.V1ResourceAttributes(
                        verb="create", resource="pods", namespace="default")))
            )  # fmt: skip
        fake.add_local_queue("default", "team-queue")
        assert me.status.user_info.username == service_account_user().username
        assert not review.status.allowed
        assert fake.store.get(r.NAMESPACES, None, SERVICE_NAMESPACE) is not None
        queue = fake.store.get(r.LOCALQUEUES, "default", "team-queue")
        assert queue is not None and queue["spec"]["clusterQueue"] == "cluster-queue"


def test_label_selectors_parse_into_match_expressions() -> None:
    assert parse_label_selector("a=b, c!=d,e,!f,g in (x, y),h notin (z)") == {
        "matchLabels": {"a": "b"},
        "matchExpressions": [
            {"key": "c", "operator": "NotIn", "values": ["d"]},
            {"key": "e", "operator": "Exists"},
            {"key": "f", "operator": "DoesNotExist"},
            {"key": "g", "operator": "In", "values": ["x", "y"]},
            {"key": "h", "operator": "NotIn", "values": ["z"]},
        ],
    }


@pytest.mark.parametrize(
    ("value", "label"),
    [("system:serviceaccount:ns:sa", "system_serviceaccount_ns_sa"), ("-a@b.c-", "a_b.c"),
     ("x" * 70, "x" * 63)],
)  # fmt: skip
def test_usernames_become_labels_as_the_appwrapper_operator_sanitizes_them(
    value: str, label: str
) -> None:
    assert sanitize_label(value) == label


async def test_front_door_in_process_webhook_denies_and_sees_updates() -> None:
    seen: list[str] = []

    def validatejob(request: Obj) -> str | None:
        seen.append(request["operation"])
        if request["operation"] == "UPDATE":
            old, new = request["oldObject"]["spec"], request["object"]["spec"]
            if old["tasks"] != new["tasks"]:
                return "job updates may not change fields other than minAvailable"
        return None

    async with FakeCluster() as fake:
        fake.add_validating_webhook("validatejob.volcano.sh", validatejob)
        job = await fake.create(r.VCJOBS, vcjob("j", namespace="default"))
        job["spec"]["tasks"][0]["replicas"] = 2
        with pytest.raises(ApiError) as err:
            await fake.update(r.VCJOBS, job)
        assert err.value.status == 400
        assert err.value.message.startswith(
            'admission webhook "validatejob.volcano.sh" denied the request: '
        )
        await fake.delete(r.VCJOBS, "default", "j")
        assert seen == ["CREATE", "UPDATE", "DELETE"]


@pytest.fixture
async def autowrap(
    webhook_pki: Any, fake_kube: Any, fake_kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[Any]:
    """autowrap's real server behind the apiserver emulator (testbed/redirect.py)."""
    from testbed.redirect import start_cluster

    started, stop = await start_cluster(webhook_pki, fake_kube, fake_kubeconfig, tmp_path)
    try:
        yield started
    finally:
        await stop()


async def test_front_door_calls_the_real_webhook_with_the_user(autowrap: Any) -> None:
    from testbed.redirect import ALICE, NAMESPACE, QUEUE
    from webhook.model import names

    async with FakeCluster(emulator=autowrap.emulator) as fake:
        fake.add_namespace(NAMESPACE)
        fake.add_validating_webhook(
            "kyverno", lambda req: "blocked" if "deny" in
            ((req.get("object") or {}).get("metadata", {}).get("labels") or {}) else None,
        )  # fmt: skip
        labelled = vcjob("train", namespace=NAMESPACE, labels={names.QUEUE_LABEL: QUEUE})
        try:
            outcome: Obj | ApiError = await fake.create(r.VCJOBS, labelled, user=ALICE)
        except ApiError as err:
            outcome = err
        calls = [c for c in autowrap.emulator.calls
                 if c.request["request"]["kind"]["group"] == "batch.volcano.sh"]  # fmt: skip
        assert calls, "the labelled job went through autowrap's webhooks"
        assert all(c.request["request"]["userInfo"]["username"] == "alice" for c in calls)
        assert all(c.request["request"]["operation"] == "CREATE" for c in calls)
        stored = fake.store.get(r.VCJOBS, NAMESPACE, "train")
        assert (stored is None) == isinstance(outcome, ApiError)

        plain = await fake.create(r.VCJOBS, vcjob("plain", namespace=NAMESPACE))
        plain["metadata"]["labels"] = {"deny": "1"}
        with pytest.raises(ApiError) as err:  # the in-process webhook runs for UPDATE too
            await fake.update(r.VCJOBS, plain)
        assert err.value.status == 400
        assert err.value.message == 'admission webhook "kyverno" denied the request: blocked'
        with pytest.raises(ApiError) as err:
            await fake.create(r.VCJOBS, vcjob("x", namespace=NAMESPACE, labels={"deny": "y"}))
        assert "denied the request: blocked" in err.value.message
        assert await fake.delete(r.VCJOBS, NAMESPACE, "plain") is not None


async def test_front_door_in_process_webhooks_see_the_name_generated_one_included() -> None:
    # k8s.io/apiserver pkg/registry/rest/create.go:218-230: validating admission gets the
    # request's name or, under generateName, the generated one.
    seen: list[Obj] = []

    def record(request: Obj) -> str | None:
        seen.append(request)
        return None

    fake = FakeCluster()
    fake.add_validating_webhook("recorder", record)
    generated = await fake.create(r.PODS, pod("", generateName="w-"))
    await fake.create(r.PODS, pod("named"))
    assert [q["name"] for q in seen] == [generated["metadata"]["name"], "named"]


async def test_front_door_checks_the_schema_before_in_process_webhooks() -> None:
    # k8s.io/apiserver pkg/registry/generic/registry/store.go:569 (rest.BeforeCreate) before
    # :575 (createValidation): an object the CRD schema refuses reaches no validating webhook.
    prerequisites.crds()
    fake = FakeCluster()
    seen: list[str] = []
    fake.add_validating_webhook("recorder", lambda q: seen.append(q["operation"]))
    bad = {"metadata": {"name": "j", "namespace": "default"}, "spec": {"minAvailable": "two"}}
    with pytest.raises(ApiError) as err:
        await fake.create(r.VCJOBS, bad)
    assert err.value.status == 422 and "spec.minAvailable" in err.value.message
    with pytest.raises(ApiError) as err:
        await fake.create(r.PODS, pod("Bad_Name"))
    assert err.value.status == 422 and seen == []


def test_store_checks_custom_resources_against_the_crd_schema() -> None:
    prerequisites.crds()
    store = Store()
    bad = {"metadata": {"name": "j", "namespace": "default"}, "spec": {"minAvailable": "two"}}
    with pytest.raises(ApiError) as err:
        store.create(r.VCJOBS, bad)
    assert err.value.status == 422 and "spec.minAvailable" in err.value.message
    store.create(r.VCJOBS, {"metadata": {"name": "j", "namespace": "default"},
                            "spec": {"minAvailable": 2}})  # fmt: skip


async def test_http_binding_sets_the_node_and_pod_scheduled_and_refuses_gated_pods(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("free"))
    gated = pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    await core.create_namespaced_pod("default", gated)

    def binding(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}  # fmt: skip

    path = "/api/v1/namespaces/default/pods/{name}/binding"
    answer = await api.rest_client.request(
        "POST", cluster.url + path.format(name="free"),
        headers={"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"},
        body=binding("free"),
    )  # fmt: skip
    assert answer.status == 201
    assert json.loads(await answer.read())["status"] == "Success"
    bound = cluster.store.get(r.PODS, "default", "free")
    assert bound is not None and bound["spec"]["nodeName"] == "node-1"
    scheduled = [c for c in bound["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True"]

    for name, why in (("gated", "has non-empty .spec.schedulingGates"),
                      ("free", 'is already assigned to node "node-1"')):  # fmt: skip
        with pytest.raises(ApiError) as refused:
            await cluster.bind("default", name, "node-2")
        assert refused.value.status == 409
        assert f'pods/binding "{name}": pod {name} {why}' in refused.value.message
    still = cluster.store.get(r.PODS, "default", "gated")
    assert still is not None and "nodeName" not in still["spec"]


async def test_http_list_pages_follow_the_continue_token_and_expire(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    core = client.CoreV1Api(api)
    for i in range(5):
        await core.create_namespaced_pod("default", pod(f"p{i}"))
    first = await core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    second = await core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["p2", "p3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    last = await core.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in last.items] == ["p4"]
    assert not last.metadata._continue

    await core.create_namespaced_pod("default", pod("p5"))
    cluster.store.compact()
    with pytest.raises(ApiException) as expired:
        await core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    assert expired.value.status == 410 and '"Expired"' in expired.value.body


async def test_http_metadata_only_reads_answer_partial_object_metadata(
    api: client.ApiClient, cluster: FakeCluster
) -> None:
    """As kube-apiserver negotiates ``as=PartialObjectMetadata(List);g=meta.k8s.io;v=v1``
    (handlers/response.go doTransformObject): metadata alone, in meta.k8s.io/v1's shapes."""
    core = client.CoreV1Api(api)
    for name in ("m1", "m2", "m3"):
        await core.create_namespaced_pod("default", pod(name, labels={"app": "m"},
                                                        annotations={"pad": "x" * 1000}))  # fmt: skip
    as_list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    as_object = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
    base = f"{cluster.url}/api/v1/namespaces/default/pods"

    async def get(url: str, accept: str, **params: str) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {cluster.token}", "Accept": accept}
        async with session.get(url, params=params, headers=headers) as response:
            return response.status, await response.json()

    async with aiohttp.ClientSession() as session:
        status, page = await get(base, as_list, labelSelector="app=m", limit="2")
        assert status == 200
        assert (page["kind"], page["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
        assert page["metadata"]["continue"]
        # etcd3's GetList counts what remains only for a list without a selector
        assert "remainingItemCount" not in page["metadata"]
        assert [set(i) for i in page["items"]] == [{"kind", "apiVersion", "metadata"}] * 2
        assert page["items"][0]["kind"] == "PartialObjectMetadata"
        assert page["items"][0]["metadata"]["annotations"]["pad"] == "x" * 1000
        status, rest = await get(base, as_list, labelSelector="app=m",
                                 **{"continue": page["metadata"]["continue"]})  # fmt: skip
        assert [i["metadata"]["name"] for i in rest["items"]] == ["m3"]

        status, one = await get(f"{base}/m1", as_object)
        assert status == 200 and one["kind"] == "PartialObjectMetadata" and "spec" not in one
        status, whole = await get(f"{base}/m1", "application/json")
        assert status == 200 and whole["kind"] == "Pod" and "spec" in whole
        # The wrong shape for the request, or nothing the server can produce: 406.
        assert (await get(base, as_object))[0] == 406
        assert (await get(f"{base}/m1", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"))[0] == 406  # fmt: skip
        assert (await get(base, "application/json;as=Table;g=meta.k8s.io;v=v1"))[0] == 406
        # A server that falls back answers the plain shape when asked so.
        assert (await get(base, "application/yaml, application/json"))[1]["kind"] == "PodList"

        headers = {"Authorization": f"Bearer {cluster.token}", "Accept": as_object}
        params = {"watch": "true", "resourceVersion": page["metadata"]["resourceVersion"]}
        async with session.get(base, params=params, headers=headers) as response:
            await core.patch_namespaced_pod("m1", "default", {"metadata": {"labels": {"b": "c"}}})
            line = await asyncio.wait_for(response.content.readline(), 5)
        event = json.loads(line)
        assert event["type"] == "MODIFIED" and event["object"]["kind"] == "PartialObjectMetadata"
        assert set(event["object"]) == {"kind", "apiVersion", "metadata"}
        assert event["object"]["metadata"]["labels"]["b"] == "c"
