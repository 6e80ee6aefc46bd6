"""An install that lacks a permission the cluster demands is visible (issue 0.5, item 4). This
cluster runs kube-apiserver with OwnerReferencesPermissionEnforcement, and autowrap was installed
with the component docs/install.md asks for there; with that component's binding taken away,
`autowrap doctor` fails its `owner-references` check, and a job submitted meanwhile says on its
status, and in an Event, what autowrap cannot do and which documented step fixes it. With the
binding back, the job is adopted and runs."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from testbed.jobs import training_job
from testbed.real.cluster import RealCluster
from tests.real.support import (
    AUTOWRAP_CLI,
    apply_manifest,
    diagnosis,
    eventually,
    get,
    job_pods,
    kubectl_json,
    running_and_released,
    scratch_namespace,
    status_of,
)

pytestmark = pytest.mark.real

BINDING = "autowrap-owner-references"
NAMESPACE = "owner-refs"


def _doctor(cluster: RealCluster) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [str(AUTOWRAP_CLI), "doctor", "--kubeconfig", str(cluster.admin_kubeconfig),
         "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout or "{}")


def _owner_references(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report.get("findings", []) if f.get("check") == "owner-references"]


def test_a_missing_owner_reference_grant_is_found_by_doctor_and_said_on_the_job(
    real_cluster: RealCluster,
) -> None:
    binding = kubectl_json(real_cluster, "get", "clusterrolebinding", BINDING)
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        binding["metadata"].pop(key, None)
    code, report = _doctor(real_cluster)
    assert [f["level"] for f in _owner_references(report)] == ["ok"], _owner_references(report)

    removed = real_cluster.kubectl("delete", "clusterrolebinding", BINDING)
    assert removed.returncode == 0, removed.stderr
    try:
        code, report = _doctor(real_cluster)
        found = _owner_references(report)
        assert [f["level"] for f in found] == ["fail"], found
        assert "enforces OwnerReferencesPermissionEnforcement" in found[0]["found"]
        assert code != 0

        with scratch_namespace(real_cluster, NAMESPACE) as namespace:
            job = training_job("refs", namespace=namespace, queue="team-queue", masters=1,
                               workers=0, gpus=1, command=["torchrun", "train.py"])  # fmt: skip
            job["spec"]["tasks"] = job["spec"]["tasks"][:1]
            created = apply_manifest(real_cluster, job, "create")
            assert created.returncode == 0, created.stderr

            said = eventually(
                lambda: (
                    "owner" in status_of(get(real_cluster, "vcjob", "refs", namespace))
                    and status_of(get(real_cluster, "vcjob", "refs", namespace))
                ),
                what="the job's status naming the refused owner reference",
                explain=lambda: diagnosis(real_cluster, namespace),
            )
            assert "cannot set an ownerRef" in said, said
            assert "deploy/components/owner-references-enforcement" in said, said
            events = real_cluster.kubectl("get", "events", "-n", namespace,
                                          "--field-selector", "reason=AdoptionFailed")  # fmt: skip
            assert "owner" in events.stdout, events.stdout
            aw = get(real_cluster, "appwrapper", "refs", namespace)
            assert aw is not None and aw["spec"].get("suspend") is True, aw
            assert job_pods(real_cluster, namespace, "refs") == [] or all(
                "autowrap.io/admission"
                in [g["name"] for g in p["spec"].get("schedulingGates") or []]
                for p in job_pods(real_cluster, namespace, "refs")
            )

            restored = apply_manifest(real_cluster, binding, "create")
            assert restored.returncode == 0, restored.stderr
            eventually(
                lambda: running_and_released(job_pods(real_cluster, namespace, "refs"), 1),
                what="the job adopted and running once the grant is back",
                timeout=120.0,
                explain=lambda: diagnosis(real_cluster, namespace),
            )
    finally:
        present = real_cluster.kubectl("get", "clusterrolebinding", BINDING)
        if present.returncode != 0:
            apply_manifest(real_cluster, binding, "create")
