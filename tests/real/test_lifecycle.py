"""A wrapped Job's life on the real control plane, past its first run: deleted while queued
and while running (the real garbage collector takes what the AppWrapper owned), applied again,
preempted by Kueue and admitted again, reset by the AppWrapper controller after a pod failed.
After each: nothing stranded (no AppWrapper, Workload or pod of a deleted Job), nothing
resurrected (no Job comes back that its user deleted), and never more pods running than Kueue
admitted.

Short AppWrapper grace periods come from the Job's own fault-tolerance annotations, which
autowrap copies onto the AppWrapper (docs/user-guide.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.jobs import RESOURCE_SPELLINGS, training_job, with_resources
from testbed.real.cluster import QUEUE, RealCluster
from tests.real.support import (
    ADOPTION_FINALIZER,
    admitted_pods,
    apply_manifest,
    condition,
    controller_of,
    diagnosis,
    eventually,
    gates,
    get,
    installed_policy_files,
    job_pods,
    listed,
    phase,
    render_pods,
    rendezvous_problems,
    running_under_kueue,
    scratch_namespace,
    small_queue,
    status_of,
    workload_of,
)

pytestmark = pytest.mark.real

Obj = dict[str, Any]
FAULT_TOLERANCE = "workload.codeflare.dev.appwrapper/"


def gpu_job(
    name: str, namespace: str, *, workers: int = 1, gpus: int = 1, queue: str = QUEUE
) -> Obj:
    return training_job(name, namespace=namespace, queue=queue, masters=1, workers=workers,
                        gpus=gpus, command=["torchrun", "train.py"])  # fmt: skip


def released_pods(cluster: RealCluster, namespace: str) -> list[Obj]:
    """Pods that may run: not finished, not being deleted, no scheduling gate left."""
    return [p for p in listed(cluster, "pods", namespace)
            if phase(p) not in ("Succeeded", "Failed") and not gates(p)
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip


class AdmissionWatch:
    """Samples, on every poll, that no more pods of the namespace may run than Kueue's
    Workloads there admit (counting only Workloads that say Admitted)."""

    def __init__(self, cluster: RealCluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.breaches: list[str] = []

    def sample(self) -> None:
        admitted = sum(admitted_pods(w) for w in listed(self.cluster, "workloads", self.namespace)
                       if condition(w, "Admitted"))  # fmt: skip
        running = released_pods(self.cluster, self.namespace)
        if len(running) > admitted:
            self.breaches.append(f"{len(running)} pods may run, {admitted} admitted: "
                                 f"{[p['metadata']['name'] for p in running]}")  # fmt: skip

    def until(self, probe: Any, *, what: str, timeout: float = 120.0) -> Any:
        def sampled() -> Any:
            self.sample()
            return probe()

        return eventually(sampled, what=what, timeout=timeout,
                          explain=lambda: diagnosis(self.cluster, self.namespace))  # fmt: skip

    def check(self) -> None:
        assert not self.breaches, "\n".join(self.breaches)


def nothing_left_of(cluster: RealCluster, namespace: str, name: str) -> bool:
    """No Job, AppWrapper, Workload or pod of ``name`` is left in ``namespace``."""
    return (get(cluster, "vcjob", name, namespace) is None
            and get(cluster, "appwrapper", name, namespace) is None
            and not [w for w in listed(cluster, "workloads", namespace)
                     if w["metadata"]["name"].startswith(f"appwrapper-{name}-")]
            and not job_pods(cluster, namespace, name))  # fmt: skip


def test_a_job_deleted_while_queued_leaves_nothing_and_never_comes_back(
    real_cluster: RealCluster,
) -> None:
    cluster, ns = real_cluster, "life-queued"
    with scratch_namespace(cluster, ns), small_queue(cluster, ns, gpus=2) as queue:
        watch = AdmissionWatch(cluster, ns)
        # The blocker takes the queue's two GPUs; the victim waits behind it in Kueue's queue.
        blocker = gpu_job("blocker", ns, queue=queue)
        assert apply_manifest(cluster, blocker).returncode == 0
        running_under_kueue(cluster, ns, "vcjob", "blocker", 2)
        victim = gpu_job("victim", ns, queue=queue)
        created = apply_manifest(cluster, victim)
        assert created.returncode == 0, created.stderr
        queued = watch.until(
            lambda: (j := get(cluster, "vcjob", "victim", ns)) and "Queued" in status_of(j) and j,
            what="the victim adopted and queued behind the blocker",
        )
        assert ADOPTION_FINALIZER in queued["metadata"].get("finalizers", []), queued["metadata"]
        appwrapper = get(cluster, "appwrapper", "victim", ns)
        assert appwrapper is not None and appwrapper["spec"].get("suspend") is True, appwrapper

        deleted = cluster.kubectl("delete", "vcjob", "victim", "-n", ns)
        assert deleted.returncode == 0, deleted.stderr
        watch.until(lambda: nothing_left_of(cluster, ns, "victim"),
                    what="the victim's Job, AppWrapper, Workload and pods gone")  # fmt: skip

        # The quota frees up; a queued AppWrapper left behind would now be admitted and its
        # controller would create the Job again. A later job runs first: by then Kueue has
        # admitted whatever was queued before it.
        assert cluster.kubectl("delete", "vcjob", "blocker", "-n", ns).returncode == 0
        assert apply_manifest(cluster, gpu_job("later", ns, queue=queue)).returncode == 0
        running_under_kueue(cluster, ns, "vcjob", "later", 2, on_poll=watch.sample)
        assert nothing_left_of(cluster, ns, "victim"), diagnosis(cluster, ns)
        watch.check()


# Volcano's webhook writes the typed Job back, so the stored Job spells its quantities
# canonically ("1", "500m", "1Gi") whatever the manifest wrote; re-applying it is no change.
@pytest.mark.parametrize("spelling", sorted(RESOURCE_SPELLINGS))
def test_reapplying_the_unchanged_manifest_changes_nothing_that_runs(
    real_cluster: RealCluster, tmp_path: Path, spelling: str
) -> None:
    """Volcano's webhook stores a Job's quantities canonical (1 as "1", 0.5 as "500m"): the
    manifest re-applied differs from the stored spec in every spelling but one."""
    cluster, ns = real_cluster, f"reapply-{spelling}"
    with scratch_namespace(cluster, ns):
        jobs = {}
        for name, extra in (("client", []), ("server", ["--server-side"])):
            manifest = tmp_path / f"{name}.yaml"
            job = with_resources(gpu_job(name, ns), RESOURCE_SPELLINGS[spelling])
            manifest.write_text(yaml.safe_dump(job, sort_keys=False))
            done = cluster.kubectl("apply", *extra, "-f", str(manifest))
            assert done.returncode == 0, done.stderr
            jobs[name] = (extra, manifest, running_under_kueue(cluster, ns, "vcjob", name, 2))
        for name, (extra, manifest, first) in jobs.items():
            again = cluster.kubectl("apply", *extra, "-f", str(manifest))
            assert again.returncode == 0, f"kubectl apply {' '.join(extra)}: {again.stderr}"
            same = running_under_kueue(cluster, ns, "vcjob", name, 2)
            assert same.obj["metadata"]["uid"] == first.obj["metadata"]["uid"]
            assert same.obj["spec"] == first.obj["spec"], diagnosis(cluster, ns)
            assert [p["metadata"]["uid"] for p in same.pods] == [
                p["metadata"]["uid"] for p in first.pods
            ]


def test_a_job_deleted_while_running_then_applied_again_runs_once_more(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "life-running"
    with scratch_namespace(cluster, ns):
        watch = AdmissionWatch(cluster, ns)
        job = gpu_job("train", ns)
        manifest = tmp_path / "job.yaml"
        manifest.write_text(yaml.safe_dump(job, sort_keys=False))
        assert cluster.kubectl("apply", "-f", str(manifest)).returncode == 0
        first = running_under_kueue(cluster, ns, "vcjob", "train", 2)
        # Once it ran, the finalizer is gone: a delete is not held.
        assert ADOPTION_FINALIZER not in (first.obj["metadata"].get("finalizers") or [])

        deleted = cluster.kubectl("delete", "-f", str(manifest))
        assert deleted.returncode == 0, deleted.stderr
        watch.until(lambda: nothing_left_of(cluster, ns, "train"),
                    what="the Job, its AppWrapper, Workload and pods gone")  # fmt: skip

        again = cluster.kubectl("apply", "-f", str(manifest))
        assert again.returncode == 0, again.stderr
        second = running_under_kueue(cluster, ns, "vcjob", "train", 2)
        assert second.appwrapper["metadata"]["uid"] != first.appwrapper["metadata"]["uid"]
        assert second.obj["metadata"]["uid"] != first.obj["metadata"]["uid"]

        # delete -f then apply -f at once: either way it ends with one Job of the name,
        # running under one AppWrapper that stands for it.
        deleted = cluster.kubectl("delete", "-f", str(manifest), "--wait=false")
        assert deleted.returncode == 0, deleted.stderr

        def reapplied() -> bool:
            done = cluster.kubectl("apply", "-f", str(manifest))
            # While the old AppWrapper is being deleted a create is refused, saying to retry.
            assert done.returncode == 0 or "create it again in a few seconds" in done.stderr, (
                done.stderr
            )
            return done.returncode == 0

        eventually(reapplied, what="the Job applied again", timeout=60)
        third = running_under_kueue(cluster, ns, "vcjob", "train", 2)
        workloads = [w["metadata"]["name"] for w in listed(cluster, "workloads", ns)
                     if w["metadata"]["name"].startswith("appwrapper-train-")]  # fmt: skip
        assert workloads == [third.workload["metadata"]["name"]], diagnosis(cluster, ns)
        owner = controller_of(third.obj)
        assert owner is not None and owner["uid"] == third.appwrapper["metadata"]["uid"]
        watch.check()


def test_a_job_preempted_by_kueue_runs_again_on_readmission_and_goes_when_deleted(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "life-preempted"
    with scratch_namespace(cluster, ns):
        watch = AdmissionWatch(cluster, ns)
        policies = installed_policy_files(cluster, tmp_path / "policies")
        job = gpu_job("train", ns, workers=2)
        rows = render_pods(job, namespace=ns, labels={}, policies=policies)
        assert apply_manifest(cluster, job).returncode == 0
        first = running_under_kueue(cluster, ns, "vcjob", "train", 3)
        workload = first.workload["metadata"]["name"]

        # Kueue takes the admission back: the AppWrapper is suspended, its controller deletes
        # the Job and its pods.
        patch = json.dumps({"spec": {"active": False}})
        done = cluster.kubectl("patch", "workload", workload, "-n", ns, "--type=merge", "-p", patch)
        assert done.returncode == 0, done.stderr
        watch.until(lambda: get(cluster, "vcjob", "train", ns) is None
                    and not job_pods(cluster, ns, "train")
                    and (get(cluster, "appwrapper", "train", ns) or {}).get("status", {})
                    .get("phase") == "Suspended",
                    what="the AppWrapper suspended, its Job and pods gone")  # fmt: skip

        # Admitted again: the Job is created again (a new uid) and runs, every rank right.
        patch = json.dumps({"spec": {"active": True}})
        done = cluster.kubectl("patch", "workload", workload, "-n", ns, "--type=merge", "-p", patch)
        assert done.returncode == 0, done.stderr
        second = running_under_kueue(cluster, ns, "vcjob", "train", 3, adopted=False,
                                     on_poll=watch.sample)  # fmt: skip
        assert second.obj["metadata"]["uid"] != first.obj["metadata"]["uid"]
        assert second.appwrapper["metadata"]["uid"] == first.appwrapper["metadata"]["uid"]
        problems = rendezvous_problems(cluster, second.pods, rows)
        assert not problems, "\n".join(problems) + diagnosis(cluster, ns)

        # The user deletes the running Job: its AppWrapper goes with it, and its Workload and
        # pods. The Job the AppWrapper controller made again carries no adoption finalizer, so
        # the AppWrapper controller may see the component missing and mark it Failed (which
        # gives its quota back) a moment before autowrap removes it (docs/how-it-works.md).
        assert cluster.kubectl("delete", "vcjob", "train", "-n", ns).returncode == 0
        watch.until(lambda: nothing_left_of(cluster, ns, "train"),
                    what="the Job, its AppWrapper, Workload and pods gone")  # fmt: skip
        watch.check()


def test_a_pod_failure_resets_the_appwrapper_and_the_job_runs_again(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "life-reset"
    with scratch_namespace(cluster, ns):
        watch = AdmissionWatch(cluster, ns)
        policies = installed_policy_files(cluster, tmp_path / "policies")
        job = gpu_job("train", ns)
        job["metadata"]["annotations"] = {f"{FAULT_TOLERANCE}failureGracePeriodDuration": "1s",
                                          f"{FAULT_TOLERANCE}retryPausePeriodDuration": "1s"}  # fmt: skip
        rows = render_pods(job, namespace=ns, labels={}, policies=policies)
        assert apply_manifest(cluster, job).returncode == 0
        first = running_under_kueue(cluster, ns, "vcjob", "train", 2)
        annotations = first.appwrapper["metadata"]["annotations"]
        assert annotations[f"{FAULT_TOLERANCE}failureGracePeriodDuration"] == "1s", annotations

        # The worker's container exits 1, as a kubelet would report it.
        worker = next(p for p in first.pods if "-worker-" in p["metadata"]["name"])
        failed = {"status": {"phase": "Failed", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}],
            "containerStatuses": [{"name": worker["spec"]["containers"][0]["name"],
                                   "image": worker["spec"]["containers"][0]["image"],
                                   "imageID": "", "ready": False, "restartCount": 0,
                                   "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}  # fmt: skip
        done = cluster.kubectl("patch", "pod", worker["metadata"]["name"], "-n", ns,
                               "--subresource=status", "--type=merge", "-p", json.dumps(failed))  # fmt: skip
        assert done.returncode == 0, done.stderr

        # The AppWrapper controller resets: the Job is deleted and created again, and runs.
        old = {p["metadata"]["uid"] for p in first.pods}

        def created_again() -> bool:
            obj = get(cluster, "vcjob", "train", ns)
            return obj is not None and obj["metadata"]["uid"] != first.obj["metadata"]["uid"]

        watch.until(created_again, what="the Job deleted and created again by the reset",
                    timeout=180)  # fmt: skip
        second = running_under_kueue(cluster, ns, "vcjob", "train", 2, adopted=False,
                                     on_poll=watch.sample)  # fmt: skip
        appwrapper = get(cluster, "appwrapper", "train", ns)
        assert appwrapper is not None
        assert (appwrapper.get("status") or {}).get("resettingCount") == 1, appwrapper.get("status")
        assert appwrapper["metadata"]["uid"] == first.appwrapper["metadata"]["uid"]
        assert not old & {p["metadata"]["uid"] for p in listed(cluster, "pods", ns)}, diagnosis(
            cluster, ns
        )  # the failed run's pods are gone
        problems = rendezvous_problems(cluster, second.pods, rows)
        assert not problems, "\n".join(problems) + diagnosis(cluster, ns)
        workload = workload_of(cluster, ns, appwrapper)
        assert (
            workload is not None
            and workload["metadata"]["name"] == first.workload["metadata"]["name"]
        ), diagnosis(cluster, ns)
        watch.check()
