"""What a namespace user can attempt against autowrap, judged by the real kube-apiserver: its
RBAC, its CEL (the ValidatingAdmissionPolicies of deploy/, as installed), its
OwnerReferencesPermissionEnforcement, and the real Kueue, AppWrapper controller and Volcano.

Every finding of the reviews that a namespace user can attempt (adopt-review-0.2.md f01-f16,
review-0.3.md g01-g03, review-0.4.md i01 and i02; the fake cluster's versions are in
tests/adopt/test_trust.py, test_wrapped_job_size.py, test_safety.py and tests/hardening) is
tried here as docs/security.md describes it: refused, with the message the user reads from
kubectl, or held, the pods gated and nothing run beyond what Kueue admitted. The findings
about autowrap's own process (f06 scale, f07 stale caches, f13 a missing CRD, f14 two leaders)
and its token (f15) are not a namespace user's to attempt.

mallory is an ordinary namespace user: the bootstrap ``edit`` role (pods, and AppWrappers,
which Kueue's and the AppWrapper controller's roles aggregate to it) and, as a platform team
grants it, a Role for Volcano Jobs (Volcano's chart aggregates none of its roles to ``edit``).
alice is her neighbour, with the same rights; she acts through impersonation.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testbed.real.cluster import FLAVOR, QUEUE, RealCluster
from tests.real.support import (
    ADMISSION_GATE,
    Watch,
    as_alice,
    condition,
    controller_of,
    delete_everything,
    diagnosis,
    eventually,
    gates,
    get,
    installed_policy,
    job_pods,
    listed,
    local_queue,
    phase,
    refusal,
    running_under_kueue,
    status_of,
    user_namespace,
    workload_of,
)

pytestmark = pytest.mark.real

Obj = dict[str, Any]
MALLORY = "mallory"
ALICE = "alice"
TRUST = "trust"  # OptIn, the default policy; alice and mallory edit there
NO_APPWRAPPERS = "trust-noaw"  # mallory writes pods and Volcano Jobs there, no AppWrappers
ALWAYS = "trust-always"  # wrap: Always; alice edits, mallory writes pods and Volcano Jobs
HELD = "held-queue"  # a LocalQueue on a ClusterQueue Kueue admits nothing from
HELD_CLUSTER_QUEUE = "trust-held"
WRAP_LABEL = "autowrap.io/wrap"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ADOPTION_LABEL = "autowrap.io/adoption"
APPWRAPPER_LABEL = "workload.codeflare.dev/appwrapper"
REQUESTED_BY = "autowrap.io/requested-by"
VOLCANO_API = "batch.volcano.sh/v1alpha1"
GPU = "nvidia.com/gpu"


# -- objects -----------------------------------------------------------------------------------


def volcano_job(
    name: str,
    namespace: str = TRUST,
    *,
    queue: str | None = HELD,
    replicas: int = 1,
    resources: Obj | None = None,
) -> Obj:
    """A one-task Volcano Job asking for one GPU per pod, labelled for ``queue`` (None: no
    label at all)."""
    container = {"name": "trainer", "image": "registry.example.com/ml/torch:2.4",
                 "command": ["torchrun", "train.py"],
                 "resources": copy.deepcopy(resources or {"limits": {GPU: 1}})}  # fmt: skip
    job: Obj = {
        "apiVersion": VOLCANO_API, "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {}},
        "spec": {"schedulerName": "volcano", "tasks": [{
            "name": "worker", "replicas": replicas,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}]},
    }  # fmt: skip
    if queue is not None:
        job["metadata"]["labels"][QUEUE_LABEL] = queue
    return job


def bare_pod(name: str, namespace: str = TRUST, *, labels: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "mallory/miner", "resources": {"limits": {GPU: 8}}}]},
    }  # fmt: skip


def held_cluster_queue() -> Obj:
    """A ClusterQueue whose stopPolicy holds every Workload: what it queues is never
    admitted, so pods of a job queued there wait gated for as long as a test looks."""
    quota = {"cpu": "64", "memory": "256Gi", "pods": "440", GPU: "32"}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": HELD_CLUSTER_QUEUE},
        "spec": {"namespaceSelector": {}, "stopPolicy": "Hold", "resourceGroups": [{
            "coveredResources": list(quota),
            "flavors": [{"name": FLAVOR, "resources": [
                {"name": k, "nominalQuota": v} for k, v in quota.items()]}]}]},
    }  # fmt: skip


def always_policy() -> Obj:
    """What a platform team writes to wrap every Volcano Job and Pod of namespace ALWAYS."""
    return {
        "apiVersion": "autowrap.io/v1alpha1", "kind": "Policy",
        "metadata": {"name": "trust-always"},
        "spec": {"namespaces": {"names": [ALWAYS]}, "wrap": "Always",
                 "enforcement": "Enforce", "queue": {"default": HELD}},
    }  # fmt: skip


# -- what the user does and sees ---------------------------------------------------------------


def as_mallory(
    cluster: RealCluster, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as mallory, with her own credentials (a client certificate)."""
    return cluster.kubectl(*args, as_user=MALLORY, input=input)


def mallory_creates(cluster: RealCluster, obj: Obj) -> subprocess.CompletedProcess[str]:
    return as_mallory(cluster, "create", "-f", "-", input=yaml.safe_dump(obj))


def mallory_patches(
    cluster: RealCluster, kind: str, name: str, patch: Any, *, kind_of_patch: str = "merge",
    namespace: str = TRUST,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return as_mallory(cluster, "patch", kind, name, "-n", namespace, f"--type={kind_of_patch}",
                      "-p", json.dumps(patch))  # fmt: skip


def denied_by(done: Any, policy: str, *, code: str = "Forbidden") -> str:
    """The refusal kubectl printed, which must be ``policy``'s (a ValidatingAdmissionPolicy
    of deploy/, evaluated by kube-apiserver), with its HTTP reason."""
    said = refusal(done)
    assert f"Error from server ({code})" in said, said
    assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request" in said, (
        said
    )
    return said


def is_gated(pod: Obj | None) -> bool:
    return pod is not None and ADMISSION_GATE in gates(pod)


def queued(cluster: RealCluster, name: str, namespace: str = TRUST, pods: int = 1) -> Obj:
    """Job ``name`` adopted and queued: its AppWrapper controls it and its ``pods`` wait,
    gated, for an admission Kueue does not give (the held queue)."""

    def adopted() -> Obj | None:
        job = get(cluster, "vcjob", name, namespace)
        labels = ((job or {}).get("metadata") or {}).get("labels") or {}
        owner = controller_of(job)
        if labels.get(ADOPTION_LABEL) != "adopted" or (owner or {}).get("kind") != "AppWrapper":
            return None
        found = job_pods(cluster, namespace, name)
        if len(found) != pods or not all(is_gated(p) for p in found):
            return None
        assert job is not None
        return job

    return eventually(adopted, what=f"Job {namespace}/{name} adopted, its {pods} pod(s) gated",
                      explain=lambda: diagnosis(cluster, namespace))  # fmt: skip


def nothing_runs(cluster: RealCluster, name: str, namespace: str = TRUST, pods: int = 1) -> None:
    """Job ``name`` still has exactly ``pods`` pods, each gated and none running, and Kueue
    admitted nothing for it."""
    found = job_pods(cluster, namespace, name)
    context = diagnosis(cluster, namespace)
    assert len(found) == pods, context
    assert all(is_gated(p) and phase(p) != "Running" for p in found), context
    job = get(cluster, "vcjob", name, namespace)
    owner = controller_of(job)
    assert owner is not None, context
    appwrapper = get(cluster, "appwrapper", str(owner["name"]), namespace)
    assert appwrapper is not None, context
    assert not condition(workload_of(cluster, namespace, appwrapper), "Admitted"), context


# -- the cluster as a platform team set it up ----------------------------------------------------


@pytest.fixture(scope="module")
def namespaces(real_cluster: RealCluster) -> Iterator[None]:
    cluster = real_cluster
    cluster.admin.apply(held_cluster_queue())
    user_namespace(cluster, TRUST, editors=[ALICE, MALLORY])
    cluster.admin.apply(local_queue(TRUST, HELD, HELD_CLUSTER_QUEUE))
    user_namespace(cluster, NO_APPWRAPPERS, editors=[], pod_writers=[MALLORY])
    user_namespace(cluster, ALWAYS, editors=[ALICE], pod_writers=[MALLORY],
                   labels={WRAP_LABEL: "Always"}, queue=HELD,
                   cluster_queue=HELD_CLUSTER_QUEUE)  # fmt: skip
    with installed_policy(cluster, "trust-always.yaml", always_policy()):
        # autowrap serves the policy once a dry run of an unlabelled pod comes back gated.
        def wrapping() -> bool:
            done = as_alice(cluster, "create", "--dry-run=server", "-o", "json", "-f", "-",
                            input=yaml.safe_dump(bare_pod("probe", ALWAYS)))  # fmt: skip
            return done.returncode == 0 and ADMISSION_GATE in done.stdout

        eventually(wrapping, what=f"autowrap wrapping unlabelled pods in {ALWAYS}")
        try:
            yield
        finally:
            for namespace in (TRUST, NO_APPWRAPPERS, ALWAYS):
                delete_everything(cluster, namespace)
    cluster.kubectl("delete", "clusterqueue", HELD_CLUSTER_QUEUE, "--wait=false")


@pytest.fixture(scope="module")
def victim(real_cluster: RealCluster, namespaces: None) -> Obj:
    """alice's Job ``victim``, adopted and queued (held), its pod gated."""
    created = as_alice(real_cluster, "create", "-f", "-",
                       input=yaml.safe_dump(volcano_job("victim")))  # fmt: skip
    assert created.returncode == 0, created.stderr
    return queued(real_cluster, "victim")


@pytest.fixture(scope="module")
def runner(real_cluster: RealCluster, namespaces: None) -> Obj:
    """alice's Job ``runner``, admitted by Kueue, its pod running."""
    created = as_alice(real_cluster, "create", "-f", "-",
                       input=yaml.safe_dump(volcano_job("runner", queue=QUEUE)))  # fmt: skip
    assert created.returncode == 0, created.stderr
    return running_under_kueue(real_cluster, TRUST, "vcjob", "runner", 1).obj


@pytest.fixture(scope="module")
def mine(real_cluster: RealCluster, namespaces: None) -> Obj:
    """mallory's own Job ``mine``, adopted and queued (held), its pod gated."""
    created = mallory_creates(real_cluster, volcano_job("mine"))
    assert created.returncode == 0, created.stderr
    return queued(real_cluster, "mine")


# -- f02: a user cannot take the gate off her own pods ------------------------------------------


@pytest.mark.parametrize(
    ("kind_of_patch", "patch", "field"),
    [
        ("json", [{"op": "remove", "path": "/spec/schedulingGates/0"}], "spec.schedulingGates"),
        ("merge", {"spec": {"schedulingGates": None}}, "spec.schedulingGates"),
        ("strategic", {"spec": {"schedulingGates": [{"$patch": "replace"}]}},
         "spec.schedulingGates"),
        ("merge", {"metadata": {"labels": {"autowrap.io/released": "true"}}},
         "metadata.labels: autowrap.io/released"),
    ],
    ids=["f02-json-remove", "f02-merge-null", "f02-strategic-replace", "f02-released-label"],
)  # fmt: skip
def test_f02_a_user_cannot_take_the_gate_off_her_own_pod(
    real_cluster: RealCluster, mine: Obj, kind_of_patch: str, patch: Any, field: str
) -> None:
    done = mallory_patches(real_cluster, "pod", "mine-worker-0", patch,
                           kind_of_patch=kind_of_patch)  # fmt: skip
    said = denied_by(done, "autowrap-admission-gate")
    assert f"denied request: {field}" in said, said
    nothing_runs(real_cluster, "mine")
    pod = get(real_cluster, "pod", "mine-worker-0", TRUST)
    assert "autowrap.io/released" not in ((pod or {}).get("metadata") or {}).get("labels", {})


# -- f03, g03: an adopted Job keeps the size and priority Kueue admitted ------------------------


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ([{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 6}],
         "spec.tasks[*].replicas"),
        ([{"op": "replace", "path": "/spec/tasks/0/minAvailable", "value": 6}],
         "spec.tasks[*].minAvailable"),
        ([{"op": "replace", "path": "/spec/minAvailable", "value": 6}], "spec.minAvailable"),
        ([{"op": "add", "path": "/spec/priorityClassName", "value": "system-node-critical"}],
         "spec.priorityClassName"),
    ],
    ids=["f03-replicas", "f03-task-min-available", "f03-min-available", "g03-priority-class"],
)  # fmt: skip
def test_f03_g03_an_adopted_job_keeps_its_size_and_priority(
    real_cluster: RealCluster, mine: Obj, patch: Any, field: str
) -> None:
    done = mallory_patches(real_cluster, "vcjob", "mine", patch, kind_of_patch="json")
    said = denied_by(done, "autowrap-adopted-job-size")
    assert f"denied request: {field}" in said, said
    assert "delete the job and create it again" in said, said
    job = get(real_cluster, "vcjob", "mine", TRUST)
    assert job is not None and job["spec"]["tasks"][0]["replicas"] == 1
    assert "priorityClassName" not in job["spec"]
    nothing_runs(real_cluster, "mine")


# -- g01 (and f05): a pod that claims another user's job is never made by her -------------------


@pytest.mark.parametrize(
    ("claim", "names"),
    [
        ("owner-reference", "a controller ownerReference to a Volcano Job or AppWrapper"),
        ("label", "the label workload.codeflare.dev/appwrapper"),
        ("gate", "the scheduling gate autowrap.io/admission"),
    ],
    ids=["g01-owner-reference", "g01-f05-label", "g01-gate"],
)
def test_g01_a_pod_made_to_claim_another_users_job_is_refused(
    real_cluster: RealCluster, victim: Obj, claim: str, names: str
) -> None:
    """The review's step 2 (and f05's pods labelled for an AppWrapper, which the controller's
    cache once kept whole): each mark of a Job's pod alone is a claim only its controller
    makes."""
    pod = bare_pod(f"aa-{claim}")
    pod["metadata"]["annotations"] = {"autowrap.io/podset": "0"}
    if claim == "owner-reference":
        pod["metadata"]["ownerReferences"] = [{
            "apiVersion": VOLCANO_API, "kind": "Job", "name": "victim",
            "uid": victim["metadata"]["uid"], "controller": True}]  # fmt: skip
    elif claim == "label":
        pod["metadata"]["labels"][APPWRAPPER_LABEL] = "victim"
    else:
        pod["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    said = denied_by(mallory_creates(real_cluster, pod), "autowrap-wrapped-pods")
    assert f"this pod claims a workload autowrap queues under Kueue ({names})" in said, said
    assert "user 'mallory' is not it" in said, said
    assert get(real_cluster, "pod", f"aa-{claim}", TRUST) is None
    nothing_runs(real_cluster, "victim")


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"labels": {APPWRAPPER_LABEL: None}}},
        {"metadata": {"labels": {APPWRAPPER_LABEL: "another"}}},
        {"metadata": {"ownerReferences": None}},
    ],
    ids=["g01-label-removed", "g01-label-changed", "g01-owner-removed"],
)
def test_g01_the_claim_of_a_running_pod_cannot_be_taken_off(
    real_cluster: RealCluster, runner: Obj, patch: Obj
) -> None:
    """The review's step 4: with the claim off her running pod, it would no longer count
    against the admission, and one more pod would be released."""
    [pod] = job_pods(real_cluster, TRUST, "runner")
    done = mallory_patches(real_cluster, "pod", pod["metadata"]["name"], patch)
    said = denied_by(done, "autowrap-wrapped-pods")
    assert "stay as they were created" in said, said
    after = get(real_cluster, "pod", pod["metadata"]["name"], TRUST)
    assert after is not None
    assert after["metadata"]["labels"][APPWRAPPER_LABEL] == "runner"
    assert controller_of(after) == controller_of(pod)


# -- f01, g02: a wrap: Always namespace wraps everything, and no borrowed owner escapes it -------


def test_f01_an_always_namespace_wraps_an_unlabelled_job_and_pod(
    real_cluster: RealCluster, namespaces: None
) -> None:
    job = volcano_job("unlabelled", ALWAYS, queue=None)
    created = as_alice(real_cluster, "create", "-f", "-", input=yaml.safe_dump(job))
    assert created.returncode == 0, created.stderr
    queued(real_cluster, "unlabelled", ALWAYS)
    created = as_alice(real_cluster, "create", "-f", "-",
                       input=yaml.safe_dump(bare_pod("notebook", ALWAYS)))  # fmt: skip
    assert created.returncode == 0, created.stderr

    def adopted_pod() -> Obj | None:
        pod = get(real_cluster, "pod", "notebook", ALWAYS)
        labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
        return pod if labels.get(ADOPTION_LABEL) == "adopted" else None

    pod = eventually(adopted_pod, what="the unlabelled Pod adopted",
                     explain=lambda: diagnosis(real_cluster, ALWAYS))  # fmt: skip
    assert is_gated(pod) and phase(pod) != "Running"
    for name in ("unlabelled", "notebook"):
        appwrapper = get(real_cluster, "appwrapper", name, ALWAYS)
        assert appwrapper is not None, name
        assert appwrapper["metadata"]["labels"][QUEUE_LABEL] == HELD
    nothing_runs(real_cluster, "unlabelled", ALWAYS)


def test_g02_a_borrowed_controller_reference_keeps_no_pod_out_of_an_always_namespace(
    real_cluster: RealCluster, namespaces: None
) -> None:
    """mallory may not create AppWrappers in ALWAYS: her plain pod is refused, and naming
    alice's Job (or a ReplicaSet) as its controller does not get a pod past autowrap."""
    job = volcano_job("holder", ALWAYS, queue=None)
    created = as_alice(real_cluster, "create", "-f", "-", input=yaml.safe_dump(job))
    assert created.returncode == 0, created.stderr
    holder = queued(real_cluster, "holder", ALWAYS)

    said = refusal(mallory_creates(real_cluster, bare_pod("side", ALWAYS)))
    assert "Error from server (Forbidden)" in said, said
    assert "user 'mallory' may not create appwrappers" in said, said

    volcano = {"apiVersion": VOLCANO_API, "kind": "Job", "name": "holder",
               "uid": holder["metadata"]["uid"], "controller": True}  # fmt: skip
    pod = bare_pod("side", ALWAYS)
    pod["metadata"]["ownerReferences"] = [volcano]
    said = denied_by(mallory_creates(real_cluster, pod), "autowrap-wrapped-pods")
    assert "a controller ownerReference to a Volcano Job or AppWrapper" in said, said

    replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f",
                  "uid": "8e0c6a2e-7b1f-4f7e-9d6e-2d6b5f0e7a11", "controller": True}  # fmt: skip
    pod["metadata"]["ownerReferences"] = [replicaset]
    said = refusal(mallory_creates(real_cluster, pod))
    assert 'admission webhook "pods.wrap-always.autowrap.io" denied the request' in said, said
    assert "metadata.ownerReferences" in said and "ReplicaSet web-5d8f" in said, said
    assert "user 'mallory' created it" in said, said
    assert get(real_cluster, "pod", "side", ALWAYS) is None
    nothing_runs(real_cluster, "holder", ALWAYS)


# -- f04: a Pod and a Volcano Job of one name never share an admission --------------------------


def test_f04_a_pod_and_a_job_of_one_name_never_share_an_admission(
    real_cluster: RealCluster, namespaces: None
) -> None:
    pod = bare_pod("twin", labels={WRAP_LABEL: "true", QUEUE_LABEL: QUEUE})
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU: 1}}
    created = mallory_creates(real_cluster, pod)
    assert created.returncode == 0, created.stderr
    ran = running_under_kueue(real_cluster, TRUST, "pod", "twin", 1)

    created = mallory_creates(real_cluster, volcano_job("twin", queue=QUEUE, replicas=4))
    assert created.returncode == 0, created.stderr

    def told() -> str | None:
        status = status_of(get(real_cluster, "vcjob", "twin", TRUST))
        return status if "of an earlier Pod" in status else None

    status = eventually(told, what="the Job told that the name's AppWrapper is the Pod's",
                        explain=lambda: diagnosis(real_cluster, TRUST))  # fmt: skip
    assert f"AppWrapper {TRUST}/twin of an earlier Pod" in status, status
    appwrapper = get(real_cluster, "appwrapper", "twin", TRUST)
    assert appwrapper is not None
    assert appwrapper["metadata"]["uid"] == ran.appwrapper["metadata"]["uid"]
    annotations = appwrapper["metadata"]["annotations"]
    assert annotations["autowrap.io/origin-uid"] == ran.obj["metadata"]["uid"]
    # Volcano makes the Job's pods once its PodGroup is enqueued; each is made gated.
    pods = job_pods(real_cluster, TRUST, "twin")
    running = [p["metadata"]["name"] for p in pods if not is_gated(p) or phase(p) == "Running"]
    assert not running, diagnosis(real_cluster, TRUST)


# -- f08, f09: deleting a queued job leaves nothing to resurrect --------------------------------


@pytest.mark.parametrize("finalizer", ["kept", "removed-first"], ids=["f08", "f09"])
def test_f08_f09_a_deleted_queued_job_leaves_no_appwrapper(
    real_cluster: RealCluster, namespaces: None, finalizer: str
) -> None:
    """f08: the AppWrapper of a job deleted before it ran is removed with it; f09: also when
    its user removed autowrap's finalizer first (the 0.2 README's uninstall advice)."""
    name = f"gone-{finalizer}"
    created = mallory_creates(real_cluster, volcano_job(name))
    assert created.returncode == 0, created.stderr
    queued(real_cluster, name)
    if finalizer == "removed-first":
        done = mallory_patches(real_cluster, "vcjob", name, {"metadata": {"finalizers": None}})
        assert done.returncode == 0, done.stderr
    done = as_mallory(real_cluster, "delete", "vcjob", name, "-n", TRUST, "--wait=false")
    assert done.returncode == 0, done.stderr

    def collected() -> bool:
        return (get(real_cluster, "vcjob", name, TRUST) is None
                and get(real_cluster, "appwrapper", name, TRUST) is None
                and not job_pods(real_cluster, TRUST, name))  # fmt: skip

    eventually(collected, what=f"Job {name}, its pods and its AppWrapper gone", timeout=120.0,
               explain=lambda: diagnosis(real_cluster, TRUST))  # fmt: skip


# -- f10: delete, then apply again, a job that ran ------------------------------------------------


def test_f10_a_job_deleted_and_created_again_after_it_ran_runs_again(
    real_cluster: RealCluster, namespaces: None
) -> None:
    job = volcano_job("again", queue=QUEUE)
    created = mallory_creates(real_cluster, job)
    assert created.returncode == 0, created.stderr
    first = running_under_kueue(real_cluster, TRUST, "vcjob", "again", 1)
    done = as_mallory(real_cluster, "delete", "vcjob", "again", "-n", TRUST, "--wait=false")
    assert done.returncode == 0, done.stderr

    def created_again() -> bool:
        done = mallory_creates(real_cluster, job)
        return done.returncode == 0

    eventually(created_again, what="the Job created again (refused while the old one goes)",
               timeout=120.0, interval=1.0, explain=lambda: diagnosis(real_cluster, TRUST))  # fmt: skip
    second = running_under_kueue(real_cluster, TRUST, "vcjob", "again", 1)
    assert second.obj["metadata"]["uid"] != first.obj["metadata"]["uid"]
    annotations = second.appwrapper["metadata"]["annotations"]
    assert annotations["autowrap.io/origin-uid"] == second.obj["metadata"]["uid"]


# -- f11: an edit of her own AppWrapper releases nothing ----------------------------------------


def test_f11_unsuspending_her_own_appwrapper_runs_nothing_kueue_did_not_admit(
    real_cluster: RealCluster, namespaces: None
) -> None:
    """mallory may update AppWrappers (``edit``): she sets ``spec.suspend: false`` and a
    placement of her own on her queued job's AppWrapper. autowrap releases on Kueue's Workload
    only, so no pod of hers runs; Kueue suspends the AppWrapper again (and the AppWrapper
    controller, stopping it, deletes the component it made running: her Job, which Kueue's
    next admission creates again)."""
    created = mallory_creates(real_cluster, volcano_job("unsuspended"))
    assert created.returncode == 0, created.stderr
    queued(real_cluster, "unsuspended")
    appwrapper = get(real_cluster, "appwrapper", "unsuspended", TRUST)
    assert appwrapper is not None
    workload = workload_of(real_cluster, TRUST, appwrapper)
    assert workload is not None
    with Watch(real_cluster, f"/api/v1/namespaces/{TRUST}/pods",
               selector="volcano.sh/job-name=unsuspended") as pods:  # fmt: skip
        placement = [{"op": "add", "path": "/spec/components/0/podSetInfos",
                      "value": [{"nodeSelector": {"cloud.example/pool": "a100"},
                                 "tolerations": [{"key": GPU, "operator": "Exists"}]}]},
                     {"op": "replace", "path": "/spec/suspend", "value": False}]  # fmt: skip
        done = mallory_patches(real_cluster, "appwrapper", "unsuspended", placement,
                               kind_of_patch="json")  # fmt: skip
        assert done.returncode == 0, done.stderr

        def suspended_again() -> bool:
            found = get(real_cluster, "appwrapper", "unsuspended", TRUST) or {}
            return (found.get("spec") or {}).get("suspend") is True and (
                (found.get("status") or {}).get("phase") == "Suspended"
            )

        eventually(suspended_again, what="Kueue suspending the AppWrapper again",
                   explain=lambda: diagnosis(real_cluster, TRUST))  # fmt: skip
    seen = [e["object"] for e in pods.events if e.get("type") in ("ADDED", "MODIFIED")]
    assert seen, "the watch saw no pod of the job"
    ran = [f"{p['metadata']['name']}: gates {gates(p)}, phase {phase(p)}"
           for p in seen if not is_gated(p) or phase(p) == "Running"]  # fmt: skip
    assert not ran, ran
    workload = workload_of(real_cluster, TRUST, appwrapper)
    assert not condition(workload, "Admitted"), diagnosis(real_cluster, TRUST)


# -- f12: no AppWrapper without the right to create one; no forged markings ---------------------


def test_f12_no_job_is_wrapped_for_a_user_who_may_not_create_appwrappers(
    real_cluster: RealCluster, namespaces: None
) -> None:
    said = refusal(mallory_creates(real_cluster, volcano_job("noaw", NO_APPWRAPPERS)))
    assert "Error from server (Forbidden)" in said, said
    assert "user 'mallory' may not create appwrappers" in said, said
    assert get(real_cluster, "vcjob", "noaw", NO_APPWRAPPERS) is None
    assert listed(real_cluster, "appwrappers", NO_APPWRAPPERS) == []


def _forged_at_create(name: str, *, requested_by: str | None, pending: bool) -> Obj:
    """An unlabelled Job (no autowrap webhook sees it in an OptIn namespace) that carries what
    autowrap's admission writes on one it prepares, without the gate."""
    job = volcano_job(name, queue=None)
    if requested_by is not None:
        job["metadata"]["annotations"] = {REQUESTED_BY: requested_by}
    if pending:
        job["metadata"]["labels"][ADOPTION_LABEL] = "pending"
        job["metadata"]["labels"][APPWRAPPER_LABEL] = name
    return job


@pytest.mark.parametrize(
    ("forged", "field"),
    [
        (_forged_at_create("forged-requester", requested_by=ALICE, pending=False),
         "metadata.annotations[autowrap.io/requested-by]"),
        (_forged_at_create("forged-pending", requested_by=MALLORY, pending=True),
         "metadata.labels[autowrap.io/adoption]"),
    ],
    ids=["f12-requested-by-someone-else", "f12-pending-without-the-gate"],
)  # fmt: skip
def test_f12_an_object_that_skipped_autowrap_cannot_pose_as_prepared(
    real_cluster: RealCluster, namespaces: None, forged: Obj, field: str
) -> None:
    said = denied_by(mallory_creates(real_cluster, forged), "autowrap-requested-by")
    assert f"denied request: {field}" in said, said
    assert get(real_cluster, "vcjob", forged["metadata"]["name"], TRUST) is None
    assert get(real_cluster, "appwrapper", forged["metadata"]["name"], TRUST) is None


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"metadata": {"annotations": {REQUESTED_BY: ALICE}}},
         "metadata.annotations[autowrap.io/requested-by]"),
        ({"metadata": {"labels": {ADOPTION_LABEL: None}}}, "metadata.labels[autowrap.io/adoption]"),
        ({"metadata": {"labels": {ADOPTION_LABEL: "pending"}}},
         "metadata.labels[autowrap.io/adoption]"),
    ],
    ids=["f12-requester-changed", "f12-adoption-removed", "f12-adoption-changed"],
)  # fmt: skip
def test_f12_what_admission_wrote_stays_true(
    real_cluster: RealCluster, mine: Obj, patch: Obj, field: str
) -> None:
    said = denied_by(mallory_patches(real_cluster, "vcjob", "mine", patch),
                     "autowrap-requested-by")  # fmt: skip
    assert f"denied request: {field}" in said, said
    job = get(real_cluster, "vcjob", "mine", TRUST)
    assert job is not None
    assert job["metadata"]["annotations"][REQUESTED_BY] == MALLORY
    assert job["metadata"]["labels"][ADOPTION_LABEL] == "adopted"
    nothing_runs(real_cluster, "mine")


# -- f16: a re-apply that drops a field is refused, never silently kept --------------------------


def test_f16_a_reapply_that_drops_a_field_of_her_own_is_refused(
    real_cluster: RealCluster, namespaces: None
) -> None:
    job = volcano_job("reapplied")
    job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] = {"disk": "ssd"}
    done = as_mallory(real_cluster, "apply", "-f", "-", input=yaml.safe_dump(job))
    assert done.returncode == 0, done.stderr
    queued(real_cluster, "reapplied")
    del job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"]
    said = refusal(as_mallory(real_cluster, "apply", "-f", "-", input=yaml.safe_dump(job)))
    assert 'admission webhook "validatejob.volcano.sh" denied the request' in said, said
    stored = get(real_cluster, "vcjob", "reapplied", TRUST)
    assert stored is not None
    assert stored["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}


def test_f16_reapplying_the_unchanged_manifest_is_accepted(
    real_cluster: RealCluster, namespaces: None
) -> None:
    """The other half of f16: what admission and Volcano added is kept, so the same manifest
    applied again (a CI job, a GitOps sync) changes nothing and is accepted, though Volcano's
    webhook stored its tasks as Go writes them (``nvidia.com/gpu: 1`` as ``"1"``)."""
    job = volcano_job("unchanged")
    done = as_mallory(real_cluster, "apply", "-f", "-", input=yaml.safe_dump(job))
    assert done.returncode == 0, done.stderr
    queued(real_cluster, "unchanged")
    again = as_mallory(real_cluster, "apply", "-f", "-", input=yaml.safe_dump(job))
    assert again.returncode == 0, again.stderr
    nothing_runs(real_cluster, "unchanged")


# -- i01: a Job its AppWrapper created keeps its marks and its size ------------------------------


@pytest.fixture(scope="module")
def appwrapped(real_cluster: RealCluster, namespaces: None) -> Obj:
    """mallory's own AppWrapper ``wrapped`` around a Volcano Job, admitted by Kueue: the
    AppWrapper controller creates the Job (labelled for it, its controller), as it creates
    redirect mode's Job and an adopted Job again after a preemption or a reset."""
    component = volcano_job("wrapped", queue=None)
    del component["metadata"]["namespace"]
    appwrapper = {
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": "wrapped", "namespace": TRUST, "labels": {QUEUE_LABEL: QUEUE}},
        "spec": {"components": [{"template": component}]},
    }  # fmt: skip
    created = mallory_creates(real_cluster, appwrapper)
    assert created.returncode == 0, created.stderr
    found = running_under_kueue(real_cluster, TRUST, "vcjob", "wrapped", 1, adopted=False)
    assert found.obj["metadata"]["labels"][APPWRAPPER_LABEL] == "wrapped"
    return found.obj


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"labels": {APPWRAPPER_LABEL: None}}},
        {"metadata": {"labels": {APPWRAPPER_LABEL: "another"}}},
        {"metadata": {"ownerReferences": None}},
    ],
    ids=["i01-label-removed", "i01-label-changed", "i01-owner-removed"],
)
def test_i01_the_marks_of_a_job_its_appwrapper_created_stay(
    real_cluster: RealCluster, appwrapped: Obj, patch: Obj
) -> None:
    said = denied_by(mallory_patches(real_cluster, "vcjob", "wrapped", patch),
                     "autowrap-adopted-job-size")  # fmt: skip
    assert "denied request: metadata: this Volcano Job stands for an AppWrapper" in said, said
    job = get(real_cluster, "vcjob", "wrapped", TRUST)
    assert job is not None and job["metadata"]["labels"][APPWRAPPER_LABEL] == "wrapped"
    assert controller_of(job) == controller_of(appwrapped)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ([{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 4}],
         "spec.tasks[*].replicas"),
        ([{"op": "replace", "path": "/spec/minAvailable", "value": 4}], "spec.minAvailable"),
        ([{"op": "add", "path": "/spec/priorityClassName", "value": "system-node-critical"}],
         "spec.priorityClassName"),
    ],
    ids=["i01-replicas", "i01-min-available", "i01-priority-class"],
)  # fmt: skip
def test_i01_a_job_its_appwrapper_created_keeps_its_size_with_autowrap_down(
    real_cluster: RealCluster, appwrapped: Obj, patch: Any, field: str
) -> None:
    real_cluster.stop_autowrap()
    try:
        done = mallory_patches(real_cluster, "vcjob", "wrapped", patch, kind_of_patch="json")
    finally:
        real_cluster.start_autowrap()
    said = denied_by(done, "autowrap-adopted-job-size")
    assert f"denied request: {field}" in said, said
    pods = job_pods(real_cluster, TRUST, "wrapped")
    assert [p["metadata"]["name"] for p in pods] == ["wrapped-worker-0"], diagnosis(
        real_cluster, TRUST
    )


# -- i02: every way a user writes a GPU job's resources runs once admitted -----------------------


@pytest.mark.parametrize(
    "resources",
    [
        {"limits": {GPU: 1}},
        {"requests": {"cpu": "0.5", "memory": "1024Mi"},
         "limits": {"cpu": "0.5", "memory": "1024Mi", GPU: 1}},
        {"requests": {"cpu": "1000m"}, "limits": {GPU: "1", "cpu": 2}},
        # kube-apiserver stores cpu "0.0001" as "1m" on the pod, "100u" on the Job's template.
        {"limits": {GPU: 1, "cpu": "0.0001"}},
    ],
    ids=["i02-limits-only", "i02-fractions", "i02-millis-and-integers", "i02-sub-milli-cpu"],
)  # fmt: skip
def test_i02_a_job_runs_once_admitted_however_its_resources_are_written(
    real_cluster: RealCluster, namespaces: None, request: pytest.FixtureRequest, resources: Obj
) -> None:
    name = f"spelt-{request.node.callspec.id.removeprefix('i02-')}"
    created = mallory_creates(real_cluster, volcano_job(name, queue=QUEUE, resources=resources))
    assert created.returncode == 0, created.stderr
    try:
        found = running_under_kueue(real_cluster, TRUST, "vcjob", name, 1, timeout=60.0)
        assert "Running" in status_of(found.obj), status_of(found.obj)
    finally:
        as_mallory(real_cluster, "delete", "vcjob", name, "-n", TRUST, "--wait=false")
