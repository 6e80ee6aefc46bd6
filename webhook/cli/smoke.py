"""``autowrap doctor --smoke NAMESPACE``: one tiny job through the whole chain, stage by stage.

It submits a CPU-only Volcano Job of two pods (master and worker) and a bare Pod, each labelled
for the namespace's LocalQueue, and follows each through the stages adopt mode goes through, each
with its own deadline: admission prepared it (the gate, the labels, the env), the controller
created the AppWrapper, Kueue created its Workload, Kueue admitted it (or Kueue's own reason why
not), the pods were released with Kueue's placement, they run, and each pod's rank env equals
what ``autowrap render --pods`` computes offline for the stored object (``webhook.cli.podview``:
one code path). The first stage that does not happen within its deadline is reported with what
was seen instead, and the run stops there. Whatever it created is deleted at the end, also when
it is interrupted (Ctrl-C, cancellation).

Waiting is list-then-watch on the namespace, never sleeps; every call is the user's own
(``kube.SMOKE_CALLS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from webhook.cli import podview, status
from webhook.cli.doctor import FAIL, OK, WARN, Finding
from webhook.core import adoption, ports
from webhook.model import names, objects
from webhook.model.objects import as_list, as_map
from webhook.shell.kube import APPWRAPPERS, PODS, VOLCANO_JOBS, WORKLOADS, Api, Kind

Obj = Mapping[str, Any]

CALL_TIMEOUT = 15.0
# Redirect mode's denial (webhook/admission.py, _redirect_message).
REDIRECTED = re.compile(r"was wrapped into AppWrapper [^/\s]+/([^\s;(]+)")
RANK_ENV = ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "WORLD_SIZE")
T = TypeVar("T")


@dataclass(frozen=True)
class Deadlines:
    """Seconds each stage may take (admission and pods depend on the cluster's load)."""

    appwrapper: float = 30.0
    workload: float = 30.0
    admitted: float = 120.0
    released: float = 60.0
    running: float = 180.0

    def capped(self, seconds: float) -> Deadlines:
        """Every stage given at most ``seconds`` (``--smoke-deadline``)."""
        return Deadlines(*(min(getattr(self, f), seconds) for f in self.__dataclass_fields__))


def _container(name: str) -> Obj:
    return {
        "name": "main",
        "image": "busybox:1.36",
        "command": ["sh", "-c", 'echo "node $NODE_RANK of $NNODES, master $MASTER_ADDR:'
                    '$MASTER_PORT"; sleep 30'],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "10m", "memory": "16Mi"}},
    }  # fmt: skip


def volcano_job(name: str, namespace: str, queue: str) -> Obj:
    """Two pods, CPU only: one master, one worker."""

    def task(task_name: str) -> Obj:
        return {"name": task_name, "replicas": 1,
                "template": {"spec": {"restartPolicy": "Never",
                                      "containers": [_container(name)]}}}  # fmt: skip

    return {
        "apiVersion": VOLCANO_JOBS.api_version,
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.QUEUE_LABEL: queue, "app.kubernetes.io/part-of": "autowrap-doctor"},
        },  # fmt: skip
        "spec": {"schedulerName": "volcano", "tasks": [task("master"), task("worker")]},
    }


def bare_pod(name: str, namespace: str, queue: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                names.WRAP_LABEL: "true",
                names.QUEUE_LABEL: queue,
                "app.kubernetes.io/part-of": "autowrap-doctor",
            },
        },  # fmt: skip
        "spec": {"restartPolicy": "Never", "containers": [_container(name)]},
    }


class StageFailed(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.found)
        self.finding = finding


@dataclass
class Run:
    """One smoke run: what it created (to delete) and what it found."""

    api: Api
    namespace: str
    deadlines: Deadlines = field(default_factory=Deadlines)
    say: Callable[[Finding], None] = lambda finding: None
    # What to delete: (kind, name, uid), the uid so that only this run's object goes.
    created: list[tuple[Kind, str, str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def _ok(self, check: str, found: str) -> None:
        finding = Finding("smoke", check, OK, found)
        self.findings.append(finding)
        self.say(finding)

    def _stop(self, check: str, found: str, fix: str) -> StageFailed:
        return StageFailed(Finding("smoke", check, FAIL, found, fix))

    async def _until(
        self, kind: Kind, check: Callable[[dict[str, Obj]], T | None], seconds: float,
        labels: str = "",
    ) -> tuple[T | None, dict[str, Obj]]:  # fmt: skip
        """List the namespace's objects of ``kind``, then follow a watch until ``check`` of the
        objects by name answers something, or ``seconds`` pass: (the answer or None, what was
        seen last)."""
        seen: dict[str, Obj] = {}
        end = time.monotonic() + seconds
        try:
            async with asyncio.timeout(seconds):
                while True:
                    listed = await self.api.list(kind, self.namespace, timeout=CALL_TIMEOUT,
                                                 labels=labels)  # fmt: skip
                    seen = {objects.name_of(o): o for o in as_list(listed.get("items"))}
                    version = str(as_map(listed.get("metadata")).get("resourceVersion") or "")
                    if (answer := check(seen)) is not None:
                        return answer, seen
                    with contextlib.suppress(ports.Gone):
                        async for event, obj in self.api.watch(
                            kind, self.namespace, resource_version=version, labels=labels,
                            timeout_seconds=max(1, int(end - time.monotonic()) + 1),
                        ):  # fmt: skip
                            if event == "BOOKMARK":
                                continue
                            if event == "DELETED":
                                seen.pop(objects.name_of(obj), None)
                            else:
                                seen[objects.name_of(obj)] = obj
                            if (answer := check(seen)) is not None:
                                return answer, seen
        except TimeoutError:
            pass
        return None, seen

    async def _create(self, kind: Kind, obj: Obj) -> Obj:
        created = await self.api.create(kind, self.namespace, obj, timeout=CALL_TIMEOUT)
        self.created.append((kind, objects.name_of(obj), _uid(created)))
        return created

    # --- the stages ------------------------------------------------------------------------------

    async def follow(self, label: str, kind: Kind, obj: Obj, pods: int) -> None:
        """Submit ``obj`` and follow it to its running pods; raises :class:`StageFailed`."""
        name = objects.name_of(obj)
        try:
            stored: Obj | None = await self._create(kind, obj)
        except ports.ApiFailure as exc:
            redirected = REDIRECTED.search(exc.message)
            if redirected is None:
                raise self._stop(f"{label}-mutated", f"{label} {self.namespace}/{name}: the "
                                 f"create was refused: {exc.message}",
                                 "read the message: it names the field or the missing "
                                 "piece") from None  # fmt: skip
            stored = None
            self.created.append((APPWRAPPERS, redirected.group(1), ""))
            self._ok(f"{label}-mutated", f"{label}: redirect mode (the namespace's policy, or "
                     "its ClusterQueue): the create was denied by design and AppWrapper "
                     f"{redirected.group(1)} stands in its place")  # fmt: skip
        if stored is not None:
            self._mutated(label, stored)
        aw_name = (adoption.appwrapper_name_of(stored) if stored else "") or name
        aw = await self._appwrapper(label, aw_name)
        # Adopt: deleted with the object by autowrap's controller, and by this run too, should
        # that be down. Redirect: the only thing this run made; now known by its uid.
        self.created = [c for c in self.created if c[:2] != (APPWRAPPERS, aw_name)]
        self.created.insert(0, (APPWRAPPERS, aw_name, _uid(aw)))
        workload = await self._workload(label, aw)
        await self._admitted(label, aw, workload)
        released = await self._released(label, aw, pods)
        await self._running(label, aw_name, released, pods)
        await self._rank_env(label, kind, name)

    def _mutated(self, label: str, stored: Obj) -> None:
        check = f"{label}-mutated"
        labels = objects.labels_of(stored)
        templates = [as_map(t) for t in _templates(stored)]
        gated = all(
            names.ADMISSION_GATE in [as_map(g).get("name") for g in
                                     as_list(as_map(t.get("spec")).get("schedulingGates"))]
            for t in templates
        )  # fmt: skip
        env = {
            str(as_map(e).get("name"))
            for t in templates
            for c in as_list(as_map(t.get("spec")).get("containers"))
            for e in as_list(as_map(c).get("env"))
        }
        missing = [n for n in ("MASTER_ADDR", "MASTER_PORT", "NNODES") if n not in env]
        adopting = labels.get(names.ADOPTION_LABEL) == names.ADOPTION_PENDING
        if not (adopting and gated and not missing):
            what = []
            if not adopting:
                what.append(f"no label {names.ADOPTION_LABEL}={names.ADOPTION_PENDING}")
            if not gated:
                what.append(f"no scheduling gate {names.ADMISSION_GATE}")
            if missing:
                what.append(f"no {', '.join(missing)} in the env")
            raise self._stop(check, f"{label} {self.namespace}/{objects.name_of(stored)} was "
                             f"stored unprepared ({'; '.join(what)}): autowrap's mutating "
                             "webhook did not run on it",
                             "check the webhook configuration autowrap-mutating and its "
                             "namespaceSelector (the checks above), and that the policy covering "
                             "this namespace is in Adopt mode")  # fmt: skip
        self._ok(check, f"{label}: stored with the gate {names.ADMISSION_GATE}, "
                 f"{names.ADOPTION_LABEL}={names.ADOPTION_PENDING} and the rendezvous env")  # fmt: skip

    async def _appwrapper(self, label: str, aw_name: str) -> Obj:
        aw, _ = await self._until(APPWRAPPERS, lambda seen: seen.get(aw_name),
                                  self.deadlines.appwrapper)  # fmt: skip
        if aw is None:
            raise self._stop(f"{label}-appwrapper", f"no AppWrapper {aw_name} after "
                             f"{self.deadlines.appwrapper:.0f}s: autowrap's controller did not "
                             "adopt it",
                             f"autowrap status {'pod' if label == 'pod' else 'vcjob'}/"
                             f"{aw_name} -n {self.namespace} shows its status annotation and "
                             "Events; the lease check above says whether a controller leads")  # fmt: skip
        self._ok(f"{label}-appwrapper", f"AppWrapper {aw_name} created")
        return aw

    async def _workload(self, label: str, aw: Obj) -> Obj:
        def owned(seen: dict[str, Obj]) -> Obj | None:
            return status.workload_of(aw, list(seen.values()))

        workload, _ = await self._until(WORKLOADS, owned, self.deadlines.workload)
        if workload is None:
            raise self._stop(f"{label}-workload", f"Kueue made no Workload for AppWrapper "
                             f"{objects.name_of(aw)} within {self.deadlines.workload:.0f}s",
                             "Kueue does not manage AppWrappers: see the "
                             "kueue-appwrapper-integration check above")  # fmt: skip
        self._ok(f"{label}-workload", f"Kueue Workload {objects.name_of(workload)} created")
        return workload

    async def _admitted(self, label: str, aw: Obj, workload: Obj) -> None:
        wl_name = objects.name_of(workload)

        def admitted(seen: dict[str, Obj]) -> dict[str, Any] | None:
            current = seen.get(wl_name)
            report = status.workload_report(current) if current else None
            return report if report and report["admitted"] else None

        report, seen = await self._until(WORKLOADS, admitted, self.deadlines.admitted)
        if report is None:
            last = seen.get(wl_name)
            why = status.workload_report(last)["whyNotAdmitted"] if last else "it is gone"
            raise self._stop(f"{label}-admitted", f"Workload {wl_name} not admitted within "
                             f"{self.deadlines.admitted:.0f}s: {why}",
                             "Kueue's reason above: quota in the ClusterQueue, a stopped queue, "
                             "or the admission-gated-by hold still on the AppWrapper "
                             "(AdmissionGatedBy check)")  # fmt: skip
        flavors = ", ".join(report["flavors"]) or "no flavor"
        self._ok(f"{label}-admitted", f"admitted to ClusterQueue {report['clusterQueue']} "
                 f"({flavors})")  # fmt: skip

    async def _released(self, label: str, aw: Obj, pods: int) -> list[Obj]:
        aw_name = objects.name_of(aw)
        selector = f"{names.APPWRAPPER_LABEL}={aw_name}"

        def released(seen: dict[str, Obj]) -> list[Obj] | None:
            found = [p for p in seen.values() if not adoption.is_terminating(p)]
            ungated = [p for p in found if status.pod_state(p) != "gated"]
            return ungated if len(found) >= pods and len(ungated) == len(found) else None

        got, seen = await self._until(PODS, released, self.deadlines.released, selector)
        if got is None:
            states = sorted(f"{objects.name_of(p)} {status.pod_state(p)}" for p in seen.values())
            raise self._stop(f"{label}-released", f"pods of {aw_name} not all released within "
                             f"{self.deadlines.released:.0f}s (expected {pods}; seen: "
                             f"{', '.join(states) or 'none'})",
                             f"autowrap status appwrapper/{aw_name} -n {self.namespace}")  # fmt: skip
        current = await self.api.get(APPWRAPPERS, self.namespace, aw_name, timeout=CALL_TIMEOUT)
        wanted = _placements(current or aw)
        misplaced = [objects.name_of(p) for p in got if wanted and not any(
            w.items() <= as_map(as_map(p.get("spec")).get("nodeSelector")).items()
            for w in wanted)]  # fmt: skip
        if misplaced:
            raise self._stop(f"{label}-released", f"pods {', '.join(misplaced)} were released "
                             f"without Kueue's placement (nodeSelector {wanted})",
                             "report this: autowrap's release copies Kueue's podSetInfos")  # fmt: skip
        selector_text = ", ".join(f"{k}={v}" for k, v in sorted((wanted or [{}])[0].items()))
        where = f"nodeSelector {selector_text}" if selector_text else "no node constraints"
        self._ok(f"{label}-released", f"{len(got)} pod(s) released with Kueue's placement "
                 f"({where})")  # fmt: skip
        return got

    async def _running(self, label: str, aw_name: str, released: list[Obj], pods: int) -> None:
        selector = f"{names.APPWRAPPER_LABEL}={aw_name}"

        def running(seen: dict[str, Obj]) -> list[Obj] | None:
            states = [status.pod_state(p) for p in seen.values()]
            done = [p for p in seen.values() if status.pod_state(p) in ("running", "succeeded")]
            return done if len(done) >= pods and "failed" not in states else None

        got, seen = await self._until(PODS, running, self.deadlines.running, selector)
        if got is None:
            states = sorted(f"{objects.name_of(p)} {status.pod_state(p)}" for p in seen.values())
            raise self._stop(f"{label}-running", f"pods not running within "
                             f"{self.deadlines.running:.0f}s ({', '.join(states)})",
                             f"kubectl -n {self.namespace} describe pods -l {selector}")  # fmt: skip
        self._ok(f"{label}-running", f"{len(got)} pod(s) running")

    async def _rank_env(self, label: str, kind: Kind, name: str) -> None:
        stored = await self.api.get(kind, self.namespace, name, timeout=CALL_TIMEOUT)
        listed = await self.api.list(PODS, self.namespace, timeout=CALL_TIMEOUT)
        live = {objects.name_of(p): p for p in as_list(listed.get("items"))}
        rows = podview.pods(stored or {}, self.namespace)
        if not rows:
            raise self._stop(f"{label}-rank-env", f"{label} {self.namespace}/{name} is gone, or "
                             "makes no pods: nothing to compare",
                             "check whether something else deleted it")  # fmt: skip
        wrong = rank_env_differences(rows, live)
        if wrong:
            raise self._stop(f"{label}-rank-env", "the pods' rank env differs from `autowrap "
                             f"render --pods`: {'; '.join(wrong)}",
                             "report this with both outputs: the pod webhook and the offline "
                             "rendering run the same code")  # fmt: skip
        shown = ", ".join(f"{r.pod} NODE_RANK={r.node_rank}" for r in rows)
        self._ok(f"{label}-rank-env", f"as rendered offline: {shown}")

    # --- clean-up ------------------------------------------------------------------------------

    async def clean_up(self) -> list[str]:
        """Delete what this run created (its AppWrappers follow, as for any deleted object);
        what could not be deleted is returned."""
        left = []
        for kind, name, uid in reversed(self.created):
            try:
                await self.api.delete(
                    kind, self.namespace, name, timeout=CALL_TIMEOUT, uid=uid or None
                )
            except ports.Conflict:
                continue  # another object of that name now: not this run's
            except ports.ApiFailure as exc:
                left.append(f"{kind.kind} {self.namespace}/{name}: {exc.message}")
        return left


def rank_env_differences(rows: list[podview.PodRow], live: Mapping[str, Obj]) -> list[str]:
    """Where a running pod's rank env (its first container's, resolved as kubelet does) differs
    from the row ``autowrap render --pods`` computes for it offline."""
    wrong = []
    for row in rows:
        pod = live.get(row.pod)
        if pod is None:
            wrong.append(f"{row.pod}: no such pod")
            continue
        containers = as_list(as_map(pod.get("spec")).get("containers"))
        env, _ = podview.resolve_env(pod, as_map(containers[0])) if containers else ({}, [])
        offline = {"NODE_RANK": row.node_rank, "MASTER_ADDR": row.master_addr,
                   "MASTER_PORT": row.master_port, "NNODES": row.nnodes,
                   "WORLD_SIZE": row.world_size}  # fmt: skip
        for key in RANK_ENV:
            got = env.get(key)
            shown = podview.NOT_SET if got is None else (got or podview.UNKNOWN)
            if offline[key] != shown:
                wrong.append(f"{row.pod} {key}={shown} (rendered offline: {offline[key]})")
    return wrong


def _uid(obj: Obj) -> str:
    return str(as_map(obj.get("metadata")).get("uid") or "")


def _templates(obj: Obj) -> list[Any]:
    if obj.get("kind") == "Pod":
        return [obj]
    return [as_map(t).get("template") for t in as_list(as_map(obj.get("spec")).get("tasks"))]


def _placements(aw: Obj) -> list[dict[str, Any]]:
    """The nodeSelector Kueue gave each podSet of the AppWrapper (its podSetInfos)."""
    return [
        dict(as_map(as_map(info).get("nodeSelector")))
        for component in as_list(as_map(aw.get("spec")).get("components"))
        for info in as_list(as_map(component).get("podSetInfos"))
    ]


def choose_queue(local_queues: list[Obj], namespace: str, default: str | None) -> str | None:
    """The policy's default queue where it exists in the namespace, else its only queue."""
    here = sorted(objects.name_of(q) for q in local_queues
                  if as_map(q.get("metadata")).get("namespace") == namespace)  # fmt: skip
    if default and default in here:
        return default
    return here[0] if here else None


async def run(
    api: Api, namespace: str, queue: str, *, deadlines: Deadlines | None = None,
    say: Callable[[Finding], None] = lambda finding: None,
) -> list[Finding]:  # fmt: skip
    """The whole smoke test; always deletes what it created, even when cancelled."""
    suffix = secrets.token_hex(3)
    smoke = Run(api, namespace, deadlines or Deadlines(), say)
    try:
        for label, kind, obj, pods in (
            ("vcjob", VOLCANO_JOBS, volcano_job(f"autowrap-smoke-{suffix}", namespace, queue), 2),
            ("pod", PODS, bare_pod(f"autowrap-smoke-pod-{suffix}", namespace, queue), 1),
        ):
            try:
                await smoke.follow(label, kind, obj, pods)
            except StageFailed as stop:
                smoke.findings.append(stop.finding)
                say(stop.finding)
                break
            except ports.ApiFailure as exc:
                finding = Finding("smoke", label, FAIL, f"{exc.call}: {exc.message}",
                                  "check your rights in the namespace (kubectl auth can-i)")  # fmt: skip
                smoke.findings.append(finding)
                say(finding)
                break
    finally:
        left = await smoke.clean_up()
        if left:
            finding = Finding("smoke", "clean-up", WARN, "not deleted: " + "; ".join(left),
                              "delete them by hand (kubectl delete)")  # fmt: skip
            smoke.findings.append(finding)
            say(finding)
    return smoke.findings


def summary(findings: list[Finding]) -> Mapping[str, Any]:
    return {"stages": [f.as_json() for f in findings if f.section == "smoke"]}
