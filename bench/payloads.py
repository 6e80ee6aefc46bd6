"""The AdmissionReviews the bench sends, built in code so every run uses the same shapes.

Each payload is what kube-apiserver would POST for one realistic submission. A payload is a
factory rather than a fixed body because the wrap payload must name a fresh Volcano Job per
request (each request is then a real AppWrapper create, never a cached repeat), and every
request carries its own uid, as the apiserver's do.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.policies import ADOPT_NAMESPACE, REDIRECT_NAMESPACE
from webhook.core import adoption, engine
from webhook.core.policy import PolicySet
from webhook.model import names

# Every payload runs in the redirect namespace unless it says otherwise (the adopt payloads).
NAMESPACE = REDIRECT_NAMESPACE
QUEUE = "user-queue"
VOLCANO_API = "batch.volcano.sh/v1alpha1"
IMAGE = "registry.example.com/ml/torch:2.4"
LARGE_TARGET_BYTES = 1_000_000
# Same length as the uids ``Payload.body`` makes, so the spliced body keeps its size.
_UID_SLOT = "bench-@@@@@@@@@@"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Expect:
    """What a correct answer from autowrap looks like; the floor always answers allowed."""

    allowed: bool
    patched: bool = False
    code: int | None = None
    message_starts: str = ""
    # A scheduling gate the JSONPatch must add, to ``gated`` pod templates (adopt mode's
    # preparation: every task template of a Volcano Job, a bare Pod's own spec).
    gate: str = ""
    gated: int = 0


@dataclass
class Payload:
    """One scenario: a path, an object factory, and the answer autowrap must give."""

    name: str
    path: str
    description: str
    expect: Expect
    make_object: Callable[[int], Obj]
    kind: tuple[str, str, str]
    resource: tuple[str, str, str]
    needs_cluster: bool = False
    # True when the object differs per request (the wrap payload names a fresh job each time).
    varies: bool = False
    namespace: str = NAMESPACE
    _counter: Iterator[int] = field(default_factory=itertools.count)
    _template: bytes = b""

    def body(self, seq: int | None = None) -> tuple[str, bytes]:
        """A fresh (uid, serialized AdmissionReview) pair.

        A constant object is serialized once and only its uid is spliced in per request: the
        load generator shares the machine with the servers, and re-encoding 1 MiB per request
        would take CPU from them.
        """
        n = next(self._counter) if seq is None else seq
        uid = f"bench-{n:010d}"
        if self.varies:
            obj = self.make_object(n)
            return uid, orjson.dumps(review(uid, obj, self.kind, self.resource, self.namespace))
        if not self._template:
            obj = self.make_object(0)
            self._template = orjson.dumps(
                review(_UID_SLOT, obj, self.kind, self.resource, self.namespace)
            )
        return uid, self._template.replace(_UID_SLOT.encode(), uid.encode(), 1)

    def size(self) -> int:
        return len(self.body(0)[1])


def review(
    uid: str,
    obj: Obj,
    kind: tuple[str, str, str],
    resource: tuple[str, str, str],
    namespace: str = NAMESPACE,
) -> Obj:
    """An AdmissionReview as kube-apiserver sends it for a CREATE by a human user."""
    group, version, kind_name = kind
    rgroup, rversion, rname = resource
    meta = obj.get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind_name},
            "resource": {"group": rgroup, "version": rversion, "resource": rname},
            "requestKind": {"group": group, "version": version, "kind": kind_name},
            "requestResource": {"group": rgroup, "version": rversion, "resource": rname},
            "name": meta.get("name", ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {
                "username": "alice@example.com",
                "uid": "5f0c7a3e-0000-4000-8000-000000000001",
                "groups": ["ml-researchers", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": ["JTI=bench"]},
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# --- objects -----------------------------------------------------------------------------------


def _container(name: str, gpus: int, env_count: int, pad: str = "") -> Obj:
    env: list[Obj] = [
        {"name": f"TRAIN_OPT_{i:05d}", "value": f"value-{i}{pad}"} for i in range(env_count)
    ]
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    c: Obj = {
        "name": name,
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun"],
        "args": ["--standalone=false", "train.py", "--config=/etc/train/config.yaml"],
        "env": env,
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    if gpus:
        c["resources"] = {
            "limits": {"nvidia.com/gpu": gpus, "cpu": "32", "memory": "256Gi"},
            "requests": {"nvidia.com/gpu": gpus, "cpu": "32", "memory": "256Gi"},
        }
    return c


def _task(name: str, replicas: int, env_count: int = 6, pad: str = "") -> Obj:
    return {
        "name": name,
        "replicas": replicas,
        "minAvailable": replicas,
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/part-of": "llm-train"}},
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [_container("trainer", 8, env_count, pad)],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                ],
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
    }


def vcjob(
    name: str, tasks: list[Obj], labels: dict[str, str] | None = None, namespace: str = NAMESPACE
) -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": VOLCANO_API,
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": sum(t["replicas"] for t in tasks),
            "queue": "default",
            "tasks": tasks,
        },
    }


def appwrapper(name: str, job: Obj) -> Obj:
    """A user-written AppWrapper: a queue label and one vcjob component, no podSets."""
    inner = copy.deepcopy(job)
    inner["metadata"].pop("namespace", None)
    return {
        "apiVersion": names.APPWRAPPER_API_VERSION,
        "kind": "AppWrapper",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {names.QUEUE_LABEL: QUEUE},
        },
        "spec": {"components": [{"template": inner}]},
    }


def _padded_tasks(count: int, target: int, name: str) -> list[Obj]:
    """``count`` tasks whose env lists make the whole job close to ``target`` bytes."""
    one = len(orjson.dumps({"name": "TRAIN_OPT_00000", "value": "value-0"})) + 1
    base = len(orjson.dumps(vcjob(name, [_task(f"t{i}", 2) for i in range(count)])))
    per_task = max((target - base) // (count * one), 0)
    return [_task(f"t{i}", 2, env_count=per_task) for i in range(count)]


def pod(seq: int) -> Obj:
    """A pod created by Volcano for task index 2 of a wrapped job's second group."""
    job = "llm-train"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-worker-2",
            "namespace": NAMESPACE,
            "labels": {
                names.NODE_RANK_OFFSET_LABEL: "1",
                "volcano.sh/job-name": job,
                "volcano.sh/task-spec": "worker",
                names.APPWRAPPER_LABEL: job,
            },
            "annotations": {
                names.VOLCANO_TASK_INDEX: "2",
                names.POD_INDEX_KEY_ANNOTATION: names.VOLCANO_TASK_INDEX,
                "scheduling.k8s.io/group-name": f"{job}-podgroup",
            },
            "ownerReferences": [
                {
                    "apiVersion": VOLCANO_API,
                    "kind": "Job",
                    "name": job,
                    "uid": "0b6d2c1e-0000-4000-8000-00000000beef",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "hostname": f"{job}-worker-2",
            "subdomain": job,
            "schedulerName": "volcano",
            "restartPolicy": "OnFailure",
            "containers": [_container("trainer", 8, 6)],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            ],
        },
    }


def bare_pod(name: str, namespace: str) -> Obj:
    """A Pod a user creates directly (no owner), opting in to wrapping with a queue."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [_container("trainer", 8, 6)],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            ],
        },
    }


def small_job(name: str, namespace: str = NAMESPACE, labels: dict[str, str] | None = None) -> Obj:
    """The 2-task job (1 master, 3 workers) most payloads and the controller bench use."""
    return vcjob(name, [_task("master", 1), _task("worker", 3)], labels, namespace)


ADOPT_USER = "alice@example.com"


def adopted_jobs(prefix: str, count: int, policy_set: PolicySet, digits: int = 4) -> list[Obj]:
    """``small_job``s in the adopt namespace as adopt-mode admission stores them (SPEC section
    11): the engine's outcome for the user's object, then ``adoption.prepare``."""
    opt_in = {names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE}
    context = engine.Context(policies=policy_set, namespace=ADOPT_NAMESPACE, user=ADOPT_USER)
    jobs = []
    for i in range(count):
        name = f"{prefix}-{i:0{digits}d}"
        job = small_job(name, ADOPT_NAMESPACE, labels=opt_in)
        outcome = engine.admit(copy.deepcopy(job), context)
        if outcome.action is not engine.Action.WRAP:
            raise RuntimeError(f"{name} is not wrapped: {outcome.reason}")
        jobs.append(adoption.prepare(job, outcome, user=ADOPT_USER))
    return jobs


# --- the payload set ---------------------------------------------------------------------------

VCJOB_KIND = ("batch.volcano.sh", "v1alpha1", "Job")
VCJOB_RES = ("batch.volcano.sh", "v1alpha1", "jobs")
AW_KIND = (names.APPWRAPPER_GROUP, names.APPWRAPPER_VERSION, "AppWrapper")
AW_RES = (names.APPWRAPPER_GROUP, names.APPWRAPPER_VERSION, names.APPWRAPPER_PLURAL)
POD_KIND = ("", "v1", "Pod")
POD_RES = ("", "v1", "pods")
WRAPPED_PREFIX = f"Job {REDIRECT_NAMESPACE}/"


def build() -> list[Payload]:
    """Every payload, small ones first; large objects are built once and shared."""
    plain_job = small_job("llm-train")
    large_aw_job = vcjob("llm-train-large", _padded_tasks(8, LARGE_TARGET_BYTES, "llm-train-large"))
    large_aw = appwrapper("llm-train-large", large_aw_job)
    large_reject = vcjob(
        "llm-train-16",
        _padded_tasks(16, LARGE_TARGET_BYTES, "llm-train-16"),
        labels={names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE},
    )
    rejected = vcjob(
        "llm-train-bad",
        [_task("master", 1), _task("worker", 3)],
        labels={names.WRAP_LABEL: "true", names.QUEUE_LABEL: "Not_A_Queue"},
    )
    small_aw = appwrapper("llm-train", plain_job)

    opt_in = {names.WRAP_LABEL: "true", names.QUEUE_LABEL: QUEUE}

    def wrap_candidate(seq: int) -> Obj:
        return small_job(f"llm-train-{seq:07d}", labels=opt_in)

    adopt_job = small_job("llm-train", ADOPT_NAMESPACE, labels=opt_in)
    adopt_pod = bare_pod("llm-infer", ADOPT_NAMESPACE)
    gate = names.ADMISSION_GATE
    job_prepared = Expect(
        allowed=True, patched=True, gate=gate, gated=len(adopt_job["spec"]["tasks"])
    )
    pod_prepared = Expect(allowed=True, patched=True, gate=gate, gated=1)

    return [
        Payload(
            "aw-complete", names.MUTATE_PATH,
            "user AppWrapper holding a 2-task vcjob without podSets; completed with a JSONPatch",
            Expect(allowed=True, patched=True), lambda _: small_aw, AW_KIND, AW_RES,
        ),
        Payload(
            "wrap-rejected", names.VALIDATE_PATH,
            "vcjob opting in to wrapping with an invalid queue name; rejected (422)",
            Expect(allowed=False, code=422), lambda _: rejected, VCJOB_KIND, VCJOB_RES,
        ),
        Payload(
            "wrap", names.VALIDATE_PATH,
            "vcjob opting in to wrapping: SubjectAccessReview, LocalQueue lookup and an "
            "AppWrapper create against the fake Kubernetes API; denied with the redirect (403)",
            Expect(allowed=False, code=403, message_starts=WRAPPED_PREFIX),
            wrap_candidate, VCJOB_KIND, VCJOB_RES, needs_cluster=True, varies=True,
        ),
        Payload(
            "adopt-vcjob", names.MUTATE_PATH,
            "vcjob opting in to wrapping under an adopt-mode policy: prepared for the controller "
            "(plumbing, the admission gate on every task template, adoption label, finalizer)",
            job_prepared, lambda _: adopt_job, VCJOB_KIND, VCJOB_RES, needs_cluster=True,
            namespace=ADOPT_NAMESPACE,
        ),
        Payload(
            "adopt-pod", names.MUTATE_PATH,
            "bare Pod opting in to wrapping under an adopt-mode policy: prepared for the "
            "controller (the admission gate on the Pod, adoption label, finalizer)",
            pod_prepared, lambda _: adopt_pod, POD_KIND, POD_RES, needs_cluster=True,
            namespace=ADOPT_NAMESPACE,
        ),
        Payload(
            "pod-rank", names.MUTATE_PATH,
            "pod of a wrapped job's second group (offset 1, task-index 2); gets its node rank",
            Expect(allowed=True, patched=True), pod, POD_KIND, POD_RES,
        ),
        Payload(
            "vcjob-16-large", names.VALIDATE_PATH,
            "16-task vcjob of about 1 MiB opting in to wrapping; rejected (more than 8 podSets)",
            Expect(allowed=False, code=422), lambda _: large_reject, VCJOB_KIND, VCJOB_RES,
        ),
        Payload(
            "aw-complete-large", names.MUTATE_PATH,
            "user AppWrapper holding an 8-task vcjob of about 1 MiB; completed with a JSONPatch",
            Expect(allowed=True, patched=True), lambda _: large_aw, AW_KIND, AW_RES,
        ),
    ]  # fmt: skip
