"""Adopt and redirect mode end to end on the real control plane: a Volcano Job and a labelled
Pod, written every way users spell a GPU's resources, with an init container, and a Job that
keeps Volcano's pytorch plugin (``--wait-master-enabled=true``) in an Audit namespace.

Each is admitted by the real Kueue, its pods made by the real Volcano (or the AppWrapper
controller, for a Pod), released, bound by vc-scheduler and Running; every rendezvous variable
of every container, read from the pods as stored and resolved as kubelet resolves them, is what
``autowrap render --pods`` showed before submitting. The same scenarios run on the fake cluster
in tests/adopt/test_resource_spellings.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.jobs import RESOURCE_SPELLINGS, training_job, with_init_container, with_resources
from testbed.real.cluster import QUEUE, RealCluster
from tests.real.support import (
    ADMISSION_GATE,
    REPO,
    Wrapped,
    apply_manifest,
    diagnosis,
    get,
    installed_policy,
    installed_policy_files,
    render_pods,
    rendezvous_problems,
    running_under_kueue,
    scratch_namespace,
    status_of,
)

pytestmark = pytest.mark.real

Obj = dict[str, Any]
RESEARCH = {"autowrap.io/tier": "research"}


def gpu_job(name: str, namespace: str, resources: Obj | None = None, workers: int = 2) -> Obj:
    job = training_job(name, namespace=namespace, queue=QUEUE, masters=1, workers=workers,
                       gpus=1, command=["torchrun", "train.py"])  # fmt: skip
    return with_resources(job, resources) if resources is not None else job


def labelled_pod(name: str, namespace: str, resources: Obj) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"autowrap.io/wrap": "true", "kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "registry.example.com/ml/torch:2.4",
             "command": ["torchrun", "train.py"], "resources": copy.deepcopy(resources)}]},
    }  # fmt: skip


def submitted(cluster: RealCluster, obj: Obj) -> None:
    """``kubectl apply -f`` of ``obj``, which adopt mode lets through: ``created``."""
    done = apply_manifest(cluster, obj)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f"/{obj['metadata']['name']} created"), done.stdout


def assert_rendezvous(
    cluster: RealCluster, wrapped: Wrapped, rows: dict[str, Obj], *, containers: bool = True
) -> None:
    namespace = wrapped.obj["metadata"]["namespace"]
    problems = rendezvous_problems(cluster, wrapped.pods, rows, containers=containers)
    assert not problems, "\n".join(problems) + "\n" + diagnosis(cluster, namespace)


def assert_adopted_status(cluster: RealCluster, kind: str, name: str, namespace: str) -> None:
    stored = get(cluster, kind, name, namespace)
    assert "Running" in status_of(stored), diagnosis(cluster, namespace)


@pytest.mark.parametrize("spelling", sorted(RESOURCE_SPELLINGS))
def test_a_job_and_a_pod_in_each_resource_spelling_run_with_their_rendezvous(
    real_cluster: RealCluster, tmp_path: Path, spelling: str
) -> None:
    cluster, ns = real_cluster, f"adopt-{spelling}"
    resources = RESOURCE_SPELLINGS[spelling]
    with scratch_namespace(cluster, ns):
        policies = installed_policy_files(cluster, tmp_path / "policies")
        job, pod = gpu_job("train", ns, resources), labelled_pod("notebook", ns, resources)
        job_rows = render_pods(job, namespace=ns, labels={}, policies=policies)
        pod_rows = render_pods(pod, namespace=ns, labels={}, policies=policies)
        assert all(ADMISSION_GATE in r["schedulingGates"] for r in [*job_rows.values(),
                                                                   *pod_rows.values()])  # fmt: skip
        submitted(cluster, job)
        submitted(cluster, pod)

        wrapped_job = running_under_kueue(cluster, ns, "vcjob", "train", 3)
        wrapped_pod = running_under_kueue(cluster, ns, "pod", "notebook", 1)
        assert_rendezvous(cluster, wrapped_job, job_rows)
        assert_rendezvous(cluster, wrapped_pod, pod_rows)
        assert_adopted_status(cluster, "vcjob", "train", ns)
        assert_adopted_status(cluster, "pod", "notebook", ns)
        # The pod kube-apiserver stored is not the template as written (requests defaulted
        # from limits, canonical quantities), yet it is the admitted template: released.
        for found in wrapped_job.pods + wrapped_pod.pods:
            requests = found["spec"]["containers"][0]["resources"].get("requests") or {}
            assert requests.get("nvidia.com/gpu") == "1", found["spec"]["containers"][0]


def test_a_job_with_an_init_container_runs_with_the_env_in_every_container(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "adopt-init"
    with scratch_namespace(cluster, ns):
        policies = installed_policy_files(cluster, tmp_path / "policies")
        job = with_init_container(
            gpu_job("train", ns), {"limits": {"cpu": "0.5", "memory": "64Mi"}}
        )
        rows = render_pods(job, namespace=ns, labels={}, policies=policies)
        submitted(cluster, job)
        wrapped = running_under_kueue(cluster, ns, "vcjob", "train", 3)
        for pod in wrapped.pods:
            assert [c["name"] for c in pod["spec"]["initContainers"]] == ["fetch"], pod["spec"]
        assert_rendezvous(cluster, wrapped, rows, containers=True)


def test_a_job_keeping_the_pytorch_plugin_runs_in_an_audit_namespace(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "adopt-pytorch"
    audit = yaml.safe_load((REPO / "policies" / "research-audit.yaml").read_text())
    with (
        installed_policy(cluster, "research-audit.yaml", audit),
        scratch_namespace(cluster, ns, labels=RESEARCH),
    ):
        policies = installed_policy_files(cluster, tmp_path / "policies")
        job = gpu_job("train", ns)
        job["spec"]["plugins"] = {"pytorch": ["--master=master", "--worker=worker",
                                              "--wait-master-enabled=true"]}  # fmt: skip
        rows = render_pods(job, namespace=ns, labels=RESEARCH, policies=policies)
        done = apply_manifest(cluster, job)
        assert done.returncode == 0, done.stderr
        # The finding the policy lets through is said to the user.
        assert "pytorch plugin" in done.stderr, done.stderr

        wrapped = running_under_kueue(cluster, ns, "vcjob", "train", 3)
        workers = [p for p in wrapped.pods if "-worker-" in p["metadata"]["name"]]
        assert [c["name"] for p in workers for c in p["spec"].get("initContainers") or []] == [
            "wait-for-master", "wait-for-master"
        ], diagnosis(cluster, ns)  # fmt: skip
        # The plugin's init container is Volcano's, not the template's: only the containers
        # are held to the rendezvous (the plugin's appended entries included, last one wins).
        assert_rendezvous(cluster, wrapped, rows, containers=False)
        assert_adopted_status(cluster, "vcjob", "train", ns)


def redirect_policy(namespace: str) -> Obj:
    return {"apiVersion": "autowrap.io/v1alpha1", "kind": "Policy",
            "metadata": {"name": f"redirect-{namespace}"},
            "spec": {"namespaces": {"names": [namespace]}, "wrap": "OptIn",
                     "mode": "Redirect"}}  # fmt: skip


def test_redirect_mode_denies_the_create_and_the_appwrapper_runs_it(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "redirect"
    with (
        installed_policy(cluster, f"redirect-{ns}.yaml", redirect_policy(ns)),
        scratch_namespace(cluster, ns),
    ):
        policies = installed_policy_files(cluster, tmp_path / "policies")
        job = gpu_job("train", ns, RESOURCE_SPELLINGS["limits-only"])
        pod = labelled_pod("notebook", ns, RESOURCE_SPELLINGS["limits-only"])
        rows = {
            "train": render_pods(job, namespace=ns, labels={}, policies=policies),
            "notebook": render_pods(pod, namespace=ns, labels={}, policies=policies),
        }
        assert not any(r["schedulingGates"] for by in rows.values() for r in by.values()), rows
        for obj in (job, pod):
            name = obj["metadata"]["name"]
            done = apply_manifest(cluster, obj)
            assert done.returncode != 0, done.stdout
            assert "Forbidden" in done.stderr, done.stderr
            assert f"was wrapped into AppWrapper {ns}/{name}" in done.stderr, done.stderr
        # Applying the Job again answers the same, whether it finds the AppWrapper (queued)
        # or the Job the AppWrapper created (admitted): an update of it is denied alike.
        again = apply_manifest(cluster, job)
        assert again.returncode != 0, again.stdout
        assert f"was wrapped into AppWrapper {ns}/train" in again.stderr, again.stderr

        for kind, name, count in (("vcjob", "train", 3), ("pod", "notebook", 1)):
            wrapped = running_under_kueue(cluster, ns, kind, name, count, adopted=False)
            assert "autowrap.io/adoption" not in (wrapped.obj["metadata"].get("labels") or {})
            assert_rendezvous(cluster, wrapped, rows[name])
