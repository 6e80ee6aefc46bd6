"""autowrap installed, upgraded and removed with its Helm chart on the real control plane.

The session's kustomize install is taken out first (``autowrap uninstall``), and put back at
the end whatever happened, serving as before. In between, the pinned helm installs a previous
release of the chart (the chart at a lower version, with another policy set and other resources)
into autowrap-system, as a user would with ``--create-namespace``; ``autowrap doctor`` passes and
a labelled Volcano Job is adopted, admitted and runs. With one job running and one queued,
``helm upgrade`` to the chart as committed loses neither, and the queued one runs once its
queue admits it. Last, ``autowrap uninstall`` and ``helm uninstall`` (docs/install.md, "With
Helm") leave nothing that comes back and nothing stuck: the job that never ran is gone with
its AppWrapper and stays gone once its queue would have admitted it, the jobs that ran run on
without autowrap's finalizer, and nothing of the release is left but what the AppWrapper
controller still needs.
"""

from __future__ import annotations

import copy
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from testbed import prerequisites
from testbed.real import autowrap, chart, kubeapi, objects
from testbed.real.cluster import QUEUE, RealCluster
from tests.real import support
from webhook.core import adoption
from webhook.model import names

pytestmark = pytest.mark.real

Obj = dict[str, Any]
T = TypeVar("T")
JOBS = "helm-jobs"
HELD = "held"  # a LocalQueue whose ClusterQueue holds new admissions until released
HELD_CLUSTER_QUEUE = "helm-held"
VCJOBS = "/apis/batch.volcano.sh/v1alpha1"
APPWRAPPERS = "/apis/workload.codeflare.dev/v1beta2"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
# The control plane runs the OwnerReferencesPermissionEnforcement admission plugin, where the
# install needs the owner-references grant (docs/install.md, Prerequisites), as the launcher's does.
CLUSTER = ("--set", "rbac.ownerReferencesEnforcement=true")
PREVIOUS_RESOURCES = (
    "--set",
    "resources.requests.cpu=50m",
    "--set",
    "resources.requests.memory=64Mi",
)
PREVIOUS_POLICIES = (
    "--set-file", "policies.default\\.yaml=policies/default.yaml",
    "--set-file", "policies.audit\\.yaml=policies/research-audit.yaml",
)  # fmt: skip
DEADLINE = 90.0


def eventually(probe: Callable[[], T | None], what: str, timeout: float = DEADLINE) -> T:
    """``support.eventually`` with this module's deadline."""
    return support.eventually(probe, what=what, timeout=timeout)


def vcjob(name: str, queue: str) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": JOBS,
                     "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [{
            "name": "worker", "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"],
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}}]},
    }  # fmt: skip


@dataclass
class Job:
    """One submitted Volcano Job, read back from the cluster."""

    cluster: RealCluster
    name: str

    def get(self) -> Obj | None:
        return self.cluster.admin.get(f"{VCJOBS}/namespaces/{JOBS}/jobs/{self.name}")

    def appwrapper(self) -> Obj | None:
        job = self.get()
        name = adoption.appwrapper_name_of(job) if job else None
        return self.cluster.admin.get(
            f"{APPWRAPPERS}/namespaces/{JOBS}/appwrappers/{name or self.name}"
        )

    def pods(self) -> list[Obj]:
        listed = self.cluster.admin.request(
            "GET", f"/api/v1/namespaces/{JOBS}/pods?labelSelector=volcano.sh/job-name={self.name}"
        )
        return list(listed["items"])

    def adopted(self) -> Obj | None:
        job = self.get()
        labels = ((job or {}).get("metadata") or {}).get("labels") or {}
        return job if labels.get(names.ADOPTION_LABEL) == names.ADOPTION_ADOPTED else None

    def admitted(self) -> Obj | None:
        appwrapper = self.appwrapper()
        return appwrapper if appwrapper and adoption.was_admitted(appwrapper) else None

    def running(self) -> list[Obj] | None:
        job = self.get() or {}
        phase = ((job.get("status") or {}).get("state") or {}).get("phase")
        pods = self.pods()
        ready = pods and all((p.get("status") or {}).get("phase") == "Running" for p in pods)
        return pods if phase == "Running" and ready else None

    def gated(self) -> list[Obj] | None:
        pods = self.pods()
        gates = [[g["name"] for g in p["spec"].get("schedulingGates") or []] for p in pods]
        return pods if pods and all(names.ADMISSION_GATE in g for g in gates) else None

    def finalizers(self) -> list[str]:
        return list(((self.get() or {}).get("metadata") or {}).get("finalizers") or [])

    def uids(self) -> tuple[str, str, tuple[str, ...]]:
        job, appwrapper = self.get(), self.appwrapper()
        assert job is not None and appwrapper is not None
        return (job["metadata"]["uid"], appwrapper["metadata"]["uid"],
                tuple(sorted(p["metadata"]["uid"] for p in self.pods())))  # fmt: skip


@dataclass
class Helmed:
    """The cluster with the kustomize install taken out, and what puts it back."""

    cluster: RealCluster
    helm: chart.Helm
    previous: Path
    replicas: int
    jobs: dict[str, Job] = field(default_factory=dict)

    def submit(self, name: str, queue: str) -> Job:
        done = self.cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(vcjob(name, queue)))
        assert done.returncode == 0, done.stderr
        self.jobs[name] = Job(self.cluster, name)
        return self.jobs[name]

    def release(self) -> Obj | None:
        return next((r for r in self.helm.releases() if r["name"] == chart.RELEASE), None)

    def install_previous(self) -> None:
        """The previous release installed and served, unless a release is already there."""
        if self.release() is not None:
            return
        done = self.helm.install(self.previous, *CLUSTER, *PREVIOUS_RESOURCES, *PREVIOUS_POLICIES)
        assert done.returncode == 0, done.stderr
        chart.serve(self.cluster, self.helm.manifest(), self.replicas)

    def hold(self, held: bool) -> None:
        """The LocalQueue HELD's ClusterQueue holding new admissions, or admitting again."""
        if self.cluster.admin.get(f"{KUEUE}/clusterqueues/{HELD_CLUSTER_QUEUE}") is None:
            queue = objects.cluster_queue()
            queue["metadata"]["name"] = HELD_CLUSTER_QUEUE
            self.cluster.admin.apply(queue)
            self.cluster.admin.apply({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": HELD, "namespace": JOBS},
                "spec": {"clusterQueue": HELD_CLUSTER_QUEUE},
            })  # fmt: skip
        self.cluster.admin.request(
            "PATCH", f"{KUEUE}/clusterqueues/{HELD_CLUSTER_QUEUE}",
            {"spec": {"stopPolicy": "Hold" if held else "None"}},
            content_type="application/merge-patch+json",
        )  # fmt: skip


def previous_chart(directory: Path) -> Path:
    """The committed chart at a lower version (a pre-release of the current one)."""
    copied = directory / "autowrap"
    shutil.copytree(chart.CHART, copied)
    metadata = yaml.safe_load((copied / "Chart.yaml").read_text())
    metadata["version"] = f"{metadata['version']}-previous"
    (copied / "Chart.yaml").write_text(yaml.safe_dump(metadata, sort_keys=False))
    return copied


@pytest.fixture(scope="module")
def helmed(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Helmed]:
    cluster = real_cluster
    installed = copy.deepcopy(cluster.autowrap_objects)
    helm = chart.Helm(cluster, prerequisites.helm())
    previous = previous_chart(tmp_path_factory.mktemp("chart"))
    state = Helmed(cluster, helm, previous, max(1, len(cluster.running_replicas())))
    cluster.add_namespace(JOBS)
    removed = chart.remove(cluster)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    chart.drop_kept(cluster)
    try:
        yield state
    finally:
        # Whatever the tests left: the release out as they would take it out, then the
        # session's install back, serving as before; a failure here is raised once it is back.
        failures: list[BaseException] = []
        try:
            if state.release() is not None:
                chart.remove(cluster)
                state.helm.uninstall()
        except Exception as failure:  # raised below, once the install is back
            failures.append(failure)
        cluster.kubectl("delete", "namespace", JOBS, "--wait=false")
        cluster.kubectl("delete", "clusterqueue", HELD_CLUSTER_QUEUE, "--wait=false")
        chart.install_kustomize(cluster, installed, state.replicas)
        if failures:
            raise failures[0]


def doctor(cluster: RealCluster) -> None:
    done = chart.autowrap_cli(cluster, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr


def run_through(job: Job) -> None:
    eventually(job.adopted, f"{job.name} adopted")
    eventually(job.admitted, f"{job.name}'s AppWrapper admitted by Kueue")
    eventually(job.running, f"{job.name} Running")


def test_helm_install_passes_doctor_and_runs_a_labelled_job(helmed: Helmed) -> None:
    helmed.install_previous()
    release = helmed.release()
    assert release is not None and release["status"] == "deployed"
    assert release["chart"].endswith("-previous")
    configuration = helmed.cluster.admin.get(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/autowrap-mutating"
    )
    assert configuration is not None
    annotations = configuration["metadata"]["annotations"]
    assert annotations["meta.helm.sh/release-name"] == chart.RELEASE
    # autowrap (self-managed, the default) wrote the caBundles the chart leaves out.
    eventually(lambda: chart.ca_bundles_written(helmed.cluster), "caBundles written")

    doctor(helmed.cluster)
    run_through(helmed.submit("first", QUEUE))


def test_helm_upgrade_with_jobs_running_and_queued_loses_nothing(helmed: Helmed) -> None:
    helmed.install_previous()
    running = helmed.submit("running", QUEUE)
    run_through(running)
    helmed.hold(True)
    queued = helmed.submit("queued", HELD)
    eventually(queued.adopted, "queued adopted")
    eventually(queued.gated, "queued's pods gated")
    before = {job.name: job.uids() for job in (running, queued)}

    upgraded = helmed.helm.upgrade(chart.CHART, *CLUSTER)
    assert upgraded.returncode == 0, upgraded.stderr
    chart.roll(helmed.cluster, helmed.helm.manifest())

    version = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())["version"]
    history = helmed.helm.history()
    assert [h["chart"] for h in history] == [f"autowrap-{version}-previous", f"autowrap-{version}"]
    assert history[-1]["status"] == "deployed"
    policies = helmed.cluster.admin.get(f"/api/v1/namespaces/{autowrap.NAMESPACE}/configmaps/"
                                        f"{autowrap.POLICY_CONFIGMAP}")  # fmt: skip
    assert policies is not None and sorted(policies["data"]) == ["default.yaml"]
    deployment = helmed.cluster.admin.get(f"/apis/apps/v1/namespaces/{autowrap.NAMESPACE}/"
                                          f"deployments/{autowrap.SERVICE}")  # fmt: skip
    assert deployment is not None
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    # The chart's own default again, where the previous release had set its own.
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    assert resources["requests"] == values["resources"]["requests"]
    assert deployment["spec"]["replicas"] == len(helmed.cluster.running_replicas())

    # Nothing lost: the same objects, the running pods never restarted, the queued ones still
    # gated; the queued job runs once its queue admits it.
    assert {job.name: job.uids() for job in (running, queued)} == before
    assert running.running() and queued.gated()
    helmed.hold(False)
    run_through(queued)
    assert queued.uids()[:2] == before["queued"][:2]
    doctor(helmed.cluster)


def test_autowrap_uninstall_then_helm_uninstall_leave_nothing_to_resurrect_or_stuck(
    helmed: Helmed,
) -> None:
    cluster = helmed.cluster
    helmed.install_previous()
    ran = helmed.jobs.get("running") or helmed.submit("ran", QUEUE)
    run_through(ran)
    helmed.hold(True)
    never = helmed.submit("never-ran", HELD)
    eventually(never.adopted, "never-ran adopted")
    eventually(never.gated, "never-ran's pods gated")
    never_appwrapper = never.appwrapper()
    assert never_appwrapper is not None

    released = helmed.helm.manifest()
    removed = chart.remove(cluster)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    uninstalled = helmed.helm.uninstall()
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert helmed.release() is None

    # Nothing of autowrap is left but the AppWrapper controller's grant, kept by both.
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations",
                 "validatingadmissionpolicies", "validatingadmissionpolicybindings"):  # fmt: skip
        listed = cluster.admin.request("GET", f"/apis/admissionregistration.k8s.io/v1/{kind}"
                                       "?labelSelector=app.kubernetes.io/part-of%3Dautowrap")  # fmt: skip
        assert listed["items"] == [], kind
    for kind in ("clusterroles", "clusterrolebindings"):
        listed = cluster.admin.request("GET", f"{chart.RBAC}/{kind}"
                                       "?labelSelector=app.kubernetes.io/part-of%3Dautowrap")  # fmt: skip
        assert [o["metadata"]["name"] for o in listed["items"]] == [chart.KEPT], kind
    left = sorted(f"{o['kind']} {o['metadata']['name']}" for o in released
                  if cluster.admin.get(kubeapi.path_of(o)) is not None)  # fmt: skip
    assert left == [f"ClusterRole {chart.KEPT}", f"ClusterRoleBinding {chart.KEPT}"]
    kept = cluster.admin.get(f"{chart.RBAC}/clusterroles/{chart.KEPT}")
    assert kept is not None and kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    # The job that never ran is gone with its AppWrapper, and stays gone once its queue would
    # have admitted it.
    path = f"{APPWRAPPERS}/namespaces/{JOBS}/appwrappers/{never_appwrapper['metadata']['name']}"
    eventually(lambda: never.get() is None and cluster.admin.get(path) is None,
               "never-ran and its AppWrapper deleted")  # fmt: skip
    helmed.hold(False)
    time.sleep(10)
    assert never.get() is None and cluster.admin.get(path) is None
    # The jobs that ran run on under their AppWrappers, and nothing holds their deletion.
    for job in helmed.jobs.values():
        if job.name == never.name:
            continue
        assert job.running(), job.name
        assert job.appwrapper() is not None, job.name
        assert names.ADOPTION_FINALIZER not in job.finalizers(), job.name

    def nothing_gated() -> bool:
        pods = cluster.admin.request("GET", f"/api/v1/namespaces/{JOBS}/pods")["items"]
        return not [p for p in pods if names.ADMISSION_GATE in
                    [g["name"] for g in p["spec"].get("schedulingGates") or []]]  # fmt: skip

    eventually(nothing_gated, f"no pod in {JOBS} gated by autowrap")
