"""The fake cluster: store semantics, then the HTTP API driven by the real kubernetes.aio client."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.cluster import resources as r
from tests.support.cluster.store import ApiError, Store

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


def test_store_update_conflict_generation_and_status_split() -> None:
    store = Store()
    job = store.create(r.VCJOBS, {"metadata": {"name": "j", "namespace": "default"},
                                  "spec": {"tasks": []}, "status": {"state": "x"}})  # fmt: skip
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
    assert err.value.status == 409 and "Precondition failed: UID" in err.value.message
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
    out = store.patch(r.PODS, "default", "g", smp, "application/strategic-merge-patch+json")
    assert out["spec"]["schedulingGates"] == [{"name": "other"}]
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]  # atomic
    assert out["spec"]["containers"] == [
        {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
    ]
    out = store.patch(r.PODS, "default", "g", {"metadata": {"labels": {"x": None}}},
                      "application/merge-patch+json")  # fmt: skip
    assert "x" not in out["metadata"]["labels"]
    out = store.patch(r.PODS, "default", "g",
                      [{"op": "remove", "path": "/spec/schedulingGates/0"}],
                      "application/json-patch+json")  # fmt: skip
    assert out["spec"]["schedulingGates"] == []
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
