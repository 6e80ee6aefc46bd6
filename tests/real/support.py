"""What the real-control-plane tests share: kubectl answers read as JSON or as refusals,
polling for what the real controllers do in their own time, the namespaces and grants a
platform team would set up for a namespace user, and one HTTP client that speaks to the real
kube-apiserver and to the fake cluster (testbed.cluster) alike, so the same request can be
sent to both and their answers compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import http.client
import json
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from testbed.real.cluster import RealCluster
from testbed.sim.kubelet import expand, field_value

Obj = dict[str, Any]
T = TypeVar("T")
RBAC_API = "rbac.authorization.k8s.io"
VOLCANO_JOBS_ROLE = "volcano-jobs"
AUTHENTICATED = "system:authenticated"


# -- kubectl ---------------------------------------------------------------------------------


def kubectl_json(
    cluster: RealCluster, *args: str, as_user: str = "admin", input: str | None = None
) -> Obj:
    """``kubectl <args> -o json`` as ``as_user``, which must succeed; its output parsed."""
    done = cluster.kubectl(*args, "-o", "json", as_user=as_user, input=input)
    assert done.returncode == 0, f"kubectl {' '.join(args)} as {as_user}: {done.stderr}"
    parsed: Obj = json.loads(done.stdout)
    return parsed


def create(cluster: RealCluster, obj: Obj, *, as_user: str = "admin") -> Obj:
    """``kubectl create`` of ``obj`` as ``as_user``, which must succeed; the stored object."""
    return kubectl_json(cluster, "create", "-f", "-", as_user=as_user, input=yaml.safe_dump(obj))


def refusal(done: Any) -> str:
    """The stderr of a kubectl call that must have failed (what the user was told)."""
    assert done.returncode != 0, f"kubectl succeeded where a refusal was expected: {done.stdout}"
    text: str = done.stderr.strip()
    return text


def get(cluster: RealCluster, kind: str, name: str, namespace: str) -> Obj | None:
    """The object as stored, or None when there is none (read as the administrator)."""
    done = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json",
                           "--ignore-not-found")  # fmt: skip
    assert done.returncode == 0, done.stderr
    if not done.stdout.strip():
        return None
    found: Obj = json.loads(done.stdout)
    return found


def names_of(cluster: RealCluster, kind: str, namespace: str, selector: str = "") -> list[str]:
    args = ["get", kind, "-n", namespace] + (["-l", selector] if selector else [])
    listed = kubectl_json(cluster, *args)
    return sorted(str(o["metadata"]["name"]) for o in listed["items"])


def eventually(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float = 60.0,
    interval: float = 0.25,
    explain: Callable[[], str] | None = None,
) -> T:
    """``probe()``'s first truthy answer; after ``timeout`` an AssertionError saying ``what``
    was awaited and, with ``explain``, what there was instead. The deadline only bounds how
    long a real controller may take: nothing is asserted about the time itself."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            detail = f": {explain()}" if explain else ""
            raise AssertionError(f"never saw {what}{detail}")
        time.sleep(interval)


# -- namespaces and grants -------------------------------------------------------------------


def volcano_jobs_role(namespace: str) -> Obj:
    """What a platform team grants its users besides ``edit``: Volcano's chart aggregates
    none of its roles to ``edit`` (its ``vcjob-editor-role`` lacks ``patch`` besides), so a
    namespace user may not write Volcano Jobs without a Role like this one."""
    return {
        "apiVersion": f"{RBAC_API}/v1", "kind": "Role",
        "metadata": {"name": VOLCANO_JOBS_ROLE, "namespace": namespace},
        "rules": [{"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
    }  # fmt: skip


def role_binding(namespace: str, user: str, kind: str, role: str) -> Obj:
    return {
        "apiVersion": f"{RBAC_API}/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{user}-{role}", "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_API, "kind": kind, "name": role},
        "subjects": [{"apiGroup": RBAC_API, "kind": "User", "name": user}],
    }  # fmt: skip


def user_namespace(
    cluster: RealCluster,
    name: str,
    *,
    editors: Sequence[str] = (),
    pod_writers: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    queue: str = "team-queue",
    cluster_queue: str | None = None,
) -> None:
    """Namespace ``name`` with LocalQueue ``queue`` (on ``cluster_queue``, by default the
    session's), where each of ``editors`` holds the bootstrap ``edit`` role (pods, and
    AppWrappers: Kueue's and the AppWrapper controller's editor roles aggregate to it) and
    each of ``pod_writers`` a Role for pods only: no AppWrappers. Both may write Volcano Jobs
    (:func:`volcano_jobs_role`)."""
    if cluster_queue is None:
        cluster.add_namespace(name, queue=queue, labels=dict(labels or {}))
    else:
        cluster.admin.apply({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": name, "labels": dict(labels or {})}})  # fmt: skip
        cluster.admin.apply(local_queue(name, queue, cluster_queue))
    cluster.admin.apply(volcano_jobs_role(name))
    cluster.admin.apply({
        "apiVersion": f"{RBAC_API}/v1", "kind": "Role",
        "metadata": {"name": "pods", "namespace": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
    })  # fmt: skip
    for user in (*editors, *pod_writers):
        cluster.admin.apply(role_binding(name, user, "Role", VOLCANO_JOBS_ROLE))
    for user in editors:
        cluster.admin.apply(role_binding(name, user, "ClusterRole", "edit"))
    for user in pod_writers:
        cluster.admin.apply(role_binding(name, user, "Role", "pods"))


def local_queue(namespace: str, name: str, cluster_queue: str) -> Obj:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}}  # fmt: skip


def as_alice(
    cluster: RealCluster, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as ``alice``, an authenticated user the administrator impersonates (``kubectl
    --as``): a second namespace user without credentials of her own."""
    return cluster.kubectl("--as", "alice", "--as-group", AUTHENTICATED, *args, input=input)


# -- one HTTP client for both clusters -------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """An apiserver's answer: its HTTP status, its body (JSON decoded; text otherwise) and
    its Warning headers' texts."""

    status: int
    body: Any
    warnings: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else ""

    @property
    def obj(self) -> Obj:
        assert 200 <= self.status < 300 and isinstance(self.body, dict), (self.status, self.body)
        return self.body


def _warning_text(header: str) -> str:
    """``299 - "text"`` as kube-apiserver writes a Warning header: the text."""
    code, _, rest = header.partition(" ")
    agent, _, quoted = rest.partition(" ")
    del code, agent
    return quoted.strip().removeprefix('"').removesuffix('"').replace('\\"', '"')


@dataclass
class Apiserver:
    """An apiserver reached over HTTPS as its administrator, acting as whoever a request
    names: the administrator itself, or a user (with groups) or ServiceAccount it
    impersonates, as ``kubectl --as`` does. The real kube-apiserver and the fake cluster
    (which applies Impersonate-* the same way) get byte-identical requests this way."""

    name: str
    host: str
    port: int
    context: ssl.SSLContext
    token: str | None = None
    timeout: float = 30.0

    def _headers(self, user: str | None, groups: Sequence[str], extra: Mapping[str, str]) -> Obj:
        headers: Obj = {"User-Agent": "autowrap-differential/1.0", **extra}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if user:
            headers["Impersonate-User"] = user
        return headers

    def _connection(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                           timeout=timeout or self.timeout)  # fmt: skip

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user: str | None = None,
        groups: Sequence[str] = (),
        content_type: str = "application/json",
        accept: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> Answer:
        url = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = self._headers(user, groups, {"Accept": accept, "Content-Type": content_type})
        connection = self._connection()
        try:
            connection.putrequest(method, url)
            for key, value in headers.items():
                connection.putheader(key, value)
            for group in groups:
                connection.putheader("Impersonate-Group", group)
            connection.putheader("Content-Length", str(len(data or b"")))
            connection.endheaders(data)
            response = connection.getresponse()
            raw = response.read()
            warnings = tuple(_warning_text(w) for w in response.headers.get_all("Warning") or ())
            status = response.status
        finally:
            connection.close()
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        return Answer(status, decoded, warnings)

    def watch(
        self,
        path: str,
        *,
        events: int,
        user: str | None = None,
        accept: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float = 20.0,
    ) -> list[Obj]:
        """The first ``events`` events of a watch of ``path`` (fewer if the stream ends or
        stays silent for ``timeout``)."""
        url = path + "?" + urllib.parse.urlencode({"watch": "true", **(query or {})})
        connection = self._connection(timeout)
        seen: list[Obj] = []
        try:
            connection.putrequest("GET", url)
            for key, value in self._headers(user, (), {"Accept": accept}).items():
                connection.putheader(key, value)
            connection.endheaders()
            response = connection.getresponse()
            assert response.status == 200, (response.status, response.read()[:2000])
            while len(seen) < events:
                try:
                    line = response.readline()
                except TimeoutError:
                    break
                if not line:
                    break
                if line.strip():
                    seen.append(json.loads(line))
        finally:
            connection.close()
        return seen


def real_apiserver(cluster: RealCluster) -> Apiserver:
    """The real kube-apiserver, as its administrator (the session's client certificate)."""
    parsed = urllib.parse.urlparse(cluster.server)
    assert parsed.hostname and parsed.port
    return Apiserver("real", parsed.hostname, parsed.port, cluster.admin.context)


# -- the fake cluster, running beside the real one -------------------------------------------


@dataclass
class FakeSide:
    """The fake cluster of the adopt tier (tests/adopt/cluster.py ``running_cluster``:
    FakeCluster behind the ApiserverEmulator with autowrap's webhooks and
    ValidatingAdmissionPolicies, autowrap itself, simulated Kueue, AppWrapper controller,
    Volcano and kubelet) running on an event loop of its own thread, so that synchronous
    tests send it HTTP requests as they send them to the real apiserver."""

    workdir: Path
    options: Mapping[str, Any] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    cluster: Any = None
    _thread: threading.Thread | None = None
    _context: Any = None

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        """Run ``coroutine`` on the fake's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def call(self, function: Callable[[], T]) -> T:
        """Run ``function`` on the fake's loop (its objects belong to that thread)."""

        async def wrapped() -> T:
            return function()

        return self.run(wrapped())

    def start(self) -> FakeSide:
        from testbed.pki import service_dns_names, write_pki
        from tests.adopt.cluster import running_cluster

        self._thread = threading.Thread(target=self.loop.run_forever, name="fake-cluster",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        pki = write_pki(self.workdir / "pki", service_dns_names())

        async def enter() -> Any:
            self._context = running_cluster(pki, self.workdir, **self.options)
            return await self._context.__aenter__()

        self.cluster = self.run(enter())
        return self

    def stop(self) -> None:
        try:
            if self._context is not None:
                self.run(self._context.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=30)
            self.loop.close()

    def settle(self, timeout: float = 60.0) -> None:
        """Until the simulators and autowrap's controller have nothing left to do."""
        self.run(self.cluster.settle(timeout=timeout), timeout=timeout + 30)

    def apiserver(self) -> Apiserver:
        """The fake's HTTPS API, as its administrator (its admin token)."""
        from testbed.cluster.cluster import ADMIN_TOKEN

        api = self.cluster.api
        context = ssl.create_default_context(cadata=api.tls.ca_pem.decode())
        # The fake's certificate names kubernetes.default.svc; it is reached by address.
        context.check_hostname = False
        return Apiserver("fake", api.host, api.port, context, token=ADMIN_TOKEN)


@contextlib.contextmanager
def fake_side(workdir: Path, **options: Any) -> Iterator[FakeSide]:
    side = FakeSide(workdir, options).start()
    try:
        yield side
    finally:
        side.stop()


def without(obj: Any, *paths: str) -> Any:
    """A copy of ``obj`` without the dotted ``paths`` (absent ones ignored)."""
    out = copy.deepcopy(obj)
    for path in paths:
        *parents, last = path.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if isinstance(node, dict):
            node.pop(last, None)
    return out


# -- jobs end to end: namespaces of their own, policies, pods, their rendezvous env ----------

STATUS_ANNOTATION = "autowrap.io/status"
ADMISSION_GATE = "autowrap.io/admission"
ADOPTION_FINALIZER = "autowrap.io/adoption"
POLICY_CONFIGMAP = ("autowrap-system", "autowrap-policies")
REPO = Path(__file__).resolve().parents[2]
AUTOWRAP_CLI = REPO / ".venv" / "bin" / "autowrap"
# Every variable autowrap sets for the rendezvous (docs/user-guide.md, the env table).
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE", "WORLD_SIZE", "RANK",
              "NODE_RANK", "LOCAL_WORLD_SIZE", "PET_MASTER_ADDR", "PET_MASTER_PORT",
              "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK")  # fmt: skip


def listed(cluster: RealCluster, kind: str, namespace: str, selector: str = "") -> list[Obj]:
    """The objects of ``kind`` in ``namespace`` (with a label ``selector``), sorted by name."""
    args = ["get", kind, "-n", namespace] + (["-l", selector] if selector else [])
    items: list[Obj] = kubectl_json(cluster, *args)["items"]
    return sorted(items, key=lambda o: str(o["metadata"]["name"]))


def job_pods(cluster: RealCluster, namespace: str, job: str) -> list[Obj]:
    """The pods Volcano made for Job ``job``."""
    return listed(cluster, "pods", namespace, f"volcano.sh/job-name={job}")


def gates(pod: Mapping[str, Any]) -> list[str]:
    return [str(g.get("name")) for g in pod["spec"].get("schedulingGates") or []]


def phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def status_of(obj: Mapping[str, Any] | None) -> str:
    """What ``kubectl describe`` shows as autowrap's status of a wrapped object."""
    if obj is None:
        return "(gone)"
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(STATUS_ANNOTATION, ""))


def running_and_released(pods: Sequence[Mapping[str, Any]], count: int) -> bool:
    """``count`` pods, each Running on a node, with no scheduling gate left."""
    return len(pods) == count and all(
        phase(p) == "Running" and not gates(p) and p["spec"].get("nodeName") for p in pods
    )


def diagnosis(cluster: RealCluster, namespace: str, *, lines: int = 30) -> str:
    """What a failed assertion shows: every wrapped object, AppWrapper, Workload and pod of
    ``namespace`` with its state, the namespace's latest Events and the log tail of autowrap's
    running replicas."""
    out = [f"--- namespace {namespace}"]
    for kind in ("jobs.batch.volcano.sh", "appwrappers", "workloads", "pods"):
        done = cluster.kubectl("get", kind, "-n", namespace, "-o", "json")
        if done.returncode != 0:
            out.append(f"{kind}: {done.stderr.strip()}")
            continue
        for obj in json.loads(done.stdout)["items"]:
            meta, status = obj["metadata"], obj.get("status") or {}
            conditions = [f"{c.get('type')}={c.get('status')}({c.get('reason', '')})"
                          for c in status.get("conditions") or []]  # fmt: skip
            state = status.get("phase") or (status.get("state") or {}).get("phase") or ""
            extra = ""
            if kind == "pods":
                extra = f" gates={gates(obj)} node={obj['spec'].get('nodeName')}"
            elif status_of(obj):
                extra = f" status={status_of(obj)!r}"
            deleting = " deleting" if meta.get("deletionTimestamp") else ""
            out.append(f"{kind} {meta['name']} uid={meta['uid'][:8]} {state}{deleting}"
                       f"{extra} {' '.join(conditions)}")  # fmt: skip
    events = cluster.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
    out.append("--- events\n" + "\n".join(events.stdout.splitlines()[-lines:]))
    for replica in cluster.running_replicas():
        out.append(f"--- {replica.name}\n{cluster.log_tail(replica.name, lines)}")
    return "\n".join(out)


def delete_everything(cluster: RealCluster, namespace: str, *, timeout: float = 120.0) -> None:
    """Delete the namespace's batch and Volcano Jobs, Pods and AppWrappers, wait until none of them and
    no Workload is left (nothing stranded holds quota for the next test), then the namespace
    itself, without waiting for the namespace controller."""
    for kind in ("jobs.batch", "jobs.batch.volcano.sh", "pods", "appwrappers"):
        cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false")

    def empty() -> bool:
        return all(not listed(cluster, kind, namespace)
                   for kind in ("jobs.batch.volcano.sh", "appwrappers", "workloads", "pods"))  # fmt: skip

    eventually(empty, what=f"namespace {namespace} emptied", timeout=timeout,
               explain=lambda: diagnosis(cluster, namespace))  # fmt: skip
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@contextlib.contextmanager
def scratch_namespace(
    cluster: RealCluster, name: str, *, labels: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Namespace ``name`` with the LocalQueue ``team-queue`` on the ClusterQueue, for one
    test; emptied and deleted afterwards (:func:`delete_everything`)."""
    cluster.add_namespace(name, labels=dict(labels or {}))
    try:
        yield name
    finally:
        delete_everything(cluster, name)


def apply_manifest(
    cluster: RealCluster, obj: Obj, *verb: str, as_user: str = "admin"
) -> subprocess.CompletedProcess[str]:
    """``kubectl <verb> -f -`` (default ``apply``) of ``obj`` as YAML, as a user types it."""
    return cluster.kubectl(*(verb or ("apply",)), "-f", "-", as_user=as_user,
                           input=yaml.safe_dump(obj, sort_keys=False))  # fmt: skip


# -- policies --------------------------------------------------------------------------------


def _policy_reloads(cluster: RealCluster) -> dict[str, float]:
    """``autowrap_policy_reloads_total{result="loaded"}`` of each running replica."""
    counts = {}
    for replica in cluster.running_replicas():
        for line in cluster.autowrap_metrics(replica.name).splitlines():
            if line.startswith('autowrap_policy_reloads_total{result="loaded"}'):
                counts[replica.name] = float(line.rsplit(" ", 1)[1])
    return counts


def _write_policy_entry(cluster: RealCluster, key: str, text: str | None) -> None:
    namespace, name = POLICY_CONFIGMAP
    before = _policy_reloads(cluster)
    done = cluster.kubectl("patch", "configmap", name, "-n", namespace, "--type=merge",
                           "-p", json.dumps({"data": {key: text}}))  # fmt: skip
    assert done.returncode == 0, done.stderr
    cluster.refresh_policies()

    def reloaded() -> bool:
        after = _policy_reloads(cluster)
        return all(after.get(r, 0.0) > count for r, count in before.items())

    eventually(reloaded, what=f"every replica reloading the policies ({key})", timeout=30.0,
               explain=lambda: "\n".join(cluster.log_tail(r.name, 10)
                                         for r in cluster.running_replicas()))  # fmt: skip


@contextlib.contextmanager
def installed_policy(cluster: RealCluster, key: str, document: Obj) -> Iterator[None]:
    """``document`` added to the installed ConfigMap ``autowrap-policies`` as entry ``key``
    (what docs/install.md, "Choosing the policies", has a platform team do), in use by every
    running replica until the end of the block, then removed again."""
    _write_policy_entry(cluster, key, yaml.safe_dump(document, sort_keys=False))
    try:
        yield
    finally:
        _write_policy_entry(cluster, key, None)


def installed_policy_files(cluster: RealCluster, directory: Path) -> Path:
    """The installed policy set written to ``directory``, for ``autowrap render --policy``."""
    namespace, name = POLICY_CONFIGMAP
    config_map = kubectl_json(cluster, "get", "configmap", name, "-n", namespace)
    directory.mkdir(parents=True, exist_ok=True)
    for key, text in (config_map.get("data") or {}).items():
        (directory / key).write_text(text)
    return directory


# -- the env a container runs with -----------------------------------------------------------


def container_env(
    cluster: RealCluster, pod: Mapping[str, Any], container: str | None = None
) -> dict[str, str]:
    """The environment kubelet gives ``container`` (default: the first) of the stored ``pod``:
    ``env`` in order, a later entry replacing an earlier one, ``$(VAR)`` expanded against the
    entries before it, ``fieldRef`` read from the pod, ``configMapKeyRef`` from the cluster
    (Volcano's svc plugin refers to its ConfigMap). ``envFrom`` is not used by these jobs."""
    spec = pod["spec"]
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    chosen = next(c for c in containers if container in (None, c["name"]))
    assert not chosen.get("envFrom"), f"envFrom is not resolved here: {chosen['envFrom']}"
    namespace = pod["metadata"]["namespace"]
    config_maps: dict[str, Obj] = {}
    env: dict[str, str] = {}
    for var in chosen.get("env") or []:
        source = var.get("valueFrom") or {}
        if var.get("value"):
            value = expand(str(var["value"]), env)
        elif "fieldRef" in source:
            value = field_value(pod, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            if ref["name"] not in config_maps:
                config_maps[ref["name"]] = get(cluster, "configmap", ref["name"], namespace) or {}
            value = str((config_maps[ref["name"]].get("data") or {}).get(ref["key"], ""))
        else:
            value = ""
        env[var["name"]] = value
    return env


def render_pods(
    manifest: Obj, *, namespace: str, labels: Mapping[str, str], policies: Path
) -> dict[str, Obj]:
    """``autowrap render --pods -o json`` of ``manifest`` as a user runs it before submitting
    (README, "Your first job", step 3): pod name → its row."""
    path = policies.parent / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    argv = [str(AUTOWRAP_CLI), "render", "--pods", "-o", "json", "--policy", str(policies),
            "-n", namespace, *(a for k, v in labels.items() for a in ("-l", f"{k}={v}")),
            str(path)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    rows = {}
    for workload in json.loads(done.stdout)["workloads"]:
        for row in workload["pods"]:
            rows[str(row["name"])] = row
    return rows


def rendezvous_problems(
    cluster: RealCluster, pods: Sequence[Obj], rows: Mapping[str, Obj], *, containers: bool = True
) -> list[str]:
    """Each way the stored pods' rendezvous env differs from what ``render --pods`` showed
    (``rows``) or from itself: the values of every container (and init container, with
    ``containers``) agree with the row; RANK, NODE_RANK and PET_NODE_RANK are one value,
    distinct across pods and 0..n-1; the PET_ mirrors equal their originals; MASTER_ADDR is
    the rank-0 pod's ``hostname.subdomain``, a headless Service of that subdomain exists."""
    problems: list[str] = []
    if sorted(rows) != sorted(p["metadata"]["name"] for p in pods):
        problems.append(f"pods {sorted(p['metadata']['name'] for p in pods)}, render showed "
                        f"{sorted(rows)}")  # fmt: skip
    ranks: dict[str, Obj] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        row = rows.get(name) or {}
        spec = pod["spec"]
        names = [c["name"] for c in spec["containers"]]
        if containers:
            names += [c["name"] for c in spec.get("initContainers") or []]
        for container in names:
            env = container_env(cluster, pod, container)
            where = f"{name}/{container}"
            missing = [v for v in RENDEZVOUS if v not in env]
            if missing:
                problems.append(f"{where}: no {missing}; env {env}")
                continue
            expected = {"MASTER_ADDR": row.get("masterAddr"), "MASTER_PORT": row.get("masterPort"),
                        "NNODES": row.get("nnodes"), "NPROC_PER_NODE": row.get("nprocPerNode"),
                        "WORLD_SIZE": row.get("worldSize"), "NODE_RANK": row.get("nodeRank"),
                        "LOCAL_WORLD_SIZE": row.get("nprocPerNode")}  # fmt: skip
            expected.update({key: value for key, value in (row.get("expandedEnv") or {}).items()})
            wrong = {k: (env.get(k), v) for k, v in expected.items() if env.get(k) != v}
            if wrong:
                problems.append(f"{where}: (found, rendered) {wrong}")
            mirrors = {"PET_MASTER_ADDR": "MASTER_ADDR", "PET_NNODES": "NNODES",
                       "PET_NPROC_PER_NODE": "NPROC_PER_NODE", "PET_NODE_RANK": "NODE_RANK",
                       "RANK": "NODE_RANK"}  # fmt: skip
            for mirror, original in mirrors.items():
                if env[mirror] != env[original]:
                    problems.append(f"{where}: {mirror}={env[mirror]} but {original}="
                                    f"{env[original]}")  # fmt: skip
            if env["PET_MASTER_PORT"] != row.get("masterPort"):
                problems.append(f"{where}: PET_MASTER_PORT={env['PET_MASTER_PORT']}, rendered "
                                f"{row.get('masterPort')}")  # fmt: skip
            if container == spec["containers"][0]["name"]:
                ranks[env["NODE_RANK"]] = pod
    if sorted(ranks, key=int) != [str(i) for i in range(len(pods))]:
        problems.append(f"node ranks {sorted(ranks)} for {len(pods)} pods")
    master = ranks.get("0")
    if master is not None:
        spec = master["spec"]
        address = f"{spec.get('hostname')}.{spec.get('subdomain')}"
        env = container_env(cluster, master)
        if env.get("MASTER_ADDR") != address:
            problems.append(f"MASTER_ADDR={env.get('MASTER_ADDR')}, the rank-0 pod "
                            f"{master['metadata']['name']} is {address}")  # fmt: skip
        service = get(
            cluster, "service", str(spec.get("subdomain")), master["metadata"]["namespace"]
        )
        if service is None or service["spec"].get("clusterIP") != "None":
            problems.append(f"no headless Service {spec.get('subdomain')}: {service}")
    return problems


def controller_of(obj: Mapping[str, Any] | None) -> Obj | None:
    """The controller ownerReference of ``obj``."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return next((dict(r) for r in refs if r.get("controller")), None)


def workload_of(cluster: RealCluster, namespace: str, appwrapper: Mapping[str, Any]) -> Obj | None:
    """Kueue's Workload for ``appwrapper`` (Kueue labels it with the job's uid)."""
    uid = appwrapper["metadata"]["uid"]
    found = listed(cluster, "workloads", namespace, f"kueue.x-k8s.io/job-uid={uid}")
    return found[0] if found else None


def condition(obj: Mapping[str, Any] | None, kind: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def admitted_pods(workload: Mapping[str, Any] | None) -> int:
    """How many pods Kueue's admission of ``workload`` counts, over all its podSets."""
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    return sum(int(a.get("count") or 0) for a in admission.get("podSetAssignments") or [])


@dataclass(frozen=True)
class Wrapped:
    """A wrapped object seen running: it, its AppWrapper, Kueue's Workload and the pods."""

    obj: Obj
    appwrapper: Obj
    workload: Obj
    pods: list[Obj]


def running_under_kueue(
    cluster: RealCluster,
    namespace: str,
    kind: str,
    name: str,
    count: int,
    *,
    adopted: bool = True,
    timeout: float = 120.0,
    on_poll: Callable[[], None] | None = None,
) -> Wrapped:
    """Wait until ``kind``/``name`` (``vcjob`` or ``pod``) runs as autowrap promises: it is
    controlled by an AppWrapper (``adopted``: autowrap adopted it, label
    ``autowrap.io/adoption=adopted``) whose Workload Kueue admitted, and ``count`` pods run
    released, placed by Kueue (the flavor's nodeSelector), no more of them than Kueue
    admitted. The pods of a Volcano Job are bound by vc-scheduler. ``on_poll`` is called on
    every poll (to sample something while waiting)."""

    def pods_of(obj: Obj) -> list[Obj]:
        if kind == "pod":
            return [obj]
        return job_pods(cluster, namespace, name)

    def seen() -> Wrapped | None:
        if on_poll is not None:
            on_poll()
        obj = get(cluster, kind, name, namespace)
        owner = controller_of(obj)
        if obj is None or owner is None or owner.get("kind") != "AppWrapper":
            return None
        if adopted and (obj["metadata"].get("labels") or {}).get("autowrap.io/adoption") != (
            "adopted"
        ):
            return None
        appwrapper = get(cluster, "appwrapper", str(owner["name"]), namespace)
        if appwrapper is None or appwrapper["metadata"]["uid"] != owner.get("uid"):
            return None
        workload = workload_of(cluster, namespace, appwrapper)
        pods = pods_of(obj)
        if not condition(workload, "Admitted") or not running_and_released(pods, count):
            return None
        assert workload is not None
        return Wrapped(obj, appwrapper, workload, pods)

    found = eventually(seen, what=f"{kind} {namespace}/{name} running {count} pod(s) under "
                       "Kueue's admission", timeout=timeout,
                       explain=lambda: diagnosis(cluster, namespace))  # fmt: skip
    context = diagnosis(cluster, namespace)
    assert admitted_pods(found.workload) == count, context
    for pod in found.pods:
        assert (pod["spec"].get("nodeSelector") or {}).get("cloud.example/pool") == "a100", context
        if kind != "pod":
            assert pod["spec"].get("schedulerName") == "volcano", context
    return found


# -- a record of everything that happened to some objects --------------------------------------


class Watch:
    """Every event of a watch of the collection ``path`` (objects with label ``selector``)
    from the moment the block starts until it ends, read by a thread, as ``events``: first
    the objects listed then (type ``LISTED``), then each watch event in order. A complete
    record, where sampling the objects now and then could miss a state that did not last."""

    def __init__(self, cluster: RealCluster, path: str, *, selector: str = "") -> None:
        self.api = real_apiserver(cluster)
        self.path = path
        self.selector = selector
        self.events: list[Obj] = []
        self._connection: http.client.HTTPSConnection | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        query = {"labelSelector": self.selector} if self.selector else {}
        listed = self.api.request("GET", self.path, query=query).obj
        self.events = [{"type": "LISTED", "object": o} for o in listed.get("items") or []]
        query = {**query, "watch": "true",
                 "resourceVersion": str(listed["metadata"]["resourceVersion"])}  # fmt: skip
        connection = http.client.HTTPSConnection(self.api.host, self.api.port,
                                                 context=self.api.context)  # fmt: skip
        connection.request("GET", f"{self.path}?{urllib.parse.urlencode(query)}",
                           headers={"Accept": "application/json"})  # fmt: skip
        response = connection.getresponse()
        assert response.status == 200, (response.status, response.read()[:2000])
        self._connection = connection
        self._thread = threading.Thread(target=self._read, args=(response,), daemon=True)
        self._thread.start()
        return self

    def _read(self, response: http.client.HTTPResponse) -> None:
        # Ends when __exit__ shuts the connection down under it, whatever that raises here.
        with contextlib.suppress(Exception):
            for line in response:
                if line.strip():
                    self.events.append(json.loads(line))

    def __exit__(self, *exc: object) -> None:
        connection = self._connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(2)
            connection.close()
        if self._thread is not None:
            self._thread.join(timeout=10)


@contextlib.contextmanager
def small_queue(cluster: RealCluster, namespace: str, *, gpus: int) -> Iterator[str]:
    """A LocalQueue in ``namespace`` on a ClusterQueue of its own with ``gpus`` GPUs of quota
    (the launcher's flavor; CPU, memory and pods plenty): a test that needs work to wait in
    Kueue's queue gets it from its own quota, whatever other tests hold of the shared one.
    Yields the LocalQueue's name; the ClusterQueue is deleted afterwards."""
    name = f"{namespace}-cq"
    cluster.admin.apply({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                 "resourceGroups": [{
                     "coveredResources": ["cpu", "memory", "pods", "nvidia.com/gpu"],
                     "flavors": [{"name": "a100", "resources": [
                         {"name": "cpu", "nominalQuota": "64"},
                         {"name": "memory", "nominalQuota": "256Gi"},
                         {"name": "pods", "nominalQuota": "100"},
                         {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}]}]},
    })  # fmt: skip
    cluster.admin.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                         "metadata": {"name": "small", "namespace": namespace},
                         "spec": {"clusterQueue": name}})  # fmt: skip
    try:
        yield "small"
    finally:
        cluster.kubectl("delete", "clusterqueue", name, "--wait=false")
