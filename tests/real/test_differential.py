"""The fake cluster answers as the real one: the same requests, sent to the fake cluster of
the adopt tier (testbed.cluster's FakeCluster behind the ApiserverEmulator, with autowrap's
webhooks and ValidatingAdmissionPolicies, autowrap itself and the simulated Kueue, AppWrapper
controller, Volcano and kubelet; tests/adopt/cluster.py) and to the real kube-apiserver with
the real controllers, get the same answers where autowrap reads them.

Both are reached over HTTPS as their administrator, acting as the user a request names
(impersonation, as ``kubectl --as`` does), so the requests are byte for byte the same. The
fake is given the real cluster's RBAC for the namespace (the aggregated ``edit`` role as the
real one stores it, and the Roles and RoleBindings), so that it judges with the same rules.

Answers are compared normalised: uids, resourceVersions, timestamps, managedFields and the
hash in a Workload's name never agree between two clusters, and where one cluster writes
more than autowrap reads (defaults of admission plugins autowrap never looks at), the view
compared says what it keeps and why. Everything else that differs is a fake that answers
otherwise than kube-apiserver, and is fixed there (testbed/cluster, testbed/apiserver.py,
testbed/admission_policy.py, testbed/sim).
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from testbed.admission_policy import PolicySet
from testbed.cluster.rbac import Rbac
from testbed.cluster.resources import LOCALQUEUES
from testbed.real.cluster import QUEUE, RealCluster
from tests.real.support import (
    AUTHENTICATED,
    RENDEZVOUS,
    Answer,
    Apiserver,
    FakeSide,
    delete_everything,
    eventually,
    real_apiserver,
    running_under_kueue,
    status_of,
    user_namespace,
)

pytestmark = pytest.mark.real

Obj = dict[str, Any]
T = TypeVar("T")
NS = "differential"
MALLORY, ALICE, BOB = "mallory", "alice", "bob"
AUTOWRAP = "system:serviceaccount:autowrap-system:autowrap"
VOLCANO = "system:serviceaccount:volcano-system:volcano-controllers"
GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
ADMIN = None  # the administrator itself, not impersonating anyone
USERS = {MALLORY: [AUTHENTICATED], ALICE: [AUTHENTICATED], BOB: [AUTHENTICATED]}
# The fake authorizes RBAC for the namespace users and autowrap; the controllers' identities
# act unchecked there. The cases acting as a controller use one whose real RBAC allows the
# write (Volcano's creates pods, the garbage collector patches anything), so that what is
# compared is the admission chain.
JSON = "application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PODS = f"/api/v1/namespaces/{NS}/pods"
SERVICES = f"/api/v1/namespaces/{NS}/services"
VCJOBS = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NS}/jobs"
APPWRAPPERS = f"/apis/workload.codeflare.dev/v1beta2/namespaces/{NS}/appwrappers"
WORKLOADS = f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NS}/workloads"
GATE = "autowrap.io/admission"
APPWRAPPER_LABEL = "workload.codeflare.dev/appwrapper"
VOLCANO_API = "batch.volcano.sh/v1alpha1"


# -- normalising -------------------------------------------------------------------------------

UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
# Kueue names a Workload <kind>-<name>-<5 hex digits of a hash of the job's uid>.
WORKLOAD_NAME = re.compile(r"\b(appwrapper-[a-z0-9-]+)-[0-9a-f]{5}\b")
# A generated name's 5 random characters (names.SimpleNameGenerator).
GENERATED = re.compile(r"\b(gen-)[a-z0-9]{5}\b")
# A resourceVersion quoted in a message (a precondition's refusal).
RESOURCE_VERSION = re.compile(r"(ResourceVersion in record )\(\d+\)")
NEVER_ALIKE = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink",
               "lastTransitionTime", "lastProbeTime", "lastUpdateTime")  # fmt: skip


def normalised(value: Any) -> Any:
    """``value`` without what two clusters never agree on."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in NEVER_ALIKE}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str):
        text = UID.sub("<uid>", value)
        text = TIME.sub("<time>", text)
        text = WORKLOAD_NAME.sub(r"\1-<hash>", text)
        text = RESOURCE_VERSION.sub(r"\1(<version>)", text)
        return GENERATED.sub(r"\1<random>", text)
    return value


def answered(answer: Answer, view: Callable[[Any], Any] | None = None) -> Obj:
    """An answer as compared: its code, its message, and its body through ``view`` (a 2xx
    body; a refusal's body is its Status, whose message is compared)."""
    said: Obj = {"code": answer.status, "message": normalised(answer.message)}
    if 200 <= answer.status < 300 and view is not None:
        said["body"] = normalised(view(answer.body))
    elif answer.status >= 300 and isinstance(answer.body, dict):
        said["reason"] = answer.body.get("reason")
    return said


def same(real: Any, fake: Any, what: str) -> None:
    """``real`` and ``fake`` alike; else a diff of the two, fake against real."""
    if real == fake:
        return
    left = json.dumps(real, indent=1, sort_keys=True).splitlines()
    right = json.dumps(fake, indent=1, sort_keys=True).splitlines()
    diff = "\n".join(difflib.unified_diff(left, right, "real", "fake", n=3, lineterm=""))
    raise AssertionError(f"{what}: the fake answers otherwise than kube-apiserver:\n{diff}")


# -- views: what autowrap reads ----------------------------------------------------------------

# What kube-apiserver's admission plugins add to every pod and autowrap never reads:
# DefaultTolerationSeconds' two tolerations (autowrap keeps only Kueue's own, podmeta.py), and
# the node's topology labels kube-apiserver copies onto a pod when it is bound.
DEFAULT_TOLERATIONS = [
    {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300} for t in ("not-ready", "unreachable")
]  # fmt: skip
TOPOLOGY_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region")
META = ("name", "namespace", "generateName", "labels", "annotations", "ownerReferences",
        "finalizers", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")  # fmt: skip


def meta_view(obj: Mapping[str, Any]) -> Obj:
    metadata = obj.get("metadata") or {}
    kept = {k: copy.deepcopy(metadata[k]) for k in META if k in metadata}
    if isinstance(kept.get("labels"), dict):
        kept["labels"] = {k: v for k, v in kept["labels"].items() if k not in TOPOLOGY_LABELS}
        if not kept["labels"]:
            del kept["labels"]
    return kept


def container_view(container: Mapping[str, Any]) -> Obj:
    """A container as release.made_by_controller and the rendezvous read it; an absent
    ``resources`` is how the fake stores what kube-apiserver writes as ``{}`` (a Go struct),
    which autowrap reads alike."""
    kept = {k: copy.deepcopy(container[k]) for k in ("name", "image", "command") if k in container}
    kept["resources"] = copy.deepcopy(container.get("resources") or {})
    env = [e for e in container.get("env") or [] if e.get("name") in RENDEZVOUS]
    if env:
        kept["env"] = env
    return kept


def pod_view(pod: Mapping[str, Any]) -> Obj:
    """What autowrap reads of a pod (webhook/core/podmeta.py: its metadata, gates, priority
    class, Kueue's placement, its containers' names, images and resources; the rendezvous
    env it wrote). Its phase is the kubelet's, in its own time: compared only where both
    clusters have settled."""
    spec = pod.get("spec") or {}
    kept: Obj = {k: copy.deepcopy(spec[k]) for k in
                 ("schedulingGates", "priorityClassName", "nodeSelector", "hostname", "subdomain")
                 if k in spec}  # fmt: skip
    tolerations = [t for t in spec.get("tolerations") or [] if t not in DEFAULT_TOLERATIONS]
    if tolerations:
        kept["tolerations"] = tolerations
    for part in ("initContainers", "containers"):
        if part in spec:
            kept[part] = [container_view(c) for c in spec[part]]
    return {"metadata": meta_view(pod), "spec": kept}


def object_view(obj: Any) -> Any:
    """A stored object as compared: a pod's view, else its metadata and spec (a Volcano Job's
    ``status`` is Volcano's own bookkeeping, which autowrap does not read)."""
    if not isinstance(obj, dict):
        return obj
    if obj.get("kind") == "Pod":
        return pod_view(obj)
    spec = obj.get("spec")
    if obj.get("kind") == "Service" and isinstance(spec, dict):
        # What autowrap's components write (a headless Service for the rendezvous); the rest
        # is the Service strategy's defaulting (IP families, policies), which it never reads.
        spec = {k: v for k, v in spec.items()
                if k in ("clusterIP", "selector", "ports", "publishNotReadyAddresses")}  # fmt: skip
    return {"kind": obj.get("kind"), "metadata": meta_view(obj), "spec": spec}


def appwrapper_view(appwrapper: Mapping[str, Any]) -> Obj:
    """Its metadata, its whole spec (suspend, components, podSets, Kueue's podSetInfos) and
    its phase: the conditions behind the phase are the AppWrapper controller's bookkeeping,
    which autowrap does not read."""
    return {"metadata": meta_view(appwrapper), "spec": appwrapper.get("spec"),
            "phase": (appwrapper.get("status") or {}).get("phase")}  # fmt: skip


def workload_view(workload: Mapping[str, Any]) -> Obj:
    """What autowrap reads of a Workload (release.admission, waiting.py, cli/status.py): who
    owns it, its podSets' counts, the admission's counts and flavors, and the conditions it
    reads (Admitted, Evicted, Finished, QuotaReserved, AdmissionGated)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    admission = status.get("admission") or {}
    read = ("Admitted", "Evicted", "Finished", "QuotaReserved", "AdmissionGated")
    # Its finalizer (kueue.x-k8s.io/resource-in-use) is Kueue's, which autowrap never reads.
    metadata = meta_view(workload)
    metadata.pop("finalizers", None)
    return {
        "metadata": metadata,
        "queueName": spec.get("queueName"),
        "podSets": [{"name": p.get("name"), "count": p.get("count")}
                    for p in spec.get("podSets") or []],
        "admission": {
            "clusterQueue": admission.get("clusterQueue"),
            "podSetAssignments": [
                {"name": a.get("name"), "count": a.get("count"),
                 "flavors": sorted(set((a.get("flavors") or {}).values()))}
                for a in admission.get("podSetAssignments") or []],
        },
        "conditions": sorted((c.get("type"), c.get("status"))
                             for c in status.get("conditions") or [] if c.get("type") in read),
    }  # fmt: skip


# -- the two clusters --------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request, as sent to both clusters; ``user`` is impersonated (None: the
    administrator). A ``body`` that differs by cluster (a uid of its own) is a function of
    the Apiserver it is sent to."""

    method: str
    path: str
    body: Any = None
    user: str | None = MALLORY
    content_type: str = JSON
    accept: str = JSON
    query: Mapping[str, str] = field(default_factory=dict)

    def send(self, api: Apiserver) -> Answer:
        body = self.body(api) if callable(self.body) else self.body
        return api.request(self.method, self.path, body, user=self.user,
                           groups=USERS.get(self.user or "", ()), content_type=self.content_type,
                           accept=self.accept, query=self.query)  # fmt: skip


@dataclass
class Both:
    cluster: RealCluster
    real: Apiserver
    fake: Apiserver
    fake_side: FakeSide

    @property
    def apis(self) -> tuple[Apiserver, Apiserver]:
        return self.real, self.fake

    def each(self, do: Callable[[Apiserver], T]) -> tuple[T, T]:
        return do(self.real), do(self.fake)

    def send(self, request: Request) -> tuple[Answer, Answer]:
        return request.send(self.real), request.send(self.fake)

    def compare(
        self, request: Request, what: str, view: Callable[[Any], Any] = object_view
    ) -> Answer:
        real, fake = self.send(request)
        same(answered(real, view), answered(fake, view), what)
        return real

    def setup(self, *requests: Request) -> None:
        """Writes both clusters must take (the state a comparison starts from)."""
        for request in requests:
            for api in self.apis:
                answer = request.send(api)
                assert 200 <= answer.status < 300, (api.name, request, answer.status, answer.body)


def copied(obj: Mapping[str, Any]) -> Obj:
    """An RBAC object read from the real cluster, as it is applied to the fake."""
    out = copy.deepcopy(dict(obj))
    out["metadata"] = {k: v for k, v in out["metadata"].items()
                       if k in ("name", "namespace", "labels", "annotations")}  # fmt: skip
    return out


@pytest.fixture(scope="module")
def both(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    cluster = real_cluster
    user_namespace(cluster, NS, editors=[MALLORY, ALICE])
    # bob may write pods, and not delete them (what an ownerReference costs: delete).
    cluster.admin.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pods-without-delete", "namespace": NS},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch"]}],
    })  # fmt: skip
    cluster.admin.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "bob", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pods-without-delete"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": BOB}],
    })  # fmt: skip
    real = real_apiserver(cluster)
    rbac = [copied(real.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/edit").obj)]
    for plural, kind in (("roles", "Role"), ("rolebindings", "RoleBinding")):
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/{plural}"
        # A built-in list's items carry no kind of their own.
        rbac += [copied({**o, "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind})
                 for o in real.request("GET", path).obj["items"]]  # fmt: skip
    fake_side = FakeSide(tmp_path_factory.mktemp("fake-side")).start()
    try:
        api = fake_side.cluster.api

        def set_up() -> None:
            api.add_namespace(NS)
            api.store.create(LOCALQUEUES, {"apiVersion": "kueue.x-k8s.io/v1beta1",
                                           "kind": "LocalQueue",
                                           "metadata": {"name": QUEUE, "namespace": NS},
                                           "spec": {"clusterQueue": "cq"}})  # fmt: skip
            api.enforce_rbac(Rbac(rbac), MALLORY, ALICE, BOB)
            # The ValidatingAdmissionPolicies and bindings as installed on the real cluster:
            # what is compared is kube-apiserver's CEL against the emulator's, over one set.
            emulator = fake_side.cluster.emulator
            emulator.admission_policies = PolicySet(
                o
                for o in cluster.autowrap_objects
                if str(o.get("kind", "")).startswith("ValidatingAdmissionPolicy")
            )

        fake_side.call(set_up)
        yield Both(cluster, real, fake_side.apiserver(), fake_side)
    finally:
        fake_side.stop()
        # A case gives a pod autowrap's finalizer, which nothing takes off a pod: it would
        # hold the namespace's deletion.
        for pod in real.request("GET", PODS).obj["items"]:
            if pod["metadata"].get("finalizers"):
                real.request("PATCH", f"{PODS}/{pod['metadata']['name']}",
                             {"metadata": {"finalizers": None}}, content_type=MERGE)  # fmt: skip
        delete_everything(cluster, NS)


# -- a Pod as stored ---------------------------------------------------------------------------

SPELLINGS = ["0.5", "1000m", 8, "1024Mi", "1536Mi", "1e3", "1.5Gi", "0.1", "100000m", "1k",
             "1000", "2Ki", "1.5", "0.0001", "12e6", "1M", "1.0", "01", "+1", "5000000000m",
             "1E3", 0.25, "0", "1.25Mi", "2048Ki", "1.1", "1e-3", "3e-1", "1n", "1500u", ".5",
             "5.", "1e+3", "1.5e3", "0.5Ki", "1023Ki"]  # fmt: skip


def test_a_pods_resources_are_defaulted_and_canonical_as_kube_apiserver_stores_them(
    both: Both,
) -> None:
    """SetDefaults_Pod (requests from limits, per resource), SetDefaults_ResourceList
    (rounded up to milli) and resource.Quantity's canonical form, or the spelling kept where
    ParseQuantity keeps it."""
    containers = [{"name": f"c{i}", "image": "busybox",
                   "resources": {"requests": {"cpu": s}, "limits": {"memory": s}}}
                  for i, s in enumerate(SPELLINGS)]  # fmt: skip
    containers.append({"name": "limits-only", "image": "busybox",
                       "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "0.5"},
                                     "requests": {"cpu": "100m"}}})  # fmt: skip
    containers.append({"name": "nothing", "image": "busybox"})
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "spellings", "namespace": NS},
           "spec": {"restartPolicy": "Never", "containers": containers}}  # fmt: skip
    both.compare(Request("POST", PODS, pod, query={"dryRun": "All"}), "a dry-run create")
    both.compare(Request("POST", PODS, pod), "the create")
    both.compare(Request("GET", f"{PODS}/spellings"), "the pod read back")
    both.compare(Request("DELETE", f"{PODS}/spellings", query={"gracePeriodSeconds": "0"}),
                 "its delete")  # fmt: skip


# -- dry runs ---------------------------------------------------------------------------------


def _job(name: str, *, replicas: int = 1, labels: Obj | None = None, gpus: int = 0) -> Obj:
    container: Obj = {"name": "trainer", "image": "busybox", "command": ["sleep", "3600"]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus, "cpu": "0.5"}}
    return {
        "apiVersion": VOLCANO_API, "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": dict(labels or {})},
        "spec": {"schedulerName": "volcano", "tasks": [
            {"name": "worker", "replicas": replicas,
             "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}]},
    }  # fmt: skip


def _pod(name: str, *, labels: Obj | None = None, annotations: Obj | None = None,
         owners: list[Obj] | None = None, gated: bool = False) -> Obj:  # fmt: skip
    meta: Obj = {"name": name, "namespace": NS, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owners:
        meta["ownerReferences"] = owners
    spec: Obj = {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "1"]}],
                 "nodeSelector": {"kubernetes.io/arch": "amd64"},
                 "tolerations": [{"key": "gpu", "operator": "Exists"}]}  # fmt: skip
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _complete_job(name: str) -> Obj:
    """A Job that names every default Volcano's webhook would write: its tasks are kept as
    written (no Go re-encoding: the quantities as spelled)."""
    job = _job(name, gpus=1)
    job["spec"].update({"minAvailable": 1, "maxRetry": 2, "queue": "default"})
    job["spec"]["tasks"][0].update({"minAvailable": 1, "maxRetry": 2})
    return job


@pytest.mark.parametrize(
    ("path", "obj"),
    [
        (PODS, {**_pod("gen"), "metadata": {"generateName": "gen-", "namespace": NS}}),
        (VCJOBS, _job("dry", replicas=0)),
        (VCJOBS, _complete_job("dry-complete")),
        (APPWRAPPERS, {
            "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
            "metadata": {"name": "dry", "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"components": [{"template": {
                k: v for k, v in _job("inner", gpus=1).items() if k != "metadata"
            } | {"metadata": {"name": "inner"}}}]},
        }),
    ],
    ids=["pod-generate-name", "volcano-job-defaulted", "volcano-job-complete", "appwrapper"],
)  # fmt: skip
def test_a_dry_run_answers_as_the_create_would_and_stores_nothing(
    both: Both, path: str, obj: Obj
) -> None:
    """Volcano's mutating webhook defaults a Job (its queue, maxRetry, minAvailable) and, when
    it defaulted a task, writes the tasks back as Go encodes them (a zero ``replicas`` left
    out, quantities canonical); Kueue's webhook suspends an AppWrapper and the AppWrapper
    controller's records its creator."""
    created = both.compare(Request("POST", path, obj, query={"dryRun": "All"}), "the dry run")
    name = created.obj["metadata"]["name"]
    both.compare(Request("GET", f"{path}/{name}"), "a read after the dry run")


# -- server-side apply -------------------------------------------------------------------------


def test_server_side_apply_owns_merges_and_conflicts_as_kube_apiserver(both: Both) -> None:
    pod = _pod("applied", labels={"a": "1", "b": "2"})
    pod["spec"]["containers"][0]["env"] = [{"name": "X", "value": "1"}]
    mine = {"fieldManager": "one"}
    steps = [
        ("an apply that creates", Request("PATCH", f"{PODS}/applied", pod,
                                          content_type=APPLY, query=mine)),
        ("the same apply again", Request("PATCH", f"{PODS}/applied", pod,
                                         content_type=APPLY, query=mine)),
        ("an apply without a label it applied before",
         Request("PATCH", f"{PODS}/applied",
                 {**pod, "metadata": {**pod["metadata"], "labels": {"a": "1"}}},
                 content_type=APPLY, query=mine)),
        ("another manager's apply of a field the first owns",
         Request("PATCH", f"{PODS}/applied",
                 {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "applied", "namespace": NS, "labels": {"a": "2"}}},
                 content_type=APPLY, query={"fieldManager": "two"})),
        ("the same, forced",
         Request("PATCH", f"{PODS}/applied",
                 {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "applied", "namespace": NS, "labels": {"a": "2"}}},
                 content_type=APPLY, query={"fieldManager": "two", "force": "true"})),
        ("the first manager's apply that leaves the field out: it stays the second's",
         Request("PATCH", f"{PODS}/applied",
                 {**pod, "metadata": {**pod["metadata"], "labels": {"c": "3"}}},
                 content_type=APPLY, query=mine)),
        ("an apply that leaves out the container it applied before",
         Request("PATCH", f"{PODS}/applied",
                 {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "applied", "namespace": NS, "labels": {"c": "3"}}},
                 content_type=APPLY, query=mine)),
        ("an apply with no fieldManager",
         Request("PATCH", f"{PODS}/applied", pod, content_type=APPLY)),
        ("an apply naming another object",
         Request("PATCH", f"{PODS}/applied",
                 {**pod, "metadata": {**pod["metadata"], "name": "other"}},
                 content_type=APPLY, query=mine)),
        ("a dry-run apply",
         Request("PATCH", f"{PODS}/applied",
                 {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "applied", "namespace": NS, "labels": {"d": "4"}}},
                 content_type=APPLY, query={"fieldManager": "three", "dryRun": "All"})),
        ("a read", Request("GET", f"{PODS}/applied")),
        ("a merge patch of a label", Request("PATCH", f"{PODS}/applied",
                                             {"metadata": {"labels": {"e": "5"}}},
                                             content_type=MERGE)),
        ("a read", Request("GET", f"{PODS}/applied")),
    ]  # fmt: skip
    for what, request in steps:
        both.compare(request, what)


# -- metadata-only reads -----------------------------------------------------------------------


def _partial(obj: Any) -> Any:
    """A PartialObjectMetadata(List) as compared: its kinds and each object's metadata."""
    if not isinstance(obj, dict):
        return obj
    out: Obj = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion")}
    if "items" in obj:
        out["items"] = [{"kind": i.get("kind"), "apiVersion": i.get("apiVersion"),
                         "metadata": meta_view(i)} for i in obj["items"]]  # fmt: skip
    else:
        out["metadata"] = meta_view(obj)
    return out


def test_metadata_only_lists_reads_and_watches_answer_alike(both: Both) -> None:
    both.setup(Request("POST", PODS, _pod("partial", labels={"sel": "yes"},
                                          annotations={"note": "a"})))  # fmt: skip
    both.setup(Request("POST", VCJOBS, _job("partial", labels={"sel": "yes"})))
    selected = {"labelSelector": "sel=yes"}
    for what, request in [
        ("a metadata-only list", Request("GET", PODS, accept=PARTIAL_LIST, query=selected)),
        ("a metadata-only list of a custom resource",
         Request("GET", VCJOBS, accept=PARTIAL_LIST, query=selected)),
        ("a metadata-only read", Request("GET", f"{PODS}/partial", accept=PARTIAL)),
        ("a metadata-only read of a custom resource",
         Request("GET", f"{VCJOBS}/partial", accept=PARTIAL)),
        ("a list asked as one object", Request("GET", PODS, accept=PARTIAL, query=selected)),
        ("a custom resource's list asked as one object",
         Request("GET", VCJOBS, accept=PARTIAL, query=selected)),
        ("one object asked as a list", Request("GET", f"{PODS}/partial", accept=PARTIAL_LIST)),
        ("a custom resource asked as a list",
         Request("GET", f"{VCJOBS}/partial", accept=PARTIAL_LIST)),
        ("a missing object asked as a list",
         Request("GET", f"{VCJOBS}/missing", accept=PARTIAL_LIST)),
        ("a version of meta.k8s.io there is not",
         Request("GET", PODS, accept=PARTIAL_LIST.replace("v=v1", "v=v2"))),
        ("the same, then plain JSON as the client's fallback",
         Request("GET", PODS, accept=PARTIAL_LIST.replace("v=v1", "v=v2") + ", application/json",
                 query=selected)),
    ]:  # fmt: skip
        both.compare(request, what, view=_partial)

    def watched(api: Apiserver) -> list[Obj]:
        """The event of a metadata-only watch from the list's version that carries the label
        change made once it is open (the kubelet's status writes on the real pod come as
        events of their own). Bookmarks are left out: kube-apiserver sends them about once a
        minute, the fake every second, and they carry only a resourceVersion."""
        listed = api.request("GET", PODS, accept=PARTIAL_LIST, query=selected).obj
        version = listed["metadata"]["resourceVersion"]
        change = threading.Timer(1.0, lambda: api.request(
            "PATCH", f"{PODS}/partial", {"metadata": {"labels": {"seen": "yes"}}},
            content_type=MERGE))  # fmt: skip
        change.start()
        try:
            events = api.watch(PODS, events=20, accept=PARTIAL, timeout=5.0,
                               query={**selected, "resourceVersion": version,
                                      "allowWatchBookmarks": "true"})  # fmt: skip
        finally:
            change.join()
        return [{"type": e["type"], "object": _partial(e["object"])} for e in events
                if e["type"] != "BOOKMARK"
                and "seen" in ((e["object"].get("metadata") or {}).get("labels") or {})][:1]  # fmt: skip

    real, fake = both.each(watched)
    same(normalised(real), normalised(fake), "a metadata-only watch")


# -- RBAC ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        Request("POST", WORKLOADS, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                                    "metadata": {"name": "w", "namespace": NS},
                                    "spec": {"podSets": []}}),
        Request("GET", "/api/v1/nodes"),
        Request("GET", "/api/v1/namespaces/kube-system/pods"),
        Request("PATCH", f"{PODS}/x/status", {"metadata": {"labels": {"a": "b"}}},
                content_type=MERGE),
        Request("PUT", f"{WORKLOADS}/w/status", {"apiVersion": "kueue.x-k8s.io/v1beta1",
                                                 "kind": "Workload",
                                                 "metadata": {"name": "w", "namespace": NS}}),
        Request("POST", f"{PODS}/x/binding", {"apiVersion": "v1", "kind": "Binding",
                                              "metadata": {"name": "x"},
                                              "target": {"kind": "Node", "name": "n"}}),
        Request("GET", "/apis/batch.volcano.sh/v1alpha1/jobs"),
        Request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                 "spec": {"user": "x", "resourceAttributes": {"verb": "get",
                                                              "resource": "pods"}}}),
        Request("GET", "/apis/coordination.k8s.io/v1/namespaces/autowrap-system/leases"),
        Request("PATCH", f"{APPWRAPPERS}/x/status", {"status": {}}, content_type=MERGE),
        Request("DELETE", f"{PODS}/x", user=BOB),
        Request("POST", VCJOBS, _job("bobs"), user=BOB),
    ],
    ids=["create-workload", "list-nodes", "list-another-namespace", "pod-status",
         "workload-status", "pod-binding", "jobs-everywhere", "subject-access-review",
         "autowrap-leases", "appwrapper-status", "delete-without-the-verb",
         "volcano-job-without-a-role"],
)  # fmt: skip
def test_rbac_refuses_a_namespace_user_alike(both: Both, request_: Request) -> None:
    both.compare(request_, "the authorizer's answer")


# -- OwnerReferencesPermissionEnforcement ----------------------------------------------------------


def test_owner_references_cost_their_writer_what_kube_apiserver_asks(both: Both) -> None:
    both.setup(Request("POST", VCJOBS, _job("owner"), user=ALICE))
    uids = {
        api.name: api.request("GET", f"{VCJOBS}/owner").obj["metadata"]["uid"] for api in both.apis
    }

    def owned(name: str, **ref: Any) -> Callable[[Apiserver], Obj]:
        def build(api: Apiserver) -> Obj:
            owner = {"apiVersion": VOLCANO_API, "kind": "Job", "name": "owner",
                     "uid": uids[api.name], **ref}  # fmt: skip
            return _pod(name, owners=[owner])

        return build

    def each_sends(what: str, method: str, path: str, body: Callable[[Apiserver], Any],
                   user: str, content_type: str = JSON) -> None:  # fmt: skip
        real, fake = (api.request(method, path, body(api), user=user, groups=[AUTHENTICATED],
                                  content_type=content_type) for api in both.apis)  # fmt: skip
        same(answered(real, object_view), answered(fake, object_view), what)

    each_sends(
        "blockOwnerDeletion without finalizers on the owner",
        "POST",
        PODS,
        owned("blocker", blockOwnerDeletion=True),
        MALLORY,
    )
    each_sends("an owner named at create", "POST", PODS, owned("plain"), MALLORY)
    each_sends("an owner named at create, without delete on pods", "POST", PODS, owned("bobs"), BOB)
    each_sends(
        "owners removed without delete on the pod",
        "PATCH",
        f"{PODS}/bobs",
        lambda api: {"metadata": {"ownerReferences": None}},
        BOB,
        MERGE,
    )
    each_sends("an owner added without delete on the pod", "PATCH", f"{PODS}/plain",
               lambda api: {"metadata": {"ownerReferences": owned("x", controller=True)(api)[
                   "metadata"]["ownerReferences"]}}, BOB, MERGE)  # fmt: skip
    each_sends(
        "a label changed without delete on the pod",
        "PATCH",
        f"{PODS}/plain",
        lambda api: {"metadata": {"labels": {"x": "y"}}},
        BOB,
        MERGE,
    )
    for what, ref in [
        ("blockOwnerDeletion on an owner that does not exist",
         {"apiVersion": VOLCANO_API, "kind": "Job", "name": "nope", "uid": "0"}),
        ("blockOwnerDeletion on a kind no API serves",
         {"apiVersion": "example.com/v1", "kind": "Thing", "name": "nope", "uid": "0"}),
        ("blockOwnerDeletion on a core kind there is not",
         {"apiVersion": "v1", "kind": "Thing", "name": "nope", "uid": "0"}),
    ]:  # fmt: skip
        pod = _pod("ghost", owners=[{**ref, "blockOwnerDeletion": True}])
        both.compare(Request("POST", PODS, pod), what)


# -- deletes with preconditions ----------------------------------------------------------------


def test_a_delete_whose_precondition_fails_is_refused_alike(both: Both) -> None:
    both.setup(Request("POST", PODS, _pod("kept")), Request("POST", VCJOBS, _job("kept")))
    for path in (f"{PODS}/kept", f"{VCJOBS}/kept"):
        for preconditions in ({"uid": "7a6e6a52-3e0b-4f63-9c5d-9a3c3c9a1f00"},
                              {"resourceVersion": "1"}):  # fmt: skip
            options = {"kind": "DeleteOptions", "apiVersion": "v1",
                       "preconditions": preconditions}  # fmt: skip
            both.compare(Request("DELETE", path, options), f"a delete of {path} {preconditions}")


# -- every ValidatingAdmissionPolicy, allowing and refusing ---------------------------------------


def _claiming(name: str, **extra: Any) -> Obj:
    """A pod of a wrapped object as its controller makes it: gated, labelled for its
    AppWrapper, with the podSet annotation."""
    return _pod(
        name,
        labels={APPWRAPPER_LABEL: "aw", "app": "x"},
        annotations={"autowrap.io/podset": "0"},
        gated=True,
        **extra,
    )


OWNER_JOB = "owning-job"
_owner_uids: dict[tuple[str, int], str] = {}


def _volcano_owner(api: Apiserver) -> Obj:
    """A controller reference to the Volcano Job OWNER_JOB of that cluster (one that exists:
    the garbage collector deletes a pod whose owner does not)."""
    key = (api.name, api.port)
    if key not in _owner_uids:
        found = api.request("GET", f"{VCJOBS}/{OWNER_JOB}")
        if found.status == 404:
            found = api.request("POST", VCJOBS, _job(OWNER_JOB, replicas=0), user=ALICE,
                                groups=[AUTHENTICATED])  # fmt: skip
        _owner_uids[key] = found.obj["metadata"]["uid"]
    return {"apiVersion": VOLCANO_API, "kind": "Job", "name": OWNER_JOB,
            "uid": _owner_uids[key], "controller": True}  # fmt: skip


def _owned(build: Callable[..., Obj], name: str, **extra: Any) -> Callable[[Apiserver], Obj]:
    """``build(name, owners=[<OWNER_JOB>], ...)``, per cluster."""
    return lambda api: build(name, owners=[_volcano_owner(api)], **extra)


def _marked_job(name: str) -> Obj:
    """A Volcano Job labelled for an AppWrapper: one autowrap-adopted-job-size freezes."""
    return _job(name, labels={APPWRAPPER_LABEL: "aw"})


@dataclass(frozen=True)
class PolicyCase:
    """``setup`` (as their users), then ``probe``: the same answer from both clusters."""

    setup: Sequence[Request]
    probe: Request


def _case(setup: Sequence[Request], probe: Request) -> PolicyCase:
    return PolicyCase(tuple(setup), probe)


def _json_patch(*ops: Obj) -> list[Obj]:
    return list(ops)


POLICY_CASES: dict[str, PolicyCase] = {
    # autowrap-admission-gate
    "gate-removed-by-a-user": _case(
        [Request("POST", PODS, _claiming("gate-1"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/gate-1",
                _json_patch({"op": "remove", "path": "/spec/schedulingGates/0"}),
                content_type=JSON_PATCH)),
    "released-label-added-by-a-user": _case(
        [Request("POST", PODS, _claiming("gate-2"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/gate-2", {"metadata": {"labels": {"autowrap.io/released": "1"}}},
                content_type=MERGE)),
    "another-label-added-by-a-user": _case(
        [Request("POST", PODS, _claiming("gate-3"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/gate-3", {"metadata": {"labels": {"team": "a"}}},
                content_type=MERGE)),
    "gate-removed-by-autowrap": _case(
        [Request("POST", PODS, _claiming("gate-4"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/gate-4", _json_patch(
            {"op": "remove", "path": "/spec/schedulingGates/0"},
            {"op": "add", "path": "/metadata/labels/autowrap.io~1released", "value": "true"},
            {"op": "add", "path": "/spec/tolerations/-",
             "value": {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}),
                content_type=JSON_PATCH, user=AUTOWRAP)),
    "released-label-through-pods-status": _case(
        [Request("POST", PODS, _claiming("gate-5"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/gate-5/status",
                {"metadata": {"labels": {"autowrap.io/released": "1"}}},
                content_type=MERGE, user=ADMIN)),
    # autowrap-wrapped-pods
    "claim-by-owner-reference": _case(
        [], Request("POST", PODS, _owned(_pod, "claim-1"))),
    "claim-by-label": _case(
        [], Request("POST", PODS, _pod("claim-2", labels={APPWRAPPER_LABEL: "aw"}))),
    "claim-by-gate": _case([], Request("POST", PODS, _pod("claim-3", gated=True))),
    "claim-by-its-controller": _case(
        [], Request("POST", PODS, _owned(_pod, "claim-4"), user=VOLCANO)),
    "claim-prepared-by-autowrap": _case(
        [], Request("POST", PODS, _pod("claim-5", labels={"autowrap.io/adoption": "pending"},
                                       annotations={"autowrap.io/requested-by": MALLORY},
                                       gated=True))),
    "claim-prepared-for-someone-else": _case(
        [], Request("POST", PODS, _pod("claim-6", labels={"autowrap.io/adoption": "pending"},
                                       annotations={"autowrap.io/requested-by": ALICE},
                                       gated=True))),
    "claim-taken-off-by-a-user": _case(
        [Request("POST", PODS, _claiming("claim-7"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/claim-7", {"metadata": {"labels": {APPWRAPPER_LABEL: None}}},
                content_type=MERGE)),
    "claim-changed-through-pods-status": _case(
        [Request("POST", PODS, _claiming("claim-8"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/claim-8/status",
                {"metadata": {"labels": {APPWRAPPER_LABEL: "other"}}},
                content_type=MERGE, user=ADMIN)),
    "owner-removed-by-the-garbage-collector": _case(
        [Request("POST", PODS, _owned(_pod, "claim-9"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/claim-9", {"metadata": {"ownerReferences": None}},
                content_type=MERGE, user=GARBAGE_COLLECTOR)),
    "owner-removed-by-a-user": _case(
        [Request("POST", PODS, _owned(_pod, "claim-10"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/claim-10", {"metadata": {"ownerReferences": None}},
                content_type=MERGE)),
    # autowrap-requested-by
    "requester-named-falsely-at-create": _case(
        [], Request("POST", PODS, _pod("req-1", annotations={"autowrap.io/requested-by": ALICE}))),
    "requester-named-truly-at-create": _case(
        [], Request("POST", PODS, _pod("req-2", annotations={"autowrap.io/requested-by": MALLORY}))),
    "requester-added-later": _case(
        [Request("POST", PODS, _pod("req-3"))],
        Request("PATCH", f"{PODS}/req-3",
                {"metadata": {"annotations": {"autowrap.io/requested-by": MALLORY}}},
                content_type=MERGE)),
    "requester-removed": _case(
        [Request("POST", PODS, _pod("req-4", annotations={"autowrap.io/requested-by": MALLORY}))],
        Request("PATCH", f"{PODS}/req-4",
                {"metadata": {"annotations": {"autowrap.io/requested-by": None}}},
                content_type=MERGE)),
    "pending-job-without-the-gate": _case(
        [], Request("POST", VCJOBS, _job("req-5", labels={"autowrap.io/adoption": "pending"}))),
    "adoption-label-added-later": _case(
        [Request("POST", VCJOBS, _job("req-6"))],
        Request("PATCH", f"{VCJOBS}/req-6",
                {"metadata": {"labels": {"autowrap.io/adoption": "adopted"}}},
                content_type=MERGE)),
    "requester-added-through-pods-status": _case(
        [Request("POST", PODS, _pod("req-7"))],
        Request("PATCH", f"{PODS}/req-7/status",
                {"metadata": {"annotations": {"autowrap.io/requested-by": ALICE}}},
                content_type=MERGE, user=ADMIN)),
    # autowrap-adopted-job-size
    "replicas-of-a-marked-job": _case(
        [Request("POST", VCJOBS, _marked_job("size-1"))],
        Request("PATCH", f"{VCJOBS}/size-1",
                _json_patch({"op": "replace", "path": "/spec/tasks/0/replicas", "value": 3}),
                content_type=JSON_PATCH)),
    "task-min-available-of-a-marked-job": _case(
        [Request("POST", VCJOBS, _marked_job("size-2"))],
        Request("PATCH", f"{VCJOBS}/size-2",
                _json_patch({"op": "replace", "path": "/spec/tasks/0/minAvailable", "value": 3}),
                content_type=JSON_PATCH)),
    "min-available-of-a-marked-job": _case(
        [Request("POST", VCJOBS, _marked_job("size-3"))],
        Request("PATCH", f"{VCJOBS}/size-3",
                _json_patch({"op": "replace", "path": "/spec/minAvailable", "value": 3}),
                content_type=JSON_PATCH)),
    "priority-class-of-a-marked-job": _case(
        [Request("POST", VCJOBS, _marked_job("size-4"))],
        Request("PATCH", f"{VCJOBS}/size-4",
                _json_patch({"op": "add", "path": "/spec/priorityClassName",
                             "value": "system-node-critical"}),
                content_type=JSON_PATCH)),
    "mark-removed-by-a-user": _case(
        [Request("POST", VCJOBS, _marked_job("size-5"))],
        Request("PATCH", f"{VCJOBS}/size-5", {"metadata": {"labels": {APPWRAPPER_LABEL: None}}},
                content_type=MERGE)),
    "mark-removed-by-the-garbage-collector": _case(
        [Request("POST", VCJOBS, _marked_job("size-6"))],
        Request("PATCH", f"{VCJOBS}/size-6", {"metadata": {"labels": {APPWRAPPER_LABEL: None}}},
                content_type=MERGE, user=GARBAGE_COLLECTOR)),
    "image-of-a-marked-job": _case(
        [Request("POST", VCJOBS, _marked_job("size-7"))],
        Request("PATCH", f"{VCJOBS}/size-7",
                _json_patch({"op": "replace",
                             "path": "/spec/tasks/0/template/spec/containers/0/image",
                             "value": "busybox:2"}),
                content_type=JSON_PATCH)),
    "replicas-of-an-unmarked-job": _case(
        [Request("POST", VCJOBS, _job("size-8"))],
        Request("PATCH", f"{VCJOBS}/size-8",
                _json_patch({"op": "replace", "path": "/spec/tasks/0/replicas", "value": 2}),
                content_type=JSON_PATCH)),
    # autowrap-own-writes
    "autowrap-creates-a-pod": _case([], Request("POST", PODS, _pod("own-1"), user=AUTOWRAP)),
    "autowrap-dry-runs-a-pod": _case(
        [], Request("POST", PODS, _pod("own-2"), user=AUTOWRAP, query={"dryRun": "All"})),
    "autowrap-creates-a-service": _case(
        [], Request("POST", SERVICES, {"apiVersion": "v1", "kind": "Service",
                                       "metadata": {"name": "own-3", "namespace": NS},
                                       "spec": {"clusterIP": "None", "selector": {"a": "b"}}},
                    user=AUTOWRAP)),
    "autowrap-dry-runs-a-service": _case(
        [], Request("POST", SERVICES, {"apiVersion": "v1", "kind": "Service",
                                       "metadata": {"name": "own-4", "namespace": NS},
                                       "spec": {"clusterIP": "None", "selector": {"a": "b"}}},
                    user=AUTOWRAP, query={"dryRun": "All"})),
    "autowrap-creates-a-job": _case([], Request("POST", VCJOBS, _job("own-5"), user=AUTOWRAP)),
    "autowrap-dry-runs-a-job": _case(
        [], Request("POST", VCJOBS, _job("own-6"), user=AUTOWRAP, query={"dryRun": "All"})),
    "autowrap-deletes-a-pod": _case(
        [Request("POST", PODS, _pod("own-7"))],
        Request("DELETE", f"{PODS}/own-7", user=AUTOWRAP)),
    "autowrap-patches-an-unprepared-pod": _case(
        [Request("POST", PODS, _pod("own-8"))],
        Request("PATCH", f"{PODS}/own-8", {"metadata": {"labels": {"x": "y"}}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-adds-a-label": _case(
        [Request("POST", PODS, _claiming("own-9"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-9", {"metadata": {"labels": {"kueue.x-k8s.io/podset": "p"}}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-changes-someone-elses-label": _case(
        [Request("POST", PODS, _claiming("own-10"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-10", {"metadata": {"labels": {"app": "y"}}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-adds-an-appwrapper-owner": _case(
        [Request("POST", PODS, _claiming("own-11"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-11", {"metadata": {"ownerReferences": [
            {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "name": "aw",
             "uid": "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"}]}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-removes-an-owner": _case(
        [Request("POST", PODS, _owned(_claiming, "own-12"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-12", {"metadata": {"ownerReferences": None}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-adds-its-finalizer": _case(
        [Request("POST", PODS, _claiming("own-13"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-13", {"metadata": {"finalizers": ["autowrap.io/adoption"]}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-adds-another-finalizer": _case(
        [Request("POST", PODS, _claiming("own-14"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-14", {"metadata": {"finalizers": ["example.com/other"]}},
                content_type=MERGE, user=AUTOWRAP)),
    "autowrap-changes-an-image": _case(
        [Request("POST", PODS, _claiming("own-15"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-15", _json_patch(
            {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:2"}),
                content_type=JSON_PATCH, user=AUTOWRAP)),
    "autowrap-removes-a-toleration": _case(
        [Request("POST", PODS, _claiming("own-16"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-16", _json_patch(
            {"op": "remove", "path": "/spec/tolerations/0"}),
                content_type=JSON_PATCH, user=AUTOWRAP)),
    "autowrap-adds-a-node-selector-key": _case(
        [Request("POST", PODS, _claiming("own-17"), user=VOLCANO)],
        Request("PATCH", f"{PODS}/own-17",
                {"spec": {"nodeSelector": {"cloud.example/pool": "a100"}}},
                content_type=STRATEGIC, user=AUTOWRAP)),
    "autowrap-changes-a-jobs-spec": _case(
        [Request("POST", VCJOBS, _marked_job("own-18"))],
        Request("PATCH", f"{VCJOBS}/own-18",
                _json_patch({"op": "replace", "path": "/spec/maxRetry", "value": 5}),
                content_type=JSON_PATCH, user=AUTOWRAP)),
    "autowrap-labels-a-prepared-job": _case(
        [Request("POST", VCJOBS, _marked_job("own-19"))],
        Request("PATCH", f"{VCJOBS}/own-19",
                {"metadata": {"annotations": {"autowrap.io/status": "Queued"}}},
                content_type=MERGE, user=AUTOWRAP)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(POLICY_CASES))
def test_every_policy_gives_the_same_verdict_and_message(both: Both, case: str) -> None:
    """Each ValidatingAdmissionPolicy of deploy/ on a write it allows and on one it refuses:
    the same code, the same message (kube-apiserver's CEL against testbed's emulation), and
    what an allowed write stored."""
    policy_case = POLICY_CASES[case]
    both.setup(*policy_case.setup)
    both.compare(policy_case.probe, case)


# -- a job adopted, admitted and running, as stored -----------------------------------------------


def test_an_adopted_and_admitted_job_is_stored_alike(both: Both) -> None:
    """alice's labelled Job with an idle task (replicas 0), fractional cpu and GPUs in limits
    only, adopted by autowrap and admitted by Kueue: the Job, its AppWrapper (no
    ``spec.suspend`` once admitted; Kueue's podSetInfos), the Workload and the pods as autowrap
    reads them back."""
    job = _job("stored", gpus=1, labels={"kueue.x-k8s.io/queue-name": QUEUE})
    job["spec"]["tasks"].append(copy.deepcopy(job["spec"]["tasks"][0]) | {"name": "idle",
                                                                          "replicas": 0})  # fmt: skip
    both.setup(Request("POST", VCJOBS, job, user=ALICE))
    both.fake_side.settle()
    running_under_kueue(both.cluster, NS, "vcjob", "stored", 1)
    eventually(lambda: "is Running" in status_of(
        both.real.request("GET", f"{VCJOBS}/stored").obj), what="autowrap's status: Running")  # fmt: skip

    def stored(api: Apiserver) -> Obj:
        appwrapper = api.request("GET", f"{APPWRAPPERS}/stored").obj
        workloads = [w for w in api.request("GET", WORKLOADS).obj["items"]
                     if (w["metadata"].get("ownerReferences") or [{}])[0].get("name") == "stored"]  # fmt: skip
        pods = [p for p in api.request("GET", PODS).obj["items"]
                if (p["metadata"].get("labels") or {}).get("volcano.sh/job-name") == "stored"]  # fmt: skip
        return {
            "job": object_view(api.request("GET", f"{VCJOBS}/stored").obj),
            "appwrapper": appwrapper_view(appwrapper),
            "workloads": [workload_view(w) for w in workloads],
            "pods": sorted((pod_view(p) for p in pods), key=lambda p: p["metadata"]["name"]),
        }

    real, fake = both.each(stored)
    for part in ("job", "appwrapper", "workloads", "pods"):
        same(normalised(real[part]), normalised(fake[part]), f"the {part} as stored")

    # kubectl apply of the unchanged manifest: its three-way JSON merge patch sends the tasks
    # (an atomic list) as the manifest has them; autowrap's re-apply webhook and Volcano's
    # validation answer it.
    both.compare(Request("PATCH", f"{VCJOBS}/stored", {"spec": {"tasks": job["spec"]["tasks"]}},
                         user=ALICE, content_type=MERGE), "a re-apply of the manifest")  # fmt: skip
