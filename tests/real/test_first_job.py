"""A user's first hour, on the real control plane: the README's "Your first job" and
docs/install.md's "Smoke test" typed as printed, and ``autowrap doctor`` (with and without
``--smoke``) finding nothing wrong with an install made from deploy/.

The smoke test's shell block is read from docs/install.md and run step by step through bash,
``kubectl`` on the PATH being the session's kubectl with the administrator's kubeconfig: what
the doc prints is what runs. The one command left out is ``kubectl logs``: KWOK's nodes have no
kubelet to serve logs, so the line the container would print is computed from the pod's stored
env instead, as kubelet would resolve it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.jobs import training_job
from testbed.real.cluster import QUEUE, RealCluster
from tests.real.support import (
    ADMISSION_GATE,
    AUTOWRAP_CLI,
    REPO,
    container_env,
    diagnosis,
    eventually,
    get,
    installed_policy_files,
    job_pods,
    listed,
    render_pods,
    rendezvous_problems,
    running_and_released,
    scratch_namespace,
    status_of,
)

pytestmark = pytest.mark.real

SMOKE_NAMESPACE = "autowrap-smoke"


def shell(cluster: RealCluster, workdir: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash in ``workdir``, ``kubectl`` being the session's (as admin) and
    ``CLUSTER_QUEUE`` the ClusterQueue the launcher made."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "kubectl"
    wrapper.write_text(f'#!/bin/sh\nexec {cluster.kubectl_binary} '
                       f'--kubeconfig={cluster.admin_kubeconfig} "$@"\n')  # fmt: skip
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CLUSTER_QUEUE": "cq"}
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def smoke_steps() -> dict[str, str]:
    """docs/install.md's by-hand smoke test, cut at its comments: ``setup`` (namespace,
    LocalQueue, the Job's file), then ``1``, ``2``, ``3``, ``4`` and ``clean``."""
    text = (REPO / "docs" / "install.md").read_text()
    section = text.split("## Smoke test", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    block = next(b for b in blocks if "smoke-job.yaml" in b)
    steps: dict[str, list[str]] = {"setup": []}
    current = "setup"
    for line in block.splitlines():
        marker = re.match(r"# (\d)\. ", line)
        if marker:
            current = marker.group(1)
        elif line.startswith("# Clean up"):
            current = "clean"
        steps.setdefault(current, []).append(line)
    found = {step: "\n".join(lines) + "\n" for step, lines in steps.items()}
    assert sorted(found) == ["1", "2", "3", "4", "clean", "setup"], sorted(found)
    return found


def doctor(cluster: RealCluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(AUTOWRAP_CLI), "doctor", "--kubeconfig", str(cluster.admin_kubeconfig), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False,
                          cwd=REPO)  # fmt: skip


def test_the_smoke_test_as_docs_install_prints_it(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    steps = smoke_steps()
    cluster, ns = real_cluster, SMOKE_NAMESPACE
    try:
        setup = shell(cluster, tmp_path, steps["setup"])
        assert setup.returncode == 0, setup.stderr
        assert "localqueue.kueue.x-k8s.io/smoke created" in setup.stdout, setup.stdout

        # 1. The dry run shows the prepared Job; nothing is created.
        dry = shell(cluster, tmp_path, steps["1"])
        assert dry.returncode == 0, dry.stderr
        for shown in ("autowrap.io/adoption: pending", f"name: {ADMISSION_GATE}",
                      "- autowrap.io/adoption"):  # fmt: skip
            assert shown in dry.stdout, f"{shown!r} not in the dry run's output:\n{dry.stdout}"
        assert get(cluster, "vcjob", "smoke", ns) is None, "the dry run created the Job"

        # 2. The real create succeeds.
        create = shell(cluster, tmp_path, steps["2"])
        assert create.returncode == 0, create.stderr
        assert create.stdout.strip() == "job.batch.volcano.sh/smoke created", create.stdout

        # 3. Adopted, queued, admitted, released, running.
        pods = eventually(lambda: (p := job_pods(cluster, ns, "smoke")) and running_and_released(p, 2) and p,
                          what="the smoke Job's two pods running, released", timeout=120,
                          explain=lambda: diagnosis(cluster, ns))  # fmt: skip
        looks = shell(cluster, tmp_path, "\n".join(
            line for line in steps["3"].splitlines() if not line.startswith("kubectl logs")))  # fmt: skip
        assert looks.returncode == 0, looks.stderr
        adoption = re.search(r"^smoke\s+Running\s+.*\badopted\s*$", looks.stdout, flags=re.M)
        assert adoption, f"kubectl get vcjob -L autowrap.io/adoption:\n{looks.stdout}"
        events = looks.stdout.split("Events:", 1)[1].split("\nNAME", 1)[0]
        assert re.search(r"\bAdopted\b", events) and re.search(r"\bRunning\b", events), events
        assert re.search(r"^smoke\s+Running\s+True\s+True\s+False", looks.stdout, flags=re.M), (
            looks.stdout
        )  # the AppWrapper
        assert re.search(r"^appwrapper-smoke-\S+\s+smoke\s+cq\s+True", looks.stdout, flags=re.M), (
            looks.stdout
        )  # its Workload, admitted
        worker = next(p for p in pods if p["metadata"]["name"] == "smoke-worker-0")
        env = container_env(cluster, worker)
        line = (f"node {env.get('NODE_RANK')} of {env.get('NNODES')}, master "
                f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}")  # fmt: skip
        printed = re.search(r'kubectl logs .*# "(.*)"', steps["3"])
        assert printed is not None, steps["3"]
        assert line == printed.group(1), (line, env)

        # 4. An unlabeled job is not touched.
        untouched = shell(cluster, tmp_path, steps["4"])
        assert untouched.returncode == 0, untouched.stderr
        job = get(cluster, "vcjob", "untouched", ns)
        assert job is not None, untouched.stdout
        meta = job["metadata"]
        marks = [k for k in {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
                 if k.startswith("autowrap.io/")]  # fmt: skip
        templates = [t["template"]["spec"] for t in job["spec"]["tasks"]]
        assert not marks and not meta.get("finalizers"), meta
        assert not any(t.get("schedulingGates") for t in templates), templates
        assert get(cluster, "appwrapper", "untouched", ns) is None

        # Clean up: the namespace goes, nothing of it is left behind.
        clean = shell(cluster, tmp_path, steps["clean"])
        assert clean.returncode == 0, clean.stderr
        eventually(lambda: get(cluster, "namespace", ns, "") is None,
                   what=f"namespace {ns} gone", timeout=180,
                   explain=lambda: diagnosis(cluster, ns))  # fmt: skip
    finally:
        cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")


def test_your_first_job_as_the_readme_walks_through_it(
    real_cluster: RealCluster, tmp_path: Path
) -> None:
    cluster, ns = real_cluster, "first-job"
    with scratch_namespace(cluster, ns):
        # A torchrun Volcano Job; step 1: the queue label asks for wrapping.
        job = training_job("first", namespace=ns, queue=QUEUE, masters=1, workers=2, gpus=2,
                           command=["torchrun", "train.py"])  # fmt: skip
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
        policies = installed_policy_files(cluster, tmp_path / "policies")

        # Step 2: check, and which policy applies.
        for command in (["check", "job.yaml", "-n", ns, "--policy", str(policies)],
                        ["explain", "job.yaml", "-n", ns, "--policy", str(policies)]):  # fmt: skip
            done = subprocess.run([str(AUTOWRAP_CLI), *command], cwd=tmp_path,
                                  capture_output=True, text=True, check=False)  # fmt: skip
            assert done.returncode == 0, f"autowrap {' '.join(command)}: {done.stderr}"
            if command[0] == "explain":
                assert f"Job {ns}/first: wrapped into AppWrapper {ns}/first" in done.stdout, (
                    done.stdout
                )
                assert "policy 'default'" in done.stdout, done.stdout

        # Step 3: every pod the cluster will run, each gated until Kueue admits the job.
        rows = render_pods(job, namespace=ns, labels={}, policies=policies)
        assert sorted(rows) == ["first-master-0", "first-worker-0", "first-worker-1"], rows
        assert all(ADMISSION_GATE in row["schedulingGates"] for row in rows.values()), rows

        # Step 4: submit it as usual; the create succeeds and describe says where it stands.
        applied = cluster.kubectl("apply", "-f", str(tmp_path / "job.yaml"))
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.strip() == "job.batch.volcano.sh/first created", applied.stdout
        pods = eventually(lambda: (p := job_pods(cluster, ns, "first")) and running_and_released(p, 3) and p,
                          what="three pods running, released", timeout=120,
                          explain=lambda: diagnosis(cluster, ns))  # fmt: skip
        described = eventually(
            lambda: (d := cluster.kubectl("describe", "vcjob", "first", "-n", ns).stdout)
            and "is Running" in d and d,
            what="kubectl describe saying the Job runs", timeout=60,
            explain=lambda: diagnosis(cluster, ns),
        )  # fmt: skip
        assert "autowrap.io/status:" in described and "Adopted" in described, described
        problems = rendezvous_problems(cluster, pods, rows)
        assert not problems, "\n".join(problems) + "\n" + diagnosis(cluster, ns)
        assert all(p["spec"]["schedulerName"] == "volcano" for p in pods), [
            p["spec"]["schedulerName"] for p in pods
        ]
        stored = get(cluster, "vcjob", "first", ns)
        assert "Running" in status_of(stored), diagnosis(cluster, ns)


def test_doctor_finds_nothing_wrong_and_its_smoke_run_passes(real_cluster: RealCluster) -> None:
    cluster = real_cluster
    # The nodes renew their Leases as kubelets do: the pods on them (autowrap's Deployment's
    # among them, which doctor counts as endpoints) stay ready past the node grace period.
    leases = listed(cluster, "leases", "kube-node-lease")
    nodes = listed(cluster, "nodes", "")
    assert sorted(lease["metadata"]["name"] for lease in leases) == sorted(
        n["metadata"]["name"] for n in nodes
    ), leases

    checked = doctor(cluster, "-o", "json")
    report = json.loads(checked.stdout)
    failed = [f for f in report["findings"] if f["level"] == "fail"]
    assert checked.returncode == 0 and not failed, json.dumps(report, indent=1) + checked.stderr
    # Every prerequisite is found as on a user's cluster: Kueue's, the AppWrapper controller's
    # and Volcano's Deployments with their versions, their settings, their webhooks.
    prerequisites = [f for f in report["findings"]
                     if f["section"] == "prerequisites" and f["level"] != "ok"]  # fmt: skip
    assert not prerequisites, json.dumps(prerequisites, indent=1)

    ns = "doctor-smoke"
    with scratch_namespace(cluster, ns):
        smoked = doctor(cluster, "--smoke", ns)
        assert smoked.returncode == 0, smoked.stdout + smoked.stderr
        smoke = smoked.stdout.split("smoke:", 1)[-1]
        for check in ("vcjob-running", "vcjob-rank-env", "pod-running", "pod-rank-env"):
            assert re.search(rf"^\s+ok\s+{check}:", smoke, flags=re.M), smoked.stdout
        # What it submitted, it deleted.
        eventually(lambda: not listed(cluster, "appwrappers", ns) and not listed(cluster, "pods", ns),
                   what="doctor's smoke objects deleted", timeout=60,
                   explain=lambda: diagnosis(cluster, ns))  # fmt: skip
