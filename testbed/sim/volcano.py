"""Volcano's vcjob controller, its scheduler's enqueue step and its job admission, simulated.

Citations are volcano-sh/volcano @ed72c7c as quoted in shared/reference (adopt-mode.md V1-V5,
volcano.md §2-§3). What adopt mode relies on:

* one PodGroup ``{job}-{uid}`` per Job; pods only once the PodGroup has left ``Pending``
  (``job_controller_actions.go:404-443``). The scheduler's enqueue action moves it to
  ``Inqueue`` (``actions/enqueue/enqueue.go:95-99``); ``auto_enqueue=False`` keeps it Pending
  (a full cluster) until :meth:`Volcano.inqueue`. An Inqueue PodGroup never goes back
  (``framework/session.go:601-613``);
* pods ``{job}-{task}-{i}`` copy the task template's labels, annotations and spec, gates
  included (``job_controller_util.go:46-60`` ``createJobPod``), get Volcano's own labels and
  annotations and a controller ownerReference to the Job, and are created through the fake
  API as Volcano's ServiceAccount, so autowrap's pod webhook runs on them;
* only missing pods are created; existing pods are never compared with the template
  (``job_controller_actions.go:472-501``);
* ``status.state.phase`` stays Pending until running+succeeded+failed ≥ minAvailable
  (``controllers/job/state/pending.go:58-65``);
* the ``svc`` plugin (hostname/subdomain, ``{job}-svc`` ConfigMap, headless Service, host env)
  and the ``env`` plugin (``VK_TASK_INDEX``/``VC_TASK_INDEX``);
* the ``pytorch`` plugin's env and container port, with its flags in the ``--name=value`` form
  (``pytorch.go:91-157``, ``:189-206``), and its ``wait-for-master`` init container (v1.14.1
  ``:208-231``; its script is not Volcano's);
* admission: the frozen-spec UPDATE check (``admit_job.go:239-305``), registered on the cluster
  by :func:`install_webhooks`, and the CREATE defaults of ``mutate_job.go`` as :func:`defaulted`.

Not modelled: lifecycle policies, retries and restarts, bus Commands, the other plugins
(mpi, ssh, tensorflow …), NetworkPolicy, queue capacity and the queue checks of the CREATE webhook, out-of-sync pod
deletion, job TTL, partitions.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from testbed.cluster import poddefaults, podupdate
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import CONFIGMAPS, PODGROUPS, PODS, SERVICES, VCJOBS
from testbed.cluster.store import ApiError
from testbed.sim.objects import (
    JsonDict,
    Key,
    controller_ref,
    is_deleting,
    key_of,
    meta,
)
from testbed.sim.runtime import KeyMapper, Simulator, sa, same_key

CONTROLLER = sa("volcano-system", "volcano-controllers")
SCHEDULER = sa("volcano-system", "volcano-scheduler")
JOB_NAME = "volcano.sh/job-name"
JOB_NAMESPACE = "volcano.sh/job-namespace"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
QUEUE_NAME = "volcano.sh/queue-name"
GROUP_NAME = "scheduling.k8s.io/group-name"
ETC_VOLCANO = "/etc/volcano"


def pod_name(job: str, task: str, index: int) -> str:
    """``PodNameFmt = "%s-%s-%d"`` (``pkg/controllers/job/helpers/helpers.go``)."""
    return f"{job}-{task}-{index}"


def podgroup_name(job: JsonDict) -> str:
    return f"{meta(job)['name']}-{meta(job).get('uid', '')}"


def _owned_by_vcjob(obj: JsonDict) -> Iterable[Key]:
    ns = key_of(obj)[0]
    return [
        (ns, ref["name"])
        for ref in meta(obj).get("ownerReferences") or []
        if ref.get("controller") and ref.get("apiVersion") == VCJOBS.api_version
    ]


def _env_name(task: str) -> str:
    return task.upper().replace("-", "_")


class Volcano(Simulator):
    """The vcjob controller plus the scheduler's enqueue action."""

    name = "volcano"
    primary = VCJOBS

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        auto_enqueue: bool = True,
        hosts_env: bool = True,
        webhooks: bool = True,
    ) -> None:
        super().__init__(cluster, CONTROLLER)
        self.auto_enqueue = auto_enqueue
        self.hosts_env = hosts_env
        """svc's ``--inject-hosts-env`` (default true): VC_<TASK>_HOSTS/NUM from ``{job}-svc``."""
        if webhooks:
            install_webhooks(cluster)

    def sources(self) -> list[tuple[Any, KeyMapper]]:
        return [(VCJOBS, same_key), (PODS, _owned_by_vcjob), (PODGROUPS, _owned_by_vcjob)]

    async def inqueue(self, namespace: str, name: str) -> None:
        """The scheduler's enqueue action admits the Job's PodGroup (``enqueue.go:95-99``)."""
        job = self.store.get(VCJOBS, namespace, name)
        pg = job and self.store.get(PODGROUPS, namespace, podgroup_name(job))
        if pg is None:
            raise LookupError(f"no PodGroup yet for vcjob {namespace}/{name}")
        if (pg.get("status") or {}).get("phase") in ("", None, "Pending"):
            pg.setdefault("status", {})["phase"] = "Inqueue"
            self.writes.append(f"inqueue podgroups {namespace}/{meta(pg)['name']}")
            await self.cluster.update(PODGROUPS, pg, user=SCHEDULER, subresource="status")

    async def reconcile(self, key: Key) -> None:
        job = self.store.get(VCJOBS, *key)
        if job is None or is_deleting(job):
            return  # dependents go with the garbage collector (their ownerReference)
        plugins = (job.get("spec") or {}).get("plugins") or {}
        if "svc" in plugins:
            await self._svc_on_job_add(job, plugins["svc"] or [])
        pg = await self._podgroup(job)
        phase = (pg.get("status") or {}).get("phase") or "Pending"
        if phase == "Pending" and self.auto_enqueue:
            await self.inqueue(*key)
            return  # the PodGroup event brings us back
        if phase != "Pending":
            await self._sync_pods(job)
        await self._status(job, phase)

    # -- PodGroup ----------------------------------------------------------------------------------

    async def _podgroup(self, job: JsonDict) -> JsonDict:
        ns = key_of(job)[0]
        existing = self.store.get(PODGROUPS, ns, podgroup_name(job))
        if existing is not None:
            return existing
        spec = job.get("spec") or {}
        pg = {
            "apiVersion": PODGROUPS.api_version,
            "kind": PODGROUPS.kind,
            "metadata": {
                "name": podgroup_name(job),
                "namespace": ns,
                "labels": dict(meta(job).get("labels") or {}),
                "annotations": dict(meta(job).get("annotations") or {}),
                "ownerReferences": [controller_ref(job)],
            },
            "spec": {
                "minMember": spec.get("minAvailable", 0),
                "minTaskMember": {
                    t.get("name", ""): t.get("minAvailable", t.get("replicas", 0))
                    for t in spec.get("tasks") or []
                },
                "queue": spec.get("queue", "default"),
                **(
                    {"priorityClassName": spec["priorityClassName"]}
                    if spec.get("priorityClassName")
                    else {}
                ),
            },
            "status": {"phase": "Pending"},
        }
        return await self.create(PODGROUPS, pg, ns)

    # -- pods --------------------------------------------------------------------------------------

    async def _sync_pods(self, job: JsonDict) -> None:
        ns, name = key_of(job)
        for index, task in enumerate((job.get("spec") or {}).get("tasks") or []):
            for i in range(int(task.get("replicas") or 0)):
                pname = pod_name(name, task.get("name", ""), i)
                if self.store.get(PODS, ns, pname) is not None:
                    continue  # deleting pods are re-created only once gone
                try:
                    await self.create(PODS, self.job_pod(job, index, i), ns)
                except ApiError as err:
                    if err.status != 409:
                        self.reject(f"create pod {ns}/{pname}", err)

    def job_pod(self, job: JsonDict, task_index: int, index: int) -> JsonDict:
        """``createJobPod`` plus the enabled plugins' ``OnPodCreate``."""
        ns, name = key_of(job)
        spec = job.get("spec") or {}
        task = spec["tasks"][task_index]
        template = copy.deepcopy(task.get("template") or {})
        tmeta = template.get("metadata") or {}
        task_name = task.get("name", "")
        pname = pod_name(name, task_name, index)
        queue = spec.get("queue", "default")
        labels = {
            **(tmeta.get("labels") or {}),
            TASK_INDEX: str(index),
            JOB_NAME: name,
            TASK_SPEC: task_name,
            JOB_NAMESPACE: ns,
            QUEUE_NAME: queue,
        }
        annotations = {
            **(tmeta.get("annotations") or {}),
            TASK_INDEX: str(index),
            TASK_SPEC: task_name,
            GROUP_NAME: podgroup_name(job),
            JOB_NAME: name,
            QUEUE_NAME: queue,
            "volcano.sh/job-version": str((job.get("status") or {}).get("version", 0)),
            "volcano.sh/template-uid": f"{name}-{task_name}",
            "volcano.sh/job-retry-count": str((job.get("status") or {}).get("retryCount", 0)),
        }
        pod_spec: JsonDict = template.get("spec") or {}
        if not pod_spec.get("schedulerName") and spec.get("schedulerName"):
            pod_spec["schedulerName"] = spec["schedulerName"]
        if not pod_spec.get("priorityClassName") and spec.get("priorityClassName"):
            pod_spec["priorityClassName"] = spec["priorityClassName"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pname,
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [controller_ref(job)],
            },
            "spec": pod_spec,
        }
        plugins = spec.get("plugins") or {}
        if "svc" in plugins:
            self._svc_on_pod_create(job, pod)
        if "env" in plugins:
            for c in _all_containers(pod_spec):
                c.setdefault("env", []).extend(
                    {"name": n, "value": str(index)} for n in ("VK_TASK_INDEX", "VC_TASK_INDEX")
                )
        if "pytorch" in plugins:
            _pytorch_on_pod_create(job, task_name, index, pod_spec, plugins["pytorch"] or [])
        return pod

    # -- svc plugin (pkg/controllers/job/plugins/svc) ----------------------------------------------

    def _svc_on_pod_create(self, job: JsonDict, pod: JsonDict) -> None:
        name = meta(job)["name"]
        spec = pod["spec"]
        if not spec.get("hostname"):
            spec["hostname"] = meta(pod)["name"]
        if not spec.get("subdomain"):
            spec["subdomain"] = name
        volume = f"{name}-svc"
        spec.setdefault("volumes", []).append({"name": volume, "configMap": {"name": volume}})
        for c in _all_containers(spec):
            c.setdefault("volumeMounts", []).append({"name": volume, "mountPath": ETC_VOLCANO})
            if self.hosts_env:
                for task in (job.get("spec") or {}).get("tasks") or []:
                    env = _env_name(task.get("name", ""))
                    c.setdefault("env", []).extend(
                        {
                            "name": key,
                            "valueFrom": {"configMapKeyRef": {"name": volume, "key": key}},
                        }
                        for key in (f"VC_{env}_HOSTS", f"VC_{env}_NUM")
                    )

    async def _svc_on_job_add(self, job: JsonDict, args: list[str]) -> None:
        ns, name = key_of(job)
        subdomain_hosts: dict[str, list[str]] = {}
        for task in (job.get("spec") or {}).get("tasks") or []:
            tspec = (task.get("template") or {}).get("spec") or {}
            sub = tspec.get("subdomain") or name
            if tspec.get("hostname"):
                hosts = [f"{tspec['hostname']}.{sub}"]
            else:
                hosts = [
                    f"{pod_name(name, task.get('name', ''), i)}.{sub}"
                    for i in range(int(task.get("replicas") or 0))
                ]
            subdomain_hosts[task.get("name", "")] = hosts
        data: dict[str, str] = {}
        for task, hosts in subdomain_hosts.items():
            data[f"{task.replace('-', '_')}.host"] = "\n".join(hosts)
            data[f"VC_{_env_name(task)}_HOSTS"] = ",".join(hosts)
            data[f"VC_{_env_name(task)}_NUM"] = str(len(hosts))
        owner = [controller_ref(job)]
        if self.store.get(CONFIGMAPS, ns, f"{name}-svc") is None:
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "data": data}
            cm["metadata"] = {"name": f"{name}-svc", "namespace": ns, "ownerReferences": owner}
            await self.create(CONFIGMAPS, cm, ns)
        if self.store.get(SERVICES, ns, name) is None:
            selector = {JOB_NAME: name, JOB_NAMESPACE: ns}
            svc = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": ns, "ownerReferences": owner},
                "spec": {
                    "clusterIP": "None",
                    "selector": selector,
                    "publishNotReadyAddresses": "--publish-not-ready-addresses=true" in args,
                },
            }
            await self.create(SERVICES, svc, ns)

    # -- status ------------------------------------------------------------------------------------

    async def _status(self, job: JsonDict, pg_phase: str) -> None:
        ns, name = key_of(job)
        spec = job.get("spec") or {}
        counts = dict.fromkeys(("pending", "running", "succeeded", "failed"), 0)
        for pod in self.store.list(PODS, ns, labels={JOB_NAME: name}):
            if any(
                r.get("uid") == meta(job).get("uid") for r in meta(pod).get("ownerReferences") or []
            ):
                phase = ((pod.get("status") or {}).get("phase") or "Pending").lower()
                counts[phase] = counts.get(phase, 0) + 1
        total = sum(int(t.get("replicas") or 0) for t in spec.get("tasks") or [])
        min_available = int(spec.get("minAvailable") or 0)
        phase = "Pending"
        done = counts["succeeded"] + counts["failed"]
        if total and done == total:
            # state/running.go: every task finished; enough successes complete the job.
            phase = "Completed" if counts["succeeded"] >= min_available else "Failed"
        elif pg_phase != "Pending" and counts["running"] + done >= min_available:
            phase = "Running"
        status = job.get("status") or {}
        state = {**(status.get("state") or {}), "phase": phase}
        wanted = {**status, **counts, "minAvailable": min_available, "state": state}
        if wanted != status:
            job["status"] = wanted
            await self.update_status(VCJOBS, job)
        if pg_phase != "Pending":
            await self._podgroup_status(job, counts, min_available)

    async def _podgroup_status(self, job: JsonDict, counts: dict[str, int], minimum: int) -> None:
        """The scheduler's session close (framework/session.go ``jobStatus``, written by
        ``job_updater.go``): the PodGroup's running/succeeded/failed counts, and ``Running``
        once enough of its pods run."""
        pg = self.store.get(PODGROUPS, key_of(job)[0], podgroup_name(job))
        if pg is None:
            return
        status = pg.get("status") or {}
        wanted = {**status, "running": counts["running"], "succeeded": counts["succeeded"],
                  "failed": counts["failed"]}  # fmt: skip
        if counts["running"] and counts["running"] + counts["succeeded"] >= minimum:
            wanted["phase"] = "Running"
        if wanted != status:
            pg["status"] = wanted
            self.writes.append(
                f"update status of podgroups {meta(pg).get('namespace')}/{meta(pg)['name']}"
            )
            await self.cluster.update(PODGROUPS, pg, user=SCHEDULER, subresource="status")


def _all_containers(pod_spec: JsonDict) -> list[JsonDict]:
    return [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]


# -- admission (pkg/webhooks/admission/jobs) ------------------------------------------------------

FROZEN_MESSAGE = (
    "job updates may not change fields other than `minAvailable`, "
    "`tasks[*].replicas under spec` and `PriorityClassName`"
)


def _is_vcjob(request: JsonDict) -> bool:
    res = request.get("resource") or {}
    kind = request.get("kind") or {}
    return (res.get("group"), res.get("resource")) == (VCJOBS.group, VCJOBS.plural) or (
        kind.get("group"),
        kind.get("kind"),
    ) == (VCJOBS.group, VCJOBS.kind)


def frozen_spec_denial(request: JsonDict) -> str | None:
    """``validateJobUpdate`` (``admit_job.go:239-305``): after create only ``minAvailable``,
    task ``replicas``/``minAvailable`` and ``priorityClassName`` may change. Removing gates
    from a template is a change too (the comment at ``:279-280``), so gates go per pod."""
    if request.get("operation") != "UPDATE" or not _is_vcjob(request):
        return None
    if request.get("subResource"):
        return None
    old = copy.deepcopy((request.get("oldObject") or {}).get("spec") or {})
    new = copy.deepcopy((request.get("object") or {}).get("spec") or {})
    if len(old.get("tasks") or []) != len(new.get("tasks") or []):
        return "job updates may not add or remove tasks"
    for spec in (old, new):
        for field in ("minAvailable", "priorityClassName"):
            spec.pop(field, None)
        for task in spec.get("tasks") or []:
            task.pop("replicas", None)
            task.pop("minAvailable", None)
    return None if _as_go_compares(old) == _as_go_compares(new) else FROZEN_MESSAGE


def _as_go_compares(spec: Any) -> Any:
    """A JobSpec as ``apiequality.Semantic.DeepEqual`` compares two decoded ones: what the
    typed API cannot tell from absence (an empty string, list or map, false, a struct with
    nothing set) is absence, and a quantity is its value (``1``, ``"1"`` and ``1000m`` are
    one, ``0.5`` and ``500m`` too)."""
    if isinstance(spec, dict):
        out = {}
        for key, value in spec.items():
            if key in ("limits", "requests") and isinstance(value, dict):
                value = {k: poddefaults.quantity_value(v) for k, v in value.items()}
            out[key] = _as_go_compares(value)
        return podupdate.semantic(out)
    if isinstance(spec, list):
        return [_as_go_compares(v) for v in spec]
    return spec


def defaulted(job: JsonDict) -> JsonDict:
    """``mutate_job.go`` on CREATE: queue, schedulerName, maxRetry, task names ``default<i>``,
    task minAvailable = replicas, task maxRetry, job minAvailable = Σ task minAvailable,
    and ``svc`` added for pytorch/mpi/tensorflow/ray, ``ssh`` for mpi."""
    out = copy.deepcopy(job)
    spec = out.setdefault("spec", {})
    spec["queue"] = spec.get("queue") or "default"
    spec["schedulerName"] = spec.get("schedulerName") or "volcano"
    spec["maxRetry"] = spec.get("maxRetry") or 3
    for i, task in enumerate(spec.get("tasks") or []):
        task["name"] = task.get("name") or f"default{i}"
        if task.get("minAvailable") is None:
            task["minAvailable"] = int(task.get("replicas") or 0)
        task["maxRetry"] = task.get("maxRetry") or 3
        tspec = (task.get("template") or {}).get("spec") or {}
        if tspec.get("hostNetwork") and not tspec.get("dnsPolicy"):
            tspec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if not spec.get("minAvailable"):
        spec["minAvailable"] = sum(int(t["minAvailable"]) for t in spec.get("tasks") or [])
    plugins = spec.get("plugins")
    if plugins is not None:
        if {"tensorflow", "mpi", "pytorch", "ray"} & plugins.keys():
            plugins.setdefault("svc", [])
        if "mpi" in plugins:
            plugins.setdefault("ssh", [])
    return out


def create_mutation(request: JsonDict) -> JsonDict | None:
    """Volcano's ``mutatejob.volcano.sh`` on CREATE (``mutate_job.go`` ``createPatch``): the
    defaults of :func:`defaulted`, applied as its JSON patch applies them. ``mutateSpec``
    replaces ``/spec/tasks`` whole when it defaulted anything in a task (a name, a
    ``minAvailable``, a ``maxRetry``), so the tasks are then stored as Go encodes
    ``[]TaskSpec``: a zero ``replicas`` left out (``omitempty``), each template's
    ``metadata`` present, each container's ``resources`` present and its quantities in
    canonical form (``resource.Quantity``, parsed and printed again: no defaulting, so
    ``0.0001`` stays ``100u`` where a Pod stores ``1m``), an empty env ``value`` left out.
    Other Go zero values in a template are not re-encoded here."""
    if request.get("operation") != "CREATE" or not _is_vcjob(request) or request.get("subResource"):
        return None
    job = request.get("object")
    if not isinstance(job, dict):
        return None
    tasks = (job.get("spec") or {}).get("tasks") or []
    out = defaulted(job)
    respelled = any(
        not task.get("name") or task.get("minAvailable") is None or not task.get("maxRetry")
        or ((task.get("template") or {}).get("spec") or {}).get("hostNetwork")
        and not ((task.get("template") or {}).get("spec") or {}).get("dnsPolicy")
        for task in tasks if isinstance(task, dict)
    )  # fmt: skip
    if respelled:
        out["spec"]["tasks"] = [_go_task(t) for t in out["spec"].get("tasks") or []]
    return out if out != job else None


def _go_task(task: JsonDict) -> JsonDict:
    """A TaskSpec as Go's encoding/json writes it back (see :func:`create_mutation`)."""
    out = copy.deepcopy(task)
    if not out.get("replicas"):
        out.pop("replicas", None)
    template = out.setdefault("template", {})
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        for container in _all_containers(template.get("spec") or {}):
            resources = container.setdefault("resources", {})
            for part in ("requests", "limits"):
                if isinstance(resources.get(part), dict):
                    resources[part] = {k: poddefaults.canonical(v, milli=False)
                                       for k, v in resources[part].items()}  # fmt: skip
            for var in container.get("env") or []:
                if isinstance(var, dict) and var.get("value") == "":
                    del var["value"]
    return out


def install_webhooks(cluster: FakeCluster) -> None:
    """Register Volcano's job admission on the fake cluster: the CREATE defaults
    (:func:`create_mutation`, after autowrap's mutating webhooks, as kube-apiserver orders
    ``volcano-admission-service-jobs-mutate`` after ``autowrap-mutating``) and the frozen
    spec of an UPDATE (:func:`frozen_spec_denial`)."""
    cluster.add_mutating_webhook("mutatejob.volcano.sh", create_mutation)
    cluster.add_validating_webhook("validatejob.volcano.sh", frozen_spec_denial)


# -- pytorch plugin (pkg/controllers/job/plugins/distributed-framework/pytorch/pytorch.go) ---------


def _pytorch_on_pod_create(
    job: JsonDict, task: str, index: int, pod_spec: JsonDict, args: list[str]
) -> None:
    """OnPodCreate (:91-146): nothing without the --master task; else MASTER_ADDR, MASTER_PORT,
    WORLD_SIZE (master + worker replicas) and, on master and worker pods, RANK appended to every
    container (not init containers), the port ``pytorchjob-port`` where it is missing, and
    with ``--wait-master-enabled`` an init container ``wait-for-master`` on worker pods."""
    flags = {"master": "master", "worker": "worker", "port": "23456",
             "wait-master-enabled": "false", "wait-master-image": "busybox:1.36.1"}  # fmt: skip
    for arg in args:
        name, _, value = str(arg).lstrip("-").partition("=")
        if name in flags:
            flags[name] = value
    tasks = (job.get("spec") or {}).get("tasks") or []
    master = next((t for t in tasks if t.get("name") == flags["master"]), None)
    if master is None:
        return
    name = meta(job)["name"]
    mspec = (master.get("template") or {}).get("spec") or {}
    host = mspec.get("hostname") or pod_name(name, flags["master"], 0)
    world = sum(int(t.get("replicas") or 0) for t in tasks
                if t.get("name") in (flags["master"], flags["worker"]))  # fmt: skip
    env = [
        {"name": "MASTER_ADDR", "value": f"{host}.{mspec.get('subdomain') or name}"},
        {"name": "MASTER_PORT", "value": flags["port"]},
        {"name": "WORLD_SIZE", "value": str(world)},
    ]
    if task == flags["worker"]:
        env.append({"name": "RANK", "value": str(index + 1)})
        # addWaitForMasterInitContainer (Volcano v1.14.1 pytorch.go:208-231): worker pods only,
        # unless an init container of that name exists; Go's flag takes "true", "1", "t" …
        wanted = flags["wait-master-enabled"].lower() in ("1", "t", "true")
        inits = pod_spec.setdefault("initContainers", [])
        if wanted and not any(c.get("name") == "wait-for-master" for c in inits):
            inits.append({"name": "wait-for-master", "image": flags["wait-master-image"],
                          "command": ["sh", "-c", f"until nc -z {env[0]['value']} "
                                      f"{flags['port']}; do sleep 2; done"]})  # fmt: skip
        if not inits:
            del pod_spec["initContainers"]
    elif task == flags["master"]:
        env.append({"name": "RANK", "value": "0"})
    for c in pod_spec.get("containers") or []:
        c.setdefault("env", []).extend(copy.deepcopy(env))
        if not any(p.get("containerPort") == int(flags["port"]) for p in c.get("ports") or []):
            port = {"name": "pytorchjob-port", "containerPort": int(flags["port"])}
            c.setdefault("ports", []).append(port)
