"""autowrap's availability on the real control plane, as docs/install.md ("When autowrap is
down") and docs/how-it-works.md (one replica acts at a time) say it: two replicas with one Lease
holder and a takeover when it stops; autowrap down, with what fails closed (labelled and
Always-namespace creates, AppWrappers wrapping a Volcano Job, pods of wrapped jobs) and what
fails open or is not affected (unlabelled objects, controller-made pods, other AppWrappers,
updates of adopted Jobs, running pods); work in flight that waits and then proceeds.

The replicas are processes on the host behind the Service stand-in: stopping them all closes
the Service's port, so kube-apiserver meets a refused connection, as with a Service without
endpoints. Every test leaves autowrap-0 alone running.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.jobs import RESOURCE_SPELLINGS, training_job, with_resources
from testbed.real.cluster import QUEUE, RealCluster
from tests.real.support import (
    ADMISSION_GATE,
    ADOPTION_FINALIZER,
    apply_manifest,
    condition,
    diagnosis,
    eventually,
    gates,
    get,
    installed_policy_files,
    job_pods,
    kubectl_json,
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
FIRST = "autowrap-0"
LEASE = ("autowrap-system", "autowrap-controller")


def gpu_job(
    name: str, namespace: str, *, workers: int = 2, gpus: int = 1, queue: str = QUEUE
) -> Obj:
    return training_job(name, namespace=namespace, queue=queue, masters=1, workers=workers,
                        gpus=gpus, command=["torchrun", "train.py"])  # fmt: skip


def labelled_pod(name: str, namespace: str, gpus: int = 1) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"autowrap.io/wrap": "true", "kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.example.com/ml/torch:2.4",
             "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }  # fmt: skip


def plain_pod(name: str, namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}  # fmt: skip


def appwrapper_of(name: str, namespace: str, component: Obj) -> Obj:
    return {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"components": [{"template": component}]}}  # fmt: skip


def holder(cluster: RealCluster) -> str:
    namespace, name = LEASE
    lease = get(cluster, "lease", name, namespace) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def leading(cluster: RealCluster, replica: str) -> float:
    for line in cluster.autowrap_metrics(replica).splitlines():
        if line.startswith("autowrap_controller_leading "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{replica} exports no autowrap_controller_leading")


def leave_one_replica(cluster: RealCluster) -> None:
    """autowrap-0 running, and no other replica."""
    if FIRST not in {r.name for r in cluster.running_replicas()}:
        cluster.start_autowrap(len(cluster.running_replicas()) + 1)
    for replica in cluster.running_replicas():
        if replica.name != FIRST:
            cluster.stop_autowrap(replica.name)
    assert [r.name for r in cluster.running_replicas()] == [FIRST]


@contextlib.contextmanager
def outage(cluster: RealCluster) -> Iterator[None]:
    """Every replica stopped for the block; one started again at its end, whatever happened
    (a namespace is not emptied without autowrap: its finalizer holds queued objects)."""
    cluster.stop_autowrap()
    assert not cluster.running_replicas()
    try:
        yield
    finally:
        if not cluster.running_replicas():
            cluster.start_autowrap(1)


@pytest.fixture
def replicas_restored(real_cluster: RealCluster) -> Iterator[RealCluster]:
    try:
        yield real_cluster
    finally:
        leave_one_replica(real_cluster)


def refused_by(done: Any, webhook: str) -> str:
    """The create was refused because ``webhook`` could not be called (fail closed)."""
    assert done.returncode != 0, f"accepted while autowrap is down: {done.stdout}"
    assert f'failed calling webhook "{webhook}"' in done.stderr, done.stderr
    text: str = done.stderr
    return text


def untouched(obj: Obj | None) -> bool:
    """Stored as written: no label, annotation, finalizer or gate of autowrap's."""
    assert obj is not None
    meta = obj["metadata"]
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {}),
            *(meta.get("finalizers") or [])]  # fmt: skip
    specs = [obj["spec"]] if obj["kind"] == "Pod" else [
        t["template"]["spec"] for t in obj["spec"]["tasks"]]  # fmt: skip
    return not [k for k in keys if k.startswith("autowrap.io/")] and not any(
        s.get("schedulingGates") for s in specs
    )


def test_two_replicas_one_holds_the_lease_and_the_other_takes_over(
    replicas_restored: RealCluster,
) -> None:
    cluster = replicas_restored
    cluster.start_autowrap(2)
    names = {r.name for r in cluster.running_replicas()}
    assert len(names) == 2, names
    first = eventually(lambda: (h := holder(cluster)) in names and h,
                       what="one replica holding the Lease")  # fmt: skip
    other = (names - {first}).pop()
    eventually(lambda: leading(cluster, first) == 1.0 and leading(cluster, other) == 0.0,
               what=f"{first} leading and {other} standing by",
               explain=lambda: f"{first}: {leading(cluster, first)}, {other}: "
               f"{leading(cluster, other)}")  # fmt: skip

    with scratch_namespace(cluster, "two-replicas") as ns:
        cluster.stop_autowrap(first)
        eventually(lambda: holder(cluster) == other, what=f"{other} taking the Lease over",
                   explain=lambda: f"holder {holder(cluster)!r}\n{cluster.log_tail(other)}")  # fmt: skip
        eventually(lambda: leading(cluster, other) == 1.0, what=f"{other} leading",
                   explain=lambda: cluster.log_tail(other))  # fmt: skip
        # The new leader adopts and releases; its webhooks answer alone.
        assert apply_manifest(cluster, gpu_job("train", ns)).returncode == 0
        running_under_kueue(cluster, ns, "vcjob", "train", 3)


def test_autowrap_down_fails_closed_where_the_docs_say_and_open_elsewhere(
    replicas_restored: RealCluster, tmp_path: Path
) -> None:
    cluster = replicas_restored
    with (
        scratch_namespace(cluster, "down") as ns,
        scratch_namespace(cluster, "down-always", labels={"autowrap.io/wrap": "Always"}) as always,
    ):
        policies = installed_policy_files(cluster, tmp_path / "policies")
        # Work in flight: a running job (applied, as GitOps does), a job and a pod queued for
        # good (more GPUs than the ClusterQueue has), both still carrying the finalizer.
        # Quantities spelled as they are stored: its re-apply is idempotent once autowrap is up.
        running = with_resources(
            gpu_job("running", ns), RESOURCE_SPELLINGS["requests-equal-limits"]
        )
        rows = render_pods(running, namespace=ns, labels={}, policies=policies)
        manifest = tmp_path / "running.yaml"
        manifest.write_text(yaml.safe_dump(running, sort_keys=False))
        assert cluster.kubectl("apply", "-f", str(manifest)).returncode == 0
        assert apply_manifest(cluster, gpu_job("queued", ns, workers=4, gpus=8)).returncode == 0
        assert apply_manifest(cluster, labelled_pod("waiting", ns, gpus=40)).returncode == 0
        running_under_kueue(cluster, ns, "vcjob", "running", 3)
        for kind, name in (("vcjob", "queued"), ("pod", "waiting")):
            eventually(lambda k=kind, n=name: "Queued" in status_of(get(cluster, k, n, ns)),
                       what=f"{kind} {name} adopted and queued",
                       explain=lambda: diagnosis(cluster, ns))  # fmt: skip

        with outage(cluster):
            # Labelled Volcano Jobs and Pods are rejected instead of created ungated; nothing is
            # created.
            refused_by(apply_manifest(cluster, gpu_job("late", ns), "create"),
                       "vcjobs.adopt.autowrap.io")  # fmt: skip
            refused_by(apply_manifest(cluster, labelled_pod("late-pod", ns), "create"),
                       "pods.adopt.autowrap.io")  # fmt: skip
            assert get(cluster, "vcjob", "late", ns) is None
            assert get(cluster, "pod", "late-pod", ns) is None
            # Outside that scope nothing changes: unlabelled objects are created as written.
            unlabelled = gpu_job("unlabelled", ns)
            del unlabelled["metadata"]["labels"]
            assert apply_manifest(cluster, unlabelled, "create").returncode == 0
            assert apply_manifest(cluster, plain_pod("plain", ns), "create").returncode == 0
            assert untouched(get(cluster, "vcjob", "unlabelled", ns))
            assert untouched(get(cluster, "pod", "plain", ns))

            # In a namespace labelled Always every Volcano Job and Pod created directly is
            # rejected, kubectl run too; pods that controllers make are not affected.
            refused_by(cluster.kubectl("run", "debug", "-n", always, "--image=busybox:1.36",
                                       "--restart=Never"), "pods.adopt-always.autowrap.io")  # fmt: skip
            refused_by(apply_manifest(cluster, {**unlabelled, "metadata": {
                "name": "unlabelled", "namespace": always}}, "create"),
                "vcjobs.adopt-always.autowrap.io")  # fmt: skip
            batch = {"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "batch", "namespace": always},
                     "spec": {"template": {"spec": {"restartPolicy": "Never",
                              "containers": [{"name": "main", "image": "busybox:1.36"}]}}}}  # fmt: skip
            assert apply_manifest(cluster, batch, "create").returncode == 0
            eventually(lambda: listed(cluster, "pods", always, "job-name=batch"),
                       what="the batch Job's pod created by its controller",
                       explain=lambda: diagnosis(cluster, always))  # fmt: skip

            # AppWrappers wrapping a Volcano Job are rejected; other AppWrappers are not affected.
            wrapping = appwrapper_of("wraps-vcjob", ns, {k: v for k, v in gpu_job("w", ns).items()
                                                         if k != "status"})  # fmt: skip
            wrapping["spec"]["components"][0]["template"]["metadata"] = {"name": "w"}
            refused_by(apply_manifest(cluster, wrapping, "create", "--dry-run=server"),
                       "appwrappers.mutate.autowrap.io")  # fmt: skip
            other = appwrapper_of("wraps-batch", ns, {**batch, "metadata": {"name": "batch"}})
            done = apply_manifest(cluster, other, "create", "--dry-run=server")
            assert done.returncode == 0, done.stderr

            # The ValidatingAdmissionPolicies hold: nobody but autowrap takes the gate off.
            waiting = get(cluster, "pod", "waiting", ns)
            assert waiting is not None and gates(waiting) == [ADMISSION_GATE], waiting
            ungate = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
            done = cluster.kubectl("patch", "pod", "waiting", "-n", ns, "--type=json", "-p", ungate)
            assert done.returncode != 0 and "autowrap-admission-gate" in done.stderr, done.stderr

            # Updates of adopted Jobs go through unchanged (fail open): a re-apply of the
            # unchanged manifest meets Volcano, which refuses any change of spec.tasks.
            reapplied = cluster.kubectl("apply", "-f", str(manifest))
            assert reapplied.returncode != 0 and "volcano" in reapplied.stderr.lower(), (
                reapplied.stdout + reapplied.stderr
            )

            # Running pods are not affected; a pod of a wrapped job that Volcano makes again
            # cannot be created while autowrap is down.
            assert all(phase(p) == "Running" for p in job_pods(cluster, ns, "running"))
            assert cluster.kubectl("delete", "pod", "running-worker-1", "-n", ns).returncode == 0
            eventually(lambda: "pods.mutate.autowrap.io" in cluster.kubectl(
                "get", "events", "-n", ns).stdout + cluster.log_tail("vc-controller-manager", 200),
                what="Volcano failing to create the pod on autowrap's pod webhook",
                explain=lambda: cluster.log_tail("vc-controller-manager"))  # fmt: skip
            assert "running-worker-1" not in [p["metadata"]["name"] for p in
                                              job_pods(cluster, ns, "running")]  # fmt: skip

            # A delete of an object that still carries the finalizer waits.
            done = cluster.kubectl("delete", "vcjob", "queued", "-n", ns, "--wait=false")
            assert done.returncode == 0, done.stderr
            queued = get(cluster, "vcjob", "queued", ns)
            assert queued is not None and queued["metadata"].get("deletionTimestamp"), queued
            assert ADOPTION_FINALIZER in queued["metadata"]["finalizers"]

        # Back up: everything proceeds, and resubmitting works.
        eventually(lambda: get(cluster, "vcjob", "queued", ns) is None
                   and get(cluster, "appwrapper", "queued", ns) is None,
                   what="the queued job's delete finished, its AppWrapper gone",
                   explain=lambda: diagnosis(cluster, ns))  # fmt: skip
        again = running_under_kueue(cluster, ns, "vcjob", "running", 3)
        problems = rendezvous_problems(cluster, again.pods, rows)
        assert not problems, "\n".join(problems) + diagnosis(cluster, ns)
        done = cluster.kubectl("apply", "-f", str(manifest))
        assert done.returncode == 0, done.stderr
        assert apply_manifest(cluster, gpu_job("late", ns), "create").returncode == 0
        running_under_kueue(cluster, ns, "vcjob", "late", 3)
        done = cluster.kubectl("run", "debug", "-n", always, "--image=busybox:1.36",
                               "--restart=Never")  # fmt: skip
        assert done.returncode == 0, done.stderr


def test_admitted_work_waits_gated_while_autowrap_is_down_and_then_runs(
    replicas_restored: RealCluster,
) -> None:
    cluster = replicas_restored
    with scratch_namespace(cluster, "in-flight") as ns, small_queue(cluster, ns, gpus=2) as queue:
        # The blocker takes the queue's two GPUs; the waiting job is adopted and queued behind it.
        assert (
            apply_manifest(cluster, gpu_job("blocker", ns, workers=1, queue=queue)).returncode == 0
        )
        blocker = running_under_kueue(cluster, ns, "vcjob", "blocker", 2)
        waiting = gpu_job("waiting", ns, workers=1, queue=queue)
        assert apply_manifest(cluster, waiting).returncode == 0
        eventually(lambda: "Queued" in status_of(get(cluster, "vcjob", "waiting", ns)),
                   what="the waiting job adopted and queued",
                   explain=lambda: diagnosis(cluster, ns))  # fmt: skip

        with outage(cluster):
            # Kueue takes the blocker's admission back and admits the waiting job: its
            # AppWrapper runs, but none of its pods runs before autowrap releases it.
            done = cluster.kubectl("patch", "workload", blocker.workload["metadata"]["name"], "-n",
                                   ns, "--type=merge", "-p", json.dumps({"spec": {"active": False}}))  # fmt: skip
            assert done.returncode == 0, done.stderr

            def admitted() -> bool:
                appwrapper = get(cluster, "appwrapper", "waiting", ns)
                return appwrapper is not None and condition(
                    workload_of(cluster, ns, appwrapper), "Admitted"
                )

            eventually(admitted, what="Kueue admitting the waiting job",
                       explain=lambda: diagnosis(cluster, ns))  # fmt: skip
            pods = job_pods(cluster, ns, "waiting")
            assert not [p for p in pods if not gates(p) or phase(p) == "Running"], diagnosis(
                cluster, ns
            )

        running_under_kueue(cluster, ns, "vcjob", "waiting", 2)
        # The blocker stays evicted, none of its pods back.
        evicted = workload_of(cluster, ns, kubectl_json(cluster, "get", "appwrapper", "blocker",
                                                        "-n", ns))  # fmt: skip
        assert condition(evicted, "Evicted"), diagnosis(cluster, ns)
        assert not job_pods(cluster, ns, "blocker"), diagnosis(cluster, ns)
