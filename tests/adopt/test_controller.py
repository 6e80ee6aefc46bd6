"""The adopt-mode controller against the fake cluster: every step of SPEC section 11."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from pathlib import Path

import pytest

from testbed.apiserver import UserInfo
from testbed.cluster.patches import MERGE_PATCH as MERGE
from testbed.cluster.resources import APPWRAPPERS, LEASES, PODS, VCJOBS
from tests.adopt.harness import NAMESPACE, QUEUE, adopting, eventually, prepared, vcjob
from tests.support.operator_edits import edit_cluster_role_verbs
from webhook.controller import Controller
from webhook.core import adoption
from webhook.model import names

BOB = UserInfo(username="bob", uid="bob-uid", groups=("system:authenticated",))


def _seen(controller: Controller, appwrapper: dict) -> bool:
    """The controller has this write of the AppWrapper (or a later one) in its cache and no work
    left: whatever the write would make it do is done. (The fake API's resourceVersions are
    increasing integers.)"""
    informer = next(i for i in controller.informers if i.kind.plural == "appwrappers")
    cached = informer.get(NAMESPACE, appwrapper["metadata"]["name"]) or {}
    version = int(cached.get("metadata", {}).get("resourceVersion") or 0)
    return version >= int(appwrapper["metadata"]["resourceVersion"]) and controller.idle()


def _adopted(job: dict | None) -> bool:
    return bool(job) and job["metadata"]["labels"].get(names.ADOPTION_LABEL) == "adopted"


async def test_a_pending_job_is_adopted_and_its_appwrapper_released_to_kueue(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        stored = cluster.store_job(vcjob())
        await cluster.start_controller()

        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job(), what="adopted")
        aw = cluster.appwrapper()
        assert aw is not None
        owner = job["metadata"]["ownerReferences"]
        assert owner == [{"apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper",
                          "name": "train", "uid": aw["metadata"]["uid"], "controller": True}]  # fmt: skip
        assert aw["spec"]["suspend"] is True
        assert aw["metadata"]["labels"][names.QUEUE_LABEL] == QUEUE
        assert (
            aw["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION] == stored["metadata"]["uid"]
        )
        # The hold is lifted only after the ownerReference exists.
        await eventually(
            lambda: (
                names.ADMISSION_GATED_BY_ANNOTATION
                not in (cluster.appwrapper() or {}).get("metadata", {}).get("annotations", {})
            ),
            what="hold lifted",
        )
        await eventually(lambda: cluster.events("Adopted"), what="Adopted event")
        job = await eventually(
            lambda: (
                (cluster.job() or {})
                .get("metadata", {})
                .get("annotations", {})
                .get(names.STATUS_ANNOTATION)
            ),
            what="status annotation",
        )
        assert "Queued in LocalQueue 'team-queue'" in job


async def test_admission_releases_every_gated_pod_with_kueues_placement(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=2))
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        pods = cluster.volcano_pods(job)
        assert all(p["spec"]["schedulingGates"] for p in pods)

        cluster.admit()

        def released() -> list[dict] | None:
            now = cluster.pods()
            return now if all(not p["spec"].get("schedulingGates") for p in now) else None

        now = await eventually(released, what="pods released")
        assert len(now) == 3
        by_name = {p["metadata"]["name"]: p for p in now}
        assert by_name["train-master-0"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "train-0"
        assert by_name["train-worker-1"]["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "train-1"
        assert all(p["spec"]["nodeSelector"] == {"pool": "a100"} for p in now)
        assert all(p["spec"]["tolerations"][-1]["key"] == "gpu" for p in now)

        # A pod created again later (Volcano restarts a failed pod) is released the same way.
        cluster.api.store.delete(PODS, NAMESPACE, "train-worker-1")
        late = cluster.volcano_pod(job, "worker", 1)
        assert late["spec"]["schedulingGates"]
        await eventually(released, what="late pod released")


async def test_released_pods_leave_the_controllers_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A released pod is labelled released in the same write, so the writes that follow (the
    scheduler's binding, the kubelet's status) reach no informer and wake no reconcile."""
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=1))
        controller = await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        cluster.volcano_pods(job)
        pods_informer = next(i for i in controller.informers if i.kind.plural == "pods" and
                             i.labels.startswith(names.APPWRAPPER_LABEL))  # fmt: skip
        await eventually(lambda: len(pods_informer.items()) == 2, what="gated pods cached")
        cluster.admit()
        await eventually(lambda: all(not p["spec"].get("schedulingGates")
                                     for p in cluster.pods()), what="released")  # fmt: skip
        assert all(p["metadata"]["labels"][names.RELEASED_LABEL] == "true" for p in cluster.pods())
        await eventually(lambda: not pods_informer.items(), what="released pods uncached")
        await eventually(controller.idle, what="controller idle")

        keys: list[tuple[str, str]] = []
        reconcile = controller.reconciler.reconcile

        async def recorded(key: tuple[str, str]) -> object:
            keys.append(key)
            return await reconcile(key)

        monkeypatch.setattr(controller.reconciler, "reconcile", recorded)
        for pod in cluster.pods():
            pod["status"] = {"phase": "Running", "podIP": "10.0.0.9"}
            cluster.api.store.update(PODS, pod)
        # A gated pod of another AppWrapper, written after them: the pods watch delivers in
        # resourceVersion order, so once it is cached and handled, any event of the writes
        # above would have been too.
        sentinel = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "sentinel", "namespace": NAMESPACE,
                                 "labels": {names.APPWRAPPER_LABEL: "sentinel"},
                                 "annotations": cluster.pods()[0]["metadata"]["annotations"]},
                    "spec": {"schedulingGates": [{"name": names.ADMISSION_GATE}],
                             "containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
        cluster.api.store.create(PODS, sentinel)
        await eventually(lambda: (NAMESPACE, "sentinel") in keys and controller.idle(),
                         what="the later write handled")  # fmt: skip
        assert (NAMESPACE, "train") not in keys


async def test_pods_beyond_the_admitted_count_stay_gated_and_say_why(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=1))
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        cluster.volcano_pods(job)
        cluster.admit()
        await eventually(lambda: all(not p["spec"].get("schedulingGates")
                                     for p in cluster.pods()), what="released")  # fmt: skip

        # The task is scaled up after admission: Volcano creates more gated pods, beyond the
        # replicas the AppWrapper's template (what Kueue admitted) has.
        extra = [cluster.volcano_pod(job, "worker", i) for i in (1, 2)]
        await eventually(lambda: len(cluster.events("ReleaseFailed")) >= 2, what="the reason")

        for pod in extra:
            stored = cluster.api.store.get(PODS, NAMESPACE, pod["metadata"]["name"])
            assert {"name": names.ADMISSION_GATE} in stored["spec"]["schedulingGates"]
        message = cluster.events("ReleaseFailed")[0]["message"]
        assert "below its 1 replica(s)" in message, message


async def test_a_forged_admission_on_the_appwrapper_releases_nothing(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=1))
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        cluster.volcano_pods(job)

        # An AppWrapper editor writes what Kueue would: suspend false and a placement of hers;
        # Kueue's Workload never admitted it.
        aw = cluster.appwrapper()
        components = aw["spec"]["components"]
        components[0]["podSetInfos"] = [{"nodeSelector": {"pool": "mine"}}] * 2
        forged = cluster.api.store.patch(APPWRAPPERS, NAMESPACE, "train",
                                         {"spec": {"suspend": None, "components": components}},
                                         MERGE)  # fmt: skip
        await eventually(lambda: _seen(cluster.controllers[0], forged),
                         what="the forged write seen and handled")  # fmt: skip

        assert all(p["spec"].get("schedulingGates") for p in cluster.pods())


async def test_a_pod_and_a_job_of_the_same_name_never_share_an_appwrapper(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        # A small Pod is adopted and admitted first ...
        cluster.api.store.create(PODS, prepared(_tiny_pod("train")))
        await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.api.store.get(PODS, NAMESPACE, "train")),
                         what="pod adopted")  # fmt: skip
        cluster.admit()
        await eventually(lambda: not cluster.api.store.get(PODS, NAMESPACE, "train")["spec"]
                         .get("schedulingGates"), what="pod released")  # fmt: skip

        # ... then a big Job of the same name: its pods must not run under the Pod's admission.
        job = cluster.store_job(vcjob(workers=3))
        job_pods = cluster.volcano_pods(job)
        await eventually(lambda: "earlier Pod of the same name" in (cluster.job() or {}).get("metadata", {})
                         .get("annotations", {}).get(names.STATUS_ANNOTATION, ""),
                         what="the Job says why it waits")  # fmt: skip
        await eventually(lambda: cluster.controllers[0].idle(), what="idle")

        for pod in job_pods:
            stored = cluster.api.store.get(PODS, NAMESPACE, pod["metadata"]["name"])
            assert {"name": names.ADMISSION_GATE} in stored["spec"]["schedulingGates"]
        assert len(cluster.api.store.list(APPWRAPPERS, NAMESPACE)) == 1


def _tiny_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}  # fmt: skip


async def test_a_placement_that_cannot_apply_leaves_the_pod_gated_with_an_event(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        job_obj = vcjob(workers=1)
        job_obj["spec"]["tasks"][1]["template"]["spec"]["nodeSelector"] = {"pool": "h100"}
        cluster.store_job(job_obj)
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        cluster.volcano_pods(job)

        cluster.admit()

        await eventually(lambda: cluster.events("ReleaseFailed"), what="ReleaseFailed event")
        worker = next(p for p in cluster.pods() if p["metadata"]["name"] == "train-worker-0")
        assert {"name": names.ADMISSION_GATE} in worker["spec"]["schedulingGates"]
        message = cluster.events("ReleaseFailed")[0]["message"]
        assert "'pool' is 'h100' on the pod, Kueue assigns 'a100'" in message
        # Admitted, yet not running: the status says which pod waits and why, never "Running".
        status = await eventually(
            lambda: "stay gated" in _status(cluster.job()) and _status(cluster.job()),
            what="the held status",
        )
        assert "pod train-worker-0: it is not a pod the admission covers" not in status
        assert "train-worker-0" in status and "'pool' is 'h100'" in status, status


async def test_an_operators_edit_of_the_cluster_role_holds_the_release_until_restored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The apiserver authorizes by the ClusterRole stored now: with patch on pods taken out of
    it (``kubectl edit clusterrole autowrap``), the release is refused with kube-apiserver's 403
    and every pod stays gated; with patch put back, the release goes through."""
    caplog.set_level(logging.WARNING, logger="autowrap")
    refusal = (
        'is forbidden: User "system:serviceaccount:autowrap-system:autowrap" cannot patch '
        'resource "pods" in API group "" in the namespace "ml"'
    )
    async with adopting(tmp_path) as cluster:
        operator = cluster.api.write_kubeconfig(tmp_path / "operator")
        cluster.store_job(vcjob(workers=1))
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        cluster.volcano_pods(job)
        await edit_cluster_role_verbs(operator, "autowrap", "", "pods",
                                      lambda verbs: verbs.remove("patch"))  # fmt: skip

        cluster.admit()

        await eventually(lambda: any(refusal in r.getMessage() for r in caplog.records),
                         what="the release refused")  # fmt: skip
        assert all({"name": names.ADMISSION_GATE} in p["spec"]["schedulingGates"]
                   for p in cluster.pods())  # fmt: skip
        await edit_cluster_role_verbs(operator, "autowrap", "", "pods",
                                      lambda verbs: verbs.append("patch"))  # fmt: skip
        await eventually(lambda: all(not p["spec"].get("schedulingGates") for p in cluster.pods()),
                         what="pods released")  # fmt: skip


async def test_a_users_delete_while_queued_takes_the_appwrapper_along(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()))

        await cluster.api.delete(VCJOBS, NAMESPACE, "train")

        await eventually(lambda: cluster.job() is None, what="job gone")
        await eventually(lambda: cluster.appwrapper() is None, what="appwrapper gone")


async def test_the_appwrapper_controllers_own_delete_is_let_through(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()))
        cluster.set_phase("Suspending")

        await cluster.api.delete(VCJOBS, NAMESPACE, "train")

        await eventually(lambda: cluster.job() is None, what="job gone")
        assert cluster.appwrapper() is not None


async def test_the_finalizer_goes_once_the_appwrapper_runs(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        assert names.ADOPTION_FINALIZER in job["metadata"]["finalizers"]

        cluster.admit()
        cluster.set_phase("Running")

        await eventually(
            lambda: (
                names.ADOPTION_FINALIZER
                not in ((cluster.job() or {}).get("metadata", {}).get("finalizers") or [])
            ),
            what="finalizer removed",
        )
        await eventually(lambda: cluster.events("Running"), what="Running event")


async def test_an_earlier_appwrapper_of_the_same_name_is_waited_for_never_reused(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        earlier = cluster.store_job(vcjob())
        await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()))
        first_uid = cluster.appwrapper()["metadata"]["uid"]  # type: ignore[index]
        cluster.set_phase("Succeeded")
        # The user deletes the finished job and applies it again, changed.
        await cluster.api.delete(VCJOBS, NAMESPACE, "train")
        await eventually(lambda: cluster.job() is None)
        assert cluster.appwrapper() is not None
        cluster.store_job(vcjob(image="torch:2.5"))

        waiting = await eventually(
            lambda: (
                (cluster.job() or {})
                .get("metadata", {})
                .get("annotations", {})
                .get(names.STATUS_ANNOTATION)
            ),
            what="waiting status",
        )
        [event] = await eventually(lambda: cluster.events("WaitingForEarlierAppWrapper"))
        assert event["type"] == "Warning" and event["message"] == waiting
        assert "of an earlier Job of the same name is Succeeded" in waiting
        assert cluster.job()["metadata"]["labels"][names.ADOPTION_LABEL] == "pending"  # type: ignore[index]

        # As the status says: this Job first (the AppWrapper controller would delete it by name
        # with its AppWrapper), then the AppWrapper, then the Job again.
        await cluster.api.delete(VCJOBS, NAMESPACE, "train")
        await eventually(lambda: cluster.job() is None, what="pending Job deleted")
        await cluster.api.delete(APPWRAPPERS, NAMESPACE, "train")
        cluster.store_job(vcjob(image="torch:2.5"))

        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job(), what="adopted")
        aw = cluster.appwrapper()
        assert aw is not None and aw["metadata"]["uid"] != first_uid
        assert aw["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION] == job["metadata"]["uid"]
        assert earlier["metadata"]["uid"] != job["metadata"]["uid"]


async def test_a_gitops_recreate_after_preemption_is_readopted(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()))
        aw_uid = cluster.appwrapper()["metadata"]["uid"]  # type: ignore[index]
        # Preempted: the AppWrapper controller deletes the Job and waits, Suspended.
        cluster.set_phase("Suspending")
        await cluster.api.delete(VCJOBS, NAMESPACE, "train")
        await eventually(lambda: cluster.job() is None)
        cluster.set_phase("Suspended")
        # A GitOps tool re-creates the same manifest.
        cluster.store_job(vcjob())

        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job(), what="re-adopted")
        aw = cluster.appwrapper()
        assert aw is not None and aw["metadata"]["uid"] == aw_uid
        assert aw["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION] == job["metadata"]["uid"]
        assert job["metadata"]["ownerReferences"][0]["uid"] == aw_uid


async def test_a_teammates_copy_of_the_appwrapper_is_never_adopted_nor_removed(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        controller = await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()))
        ours = cluster.appwrapper()
        assert ours is not None
        # The user deletes it while queued: the AppWrapper goes along.
        await cluster.api.delete(VCJOBS, NAMESPACE, "train")
        await eventually(lambda: cluster.job() is None and cluster.appwrapper() is None)
        await cluster.stop_controller(controller)
        # Bob creates the very same AppWrapper (spec hash, origin annotations, adopted label),
        # Suspended as one left by a preemption would be.
        copy = {"apiVersion": ours["apiVersion"], "kind": "AppWrapper", "spec": ours["spec"],
                "metadata": {k: ours["metadata"][k] for k in ("name", "namespace", "labels",
                                                              "annotations")}}  # fmt: skip
        await cluster.api.create(APPWRAPPERS, copy, user=BOB)
        cluster.set_phase("Suspended")
        cluster.store_job(vcjob())
        await cluster.start_controller()

        status = await eventually(
            lambda: (cluster.job() or {}).get("metadata", {}).get("annotations", {})
            .get(names.STATUS_ANNOTATION),
            what="status",
        )  # fmt: skip
        [event] = await eventually(lambda: cluster.events("AdoptionFailed"))
        assert event["type"] == "Warning" and event["message"] == status
        assert "AppWrapper ml/train already exists and was created by bob" in status
        job = cluster.job()
        assert job is not None and job["metadata"]["labels"][names.ADOPTION_LABEL] == "pending"
        assert not job["metadata"].get("ownerReferences")
        bobs = cluster.appwrapper()
        assert bobs is not None and bobs["metadata"]["labels"][names.APPWRAPPER_USER_LABEL] == "bob"
        assert (
            bobs["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION] != job["metadata"]["uid"]
        ), "not re-pointed at the new object"


async def test_a_user_delete_after_the_appwrapper_ran_removes_the_failed_appwrapper(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()))
        cluster.admit()
        cluster.set_phase("Running")
        await eventually(lambda: not (cluster.job() or {}).get("metadata", {}).get("finalizers"))

        await cluster.api.delete(VCJOBS, NAMESPACE, "train")
        await eventually(lambda: cluster.job() is None)
        assert cluster.appwrapper() is not None  # the AppWrapper has not noticed yet
        cluster.set_phase("Failed", conditions=[{"type": "Unhealthy", "status": "True",
                                                 "reason": "MissingComponent",
                                                 "message": "component train is missing",
                                                 "lastTransitionTime": "2026-11-23T00:00:00Z"}])  # fmt: skip

        await eventually(lambda: cluster.appwrapper() is None, what="failed appwrapper removed")


async def test_a_restarted_controller_finishes_what_the_last_one_started(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob("one"))
        first = await cluster.start_controller("replica-a")
        await eventually(lambda: _adopted(cluster.job("one")))
        await cluster.stop_controller(first)
        # While no controller runs: a new job, and Kueue admits the first.
        cluster.store_job(vcjob("two"))
        job_one = cluster.job("one")
        assert job_one is not None
        cluster.volcano_pods(job_one)
        cluster.admit("one")

        await cluster.start_controller("replica-b")

        await eventually(lambda: _adopted(cluster.job("two")), what="second adopted", timeout=30)
        await eventually(
            lambda: all(
                not p["spec"].get("schedulingGates")
                for p in cluster.pods()
                if p["metadata"]["name"].startswith("one-")
            ),
            what="pods of the first released",
        )
        assert len(cluster.api.store.list(APPWRAPPERS, NAMESPACE)) == 2


async def test_two_replicas_make_one_appwrapper_per_object_and_one_leads(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        a = await cluster.start_controller("replica-a")
        b = await cluster.start_controller("replica-b")
        for i in range(20):
            cluster.store_job(vcjob(f"job-{i}"))

        await eventually(
            lambda: all(_adopted(cluster.job(f"job-{i}")) for i in range(20)),
            what="all adopted",
            timeout=30,
        )
        assert len(cluster.api.store.list(APPWRAPPERS, NAMESPACE)) == 20
        assert [a.leading.is_set(), b.leading.is_set()].count(True) == 1
        lease = cluster.api.store.get(LEASES, "autowrap-system", names.CONTROLLER_LEASE)
        assert lease is not None
        leader = a if a.leading.is_set() else b
        assert lease["spec"]["holderIdentity"] == leader.settings.identity


async def test_the_standby_takes_over_when_the_leader_stops(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        a = await cluster.start_controller("replica-a")
        await eventually(lambda: a.leading.is_set(), what="a leads")
        b = await cluster.start_controller("replica-b")
        await cluster.stop_controller(a)
        # Stopping stops the leading work too (informers and workers), not only the election.
        assert not a.leading.is_set()
        cluster.store_job(vcjob())

        await eventually(lambda: _adopted(cluster.job()), what="adopted by b", timeout=30)
        assert b.leading.is_set()


async def test_a_queued_appwrapper_whose_job_is_gone_is_collected_after_the_grace_period(
    tmp_path: Path,
) -> None:
    from webhook.controller import reconcile

    # The controller's wall clock, moved by the test: the grace period is decided by the
    # AppWrapper's age on it, not raced against real time.
    now = [time.time()]
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob())
        controller = await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.job()), what="adopted")
        await cluster.stop_controller(controller)
        # The finalizer removed by hand, then the Job deleted, while autowrap was down.
        cluster.api.store.patch(VCJOBS, NAMESPACE, "train", {"metadata": {"finalizers": None}},
                                MERGE)  # fmt: skip
        cluster.api.store.delete(VCJOBS, NAMESPACE, "train")
        b = await cluster.start_controller("replica-b", now=lambda: now[0])
        await eventually(lambda: b.leading.is_set() and b.reconciles and b.idle(), what="b idle")
        looked = b.reconciles

        assert cluster.appwrapper() is not None  # within the grace period: kept
        now[0] += reconcile.ORPHAN_GRACE + 1
        # Anyone's write to the AppWrapper makes the controller look again (so would the
        # requeue at the end of the grace period, in real time).
        cluster.api.store.patch(APPWRAPPERS, NAMESPACE, "train",
                                {"metadata": {"annotations": {"example.com/touched": "1"}}},
                                MERGE)  # fmt: skip
        await eventually(lambda: cluster.appwrapper() is None, what="collected")
        assert b.reconciles > looked


async def test_an_object_admission_did_not_prepare_is_not_adopted(tmp_path: Path) -> None:
    async with adopting(tmp_path) as cluster:
        job = prepared(vcjob())
        # Labelled as if admission had prepared it, with its gates taken off.
        for task in job["spec"]["tasks"]:
            task["template"]["spec"].pop("schedulingGates", None)
        cluster.api.store.create(VCJOBS, job)
        await cluster.start_controller()

        status = await eventually(
            lambda: (cluster.job() or {}).get("metadata", {}).get("annotations", {})
            .get(names.STATUS_ANNOTATION), what="status")  # fmt: skip
        [event] = await eventually(lambda: cluster.events("AdoptionFailed"))
        assert event["type"] == "Warning" and event["message"] == status
        assert "autowrap's admission did not prepare it" in status
        assert cluster.appwrapper() is None


async def test_a_hung_lease_renewal_stops_the_leader_before_the_standby_takes_over(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        a = await cluster.start_controller("replica-a")
        await eventually(lambda: a.leading.is_set(), what="a leads")
        b = await cluster.start_controller("replica-b")
        # a's renewals stall on the wire, as over a dead connection.
        stalled = asyncio.Event()
        cluster.api.inject("PUT", "/leases/", 0, times=None, hold=stalled,
                           body_contains='"holderIdentity":"replica-a"')  # fmt: skip
        both = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while not b.leading.is_set() and loop.time() < deadline:
            both |= a.leading.is_set() and b.leading.is_set()
            await asyncio.sleep(0.02)
        stalled.set()

        assert b.leading.is_set(), "the standby never took over"
        assert not a.leading.is_set() and not both, "two replicas led at once"
        cluster.store_job(vcjob())
        await eventually(lambda: _adopted(cluster.job()), what="adopted by b")


async def test_a_replica_that_stops_releases_the_lease_at_once(tmp_path: Path) -> None:
    long_lease = 3600  # far beyond eventually's wait: only a released lease lets b lead
    async with adopting(tmp_path) as cluster:
        a = await cluster.start_controller("replica-a", lease_seconds=long_lease)
        await eventually(lambda: a.leading.is_set(), what="a leads")
        b = await cluster.start_controller("replica-b", lease_seconds=long_lease)

        await cluster.stop_controller(a)
        lease = cluster.api.store.get(LEASES, "autowrap-system", names.CONTROLLER_LEASE)
        assert lease is not None and lease["spec"]["holderIdentity"] == ""
        # b takes it at its next attempt, not after the lease duration, which here is longer
        # than any wait: had the lease not been released, b could not lead in this test.
        await eventually(lambda: b.leading.is_set(), what="b leads")


async def test_pods_whose_gate_was_taken_off_are_reported_never_said_to_wait(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=1))
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        pods = cluster.volcano_pods(job)
        # Someone with pod rights takes the gate off while the AppWrapper is queued.
        cluster.api.store.patch(PODS, NAMESPACE, pods[0]["metadata"]["name"],
                                {"spec": {"schedulingGates": None}}, MERGE)  # fmt: skip

        status = await eventually(
            lambda: "without Kueue's admission" in (
                s := (cluster.job() or {}).get("metadata", {}).get("annotations", {})
                .get(names.STATUS_ANNOTATION, "")) and s, what="status")  # fmt: skip
        assert status.startswith("1 pod(s) run without Kueue's admission")
        # The Event follows the status write.
        await eventually(lambda: cluster.events("GateRemoved"), what="GateRemoved event")


async def test_a_cluster_without_volcano_adopts_pods_and_says_what_is_missing(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path, without=[VCJOBS]) as cluster:
        cluster.api.store.create(PODS, prepared(_tiny_pod("notebook")))
        controller = await cluster.start_controller()

        await eventually(lambda: _adopted(cluster.api.store.get(PODS, NAMESPACE, "notebook")),
                         what="pod adopted")  # fmt: skip
        assert controller.absent() == ["jobs.batch.volcano.sh"]
        stats = controller.stats()
        assert stats.resources["jobs.batch.volcano.sh"] is False
        assert stats.resources["appwrappers.workload.codeflare.dev"] is True


async def test_without_the_appwrapper_crd_the_object_says_so_and_its_delete_is_not_held(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path, without=[APPWRAPPERS]) as cluster:
        cluster.store_job(vcjob())
        controller = await cluster.start_controller()

        status = await eventually(
            lambda: (cluster.job() or {}).get("metadata", {}).get("annotations", {})
            .get(names.STATUS_ANNOTATION), what="status")  # fmt: skip
        assert "does not serve appwrappers.workload.codeflare.dev" in status
        assert controller.absent() == ["appwrappers.workload.codeflare.dev"]
        await cluster.api.delete(VCJOBS, NAMESPACE, "train")
        await eventually(lambda: cluster.job() is None, what="deleted")


async def test_labelled_pods_no_policy_covers_are_not_cached(tmp_path: Path) -> None:
    from tests.builders import PolicyBuilder, policy_set

    async with adopting(tmp_path) as cluster:
        cluster.policies = policy_set(PolicyBuilder().exclude("kube-public"))
        cluster.api.add_namespace("kube-public")
        big = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "ballast", "namespace": "kube-public",
                            "labels": {names.APPWRAPPER_LABEL: "x"},
                            "annotations": {"autowrap.io/podset": "0", "pad": "x" * 100_000}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}],
                        "schedulingGates": [{"name": "mine"}]}}  # fmt: skip
        cluster.api.store.create(PODS, big)
        covered = prepared(_tiny_pod("notebook"))
        cluster.api.store.create(PODS, covered)
        controller = await cluster.start_controller()
        await eventually(lambda: _adopted(cluster.api.store.get(PODS, NAMESPACE, "notebook")),
                         what="adopted")  # fmt: skip

        pods = next(i for i in controller.informers if i.kind.plural == "pods" and
                    i.labels.startswith(names.APPWRAPPER_LABEL))  # fmt: skip
        assert pods.get("kube-public", "ballast") is None
        cached = pods.get(NAMESPACE, "notebook")
        assert cached is not None and "spec" not in cached
        # The pods are watched as metadata alone (PartialObjectMetadata).
        watches = [q for q in cluster.api.requests if q.path.endswith("/pods")
                   and q.query.get("labelSelector", "").startswith(names.APPWRAPPER_LABEL)]  # fmt: skip
        assert watches and all("watch" in q.query or q.query.get("limit") for q in watches)


async def test_a_users_padded_pods_in_a_covered_namespace_are_cached_small(
    tmp_path: Path,
) -> None:
    """Pods a namespace user labels for an AppWrapper, with annotations and a spec of her own,
    cost the cache the same few fields as any waiting pod."""
    async with adopting(tmp_path) as cluster:
        for i in range(3):
            cluster.api.store.create(PODS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"ballast-{i}", "namespace": NAMESPACE,
                             "labels": {names.APPWRAPPER_LABEL: "x", **{f"l{n}": "v" for n in range(50)}},
                             "annotations": {"autowrap.io/podset": "0" * 1000, "pad": "x" * 100_000}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                                         "env": [{"name": "PAD", "value": "y" * 100_000}]}],
                         "schedulingGates": [{"name": "mine"}]}})  # fmt: skip
        controller = await cluster.start_controller()
        pods = next(i for i in controller.informers if i.kind.plural == "pods" and
                    i.labels.startswith(names.APPWRAPPER_LABEL))  # fmt: skip
        await eventually(lambda: len(pods) == 3, what="the pods cached")
        for cached in pods.items():
            assert len(json.dumps(cached)) < 600, cached


async def test_what_a_user_adds_to_an_adopted_jobs_metadata_is_not_cached(
    tmp_path: Path,
) -> None:
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=1))
        controller = await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        padded = {"metadata": {"labels": {f"team{i}": "x" * 60 for i in range(500)},
                               "annotations": {"notes": "n" * 200_000}}}  # fmt: skip
        cluster.api.store.patch(VCJOBS, NAMESPACE, job["metadata"]["name"], padded, MERGE)
        jobs = next(i for i in controller.informers if i.kind.plural == "jobs")
        await eventually(lambda: cluster.job()["metadata"]["resourceVersion"]  # type: ignore[index]
                         == (jobs.get(NAMESPACE, "train") or {}).get("metadata", {}).get("resourceVersion"),
                         what="the cache caught up")  # fmt: skip
        cached = jobs.get(NAMESPACE, "train")
        assert cached is not None and len(json.dumps(cached)) < 4_000
        assert cached["metadata"]["labels"][names.ADOPTION_LABEL] == names.ADOPTION_ADOPTED


@pytest.mark.parametrize("replicas", ["one, restarted", "two"])
async def test_only_the_jobs_own_pods_are_released_with_two_replicas_or_a_restart(
    tmp_path: Path, replicas: str
) -> None:
    """Issue 26 (review g01) with the controller's replicas as users run them: a gated pod that
    names the Job as its controller but is not Volcano's (her name, her image, 8 GPUs) is held
    while the Job's own pods are released, with room to spare in the admission."""
    async with adopting(tmp_path) as cluster:
        first = await cluster.start_controller("replica-a")
        if replicas == "two":
            await cluster.start_controller("replica-b")
        cluster.store_job(vcjob(workers=3))
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())
        forged = copy.deepcopy(cluster.volcano_pod(job, "worker", 0))
        cluster.api.store.delete(PODS, NAMESPACE, "train-worker-0")
        forged["metadata"] = {k: v for k, v in forged["metadata"].items()
                              if k in ("labels", "annotations", "ownerReferences")}  # fmt: skip
        forged["metadata"].update(name="aa-borrow", namespace=NAMESPACE)
        forged["spec"]["containers"][0]["image"] = "mallory/miner"
        cluster.api.store.create(PODS, forged)
        own = [cluster.volcano_pod(job, "master", 0), cluster.volcano_pod(job, "worker", 1)]
        if replicas != "two":
            await cluster.stop_controller(first)
            await cluster.start_controller("replica-c")

        cluster.admit()

        def released() -> bool:
            return all(
                not adoption.is_gated(cluster.api.store.get(PODS, NAMESPACE, p["metadata"]["name"]))
                for p in own
            )

        await eventually(released, what="the Job's own pods released")
        await eventually(
            lambda: any(
                "aa-borrow" in str(e.get("message")) for e in cluster.events("ReleaseFailed")
            ),
            what="the forged pod held, and why",
        )
        assert adoption.is_gated(cluster.api.store.get(PODS, NAMESPACE, "aa-borrow"))


async def test_pods_a_user_fills_up_and_labels_for_the_appwrapper_are_read_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A namespace user labels pods of her own with a real AppWrapper's name and fills them
    up: the release reads them live, page by page and each cut to what it decides on; the one
    that runs counts against the admission, the gated ones stay gated, and the Job's own pods
    are released in the room left."""
    from webhook.shell import kube

    monkeypatch.setattr(kube, "FIRST_PAGE", 2)  # pages of a few pods, whatever the count
    async with adopting(tmp_path) as cluster:
        cluster.store_job(vcjob(workers=2))
        await cluster.start_controller()
        job = await eventually(lambda: _adopted(cluster.job()) and cluster.job())

        def padded(name: str, *, gated: bool) -> dict:
            gates = [{"name": names.ADMISSION_GATE}] if gated else []
            return cluster.api.store.create(PODS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NAMESPACE,
                             "labels": {names.APPWRAPPER_LABEL: "train",
                                        names.VOLCANO_JOB_NAME: "train",
                                        **{f"l{n}": "v" * 60 for n in range(100)}},
                             "annotations": {adoption.PODSET_ANNOTATION: "1", "pad": "x" * 200_000}},
                "spec": {"containers": [{"name": "trainer", "image": "torch:2.4",
                                         "env": [{"name": "PAD", "value": "y" * 200_000}]}],
                         "schedulingGates": gates}})  # fmt: skip

        for i in range(6):
            padded(f"pad-{i}", gated=True)
        running = padded("pad-running", gated=False)
        cluster.api.store.update(PODS, {**running, "status": {"phase": "Running"}},
                                 subresource="status")  # fmt: skip
        own = cluster.volcano_pods(job)

        cluster.admit()

        held = await eventually(lambda: cluster.events("ReleaseHeld"), what="a worker held")
        assert "pad-running" in str(held[0].get("message")), held
        gated = {p["metadata"]["name"]: adoption.is_gated(p) for p in cluster.pods()}
        assert {name: gated[name] for name in (p["metadata"]["name"] for p in own)} == {
            "train-master-0": False, "train-worker-0": False, "train-worker-1": True,
        }  # fmt: skip
        assert all(gated[f"pad-{i}"] for i in range(6))
        # The live read of the pods that name the AppWrapper went page by page.
        selector = f"{names.APPWRAPPER_LABEL}=train"
        reads = [q for q in cluster.api.requests_to("GET", r"/namespaces/ml/pods$")
                 if q.query.get("labelSelector") == selector]  # fmt: skip
        assert reads and all(q.query.get("limit") for q in reads)
        assert any(q.query.get("continue") for q in reads)


def _status(job: dict[str, object] | None) -> str:
    annotations = ((job or {}).get("metadata") or {}).get("annotations") or {}  # type: ignore[attr-defined]
    return str(annotations.get(names.STATUS_ANNOTATION, ""))


async def test_a_job_named_as_a_running_pod_is_told_to_take_another_name_not_that_its_pod_is_gone(
    tmp_path: Path,
) -> None:
    """The AppWrapper of a running Pod keeps the name, and the Pod is still there: a Volcano
    Job of the same name waits, and its status says to rename it, never that the one the
    AppWrapper ran is gone (a Job of that name would be: names are unique per kind)."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": NAMESPACE,
                     "labels": {names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "torch:2.4", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }  # fmt: skip
    async with adopting(tmp_path) as cluster:
        cluster.api.store.create(PODS, prepared(pod))
        await cluster.start_controller()
        await eventually(lambda: cluster.appwrapper() is not None, what="the Pod's AppWrapper")
        cluster.set_phase("Running")
        cluster.store_job(vcjob())

        waiting = await eventually(
            lambda: (cluster.job() or {}).get("metadata", {}).get("annotations", {})
            .get(names.STATUS_ANNOTATION),
            what="the Job's waiting status",
        )  # fmt: skip
        assert "of an earlier Pod of the same name is Running" in waiting
        assert "is gone" not in waiting
        assert "give this Job another name: AppWrapper train runs the Pod ml/train" in waiting
        assert cluster.api.store.get(PODS, NAMESPACE, "train") is not None
