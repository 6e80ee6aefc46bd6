"""A scheduler plus kubelet for the fake cluster: binds ungated pods, runs them, resolves their env.

What it models, because autowrap's adopt mode depends on it:

* a pod with ``spec.schedulingGates`` is never bound (KEP-3521; Volcano's scheduler skips gated
  tasks too, adopt-mode.md V1 ``job_info.go:272-280``) and gets ``PodScheduled=False``
  ``SchedulingGated``, as kube-scheduler reports it;
* an ungated pod is bound to the first node whose labels hold its ``nodeSelector`` (so Kueue's
  flavor nodeLabels, applied on release, decide placement), then goes ``Running``;
* ``Succeeded``/``Failed`` only when a test says so (:meth:`Kubelet.finish`);
* :func:`resolved_env` computes a container's environment as the kubelet does
  (``pkg/kubelet/kubelet_pods.go`` ``makeEnvironmentVariables`` and
  ``podFieldSelectorRuntimeValue``), so tests can assert the exact per-pod values.

Not modelled: taints (tolerations are accepted, never required), node capacity, affinity,
restarts, probes, service-link env vars, ``resourceFieldRef``.
"""

from __future__ import annotations

import base64
import itertools
import re
from collections.abc import Mapping
from typing import Any

from testbed.apiserver import UserInfo
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import CONFIGMAPS, PODS, SECRETS
from testbed.cluster.store import Store
from testbed.sim.objects import (
    JsonDict,
    Key,
    annotations_of,
    is_deleting,
    labels_of,
    meta,
    now,
    set_condition,
)
from testbed.sim.runtime import Simulator, retry_on_conflict

SCHEDULER = UserInfo(username="system:kube-scheduler", groups=("system:authenticated",))
TERMINAL = ("Succeeded", "Failed")


def node_user(node: str) -> UserInfo:
    return UserInfo(username=f"system:node:{node}", groups=("system:nodes", "system:authenticated"))


class Kubelet(Simulator):
    """Schedules and runs pods on a fixed set of nodes (name → labels)."""

    name = "kubelet"
    primary = PODS

    def __init__(
        self, cluster: FakeCluster, *, nodes: Mapping[str, Mapping[str, str]] | None = None
    ) -> None:
        super().__init__(cluster, SCHEDULER)
        self.nodes = {n: dict(labels) for n, labels in (nodes or {"node-0": {}}).items()}
        self._ips = itertools.count(1)
        cluster.pod_logs = self.log

    def log(self, pod: JsonDict, container: str | None) -> str | None:
        """What ``kubectl logs`` shows for a pod this kubelet started (:func:`container_log`);
        None for one it has not (the apiserver answers that the container is waiting)."""
        if (pod.get("status") or {}).get("phase") not in ("Running", *TERMINAL):
            return None
        return container_log(pod, container, store=self.store)

    async def reconcile(self, key: Key) -> None:
        pod = self.store.get(PODS, *key)
        if pod is None:
            return
        spec = pod.get("spec") or {}
        if is_deleting(pod):
            # The kubelet stops the containers, then confirms with a zero-grace delete; an
            # unbound pod was already removed by the apiserver.
            if spec.get("nodeName") and not meta(pod).get("finalizers"):
                self.writes.append(f"kill pods {key[0]}/{key[1]}")
                await self.cluster.delete(
                    PODS, *key, user=node_user(spec["nodeName"]), grace_period_seconds=0
                )
            return
        if (pod.get("status") or {}).get("phase") in TERMINAL:
            return
        if not spec.get("nodeName"):
            await self._schedule(pod)
        elif (pod.get("status") or {}).get("phase") != "Running":
            await self._start(pod)

    async def _schedule(self, pod: JsonDict) -> None:
        spec = pod.setdefault("spec", {})
        status = pod.setdefault("status", {})
        if spec.get("schedulingGates"):
            # kube-scheduler's PreEnqueue (SchedulingGates plugin) keeps gated pods out of the
            # queue and reports the reason on the pod.
            message = "Scheduling is blocked due to non-empty scheduling gates"
            if set_condition(status, "PodScheduled", False, "SchedulingGated", message):
                await self.update_status(PODS, pod)
            return
        wanted = dict(spec.get("nodeSelector") or {})
        node = next(
            (n for n, labels in self.nodes.items() if wanted.items() <= labels.items()), None
        )
        if node is None:
            message = f"0/{len(self.nodes)} nodes are available: node(s) didn't match Pod's node affinity/selector"
            if set_condition(status, "PodScheduled", False, "Unschedulable", message):
                await self.update_status(PODS, pod)
            return
        # DefaultBinder posts a Binding (framework/plugins/defaultbinder/default_binder.go
        # Bind); the apiserver sets nodeName and PodScheduled=True in that one write
        # (Store.bind). Then the scheduler's "Scheduled" Event (schedule_one.go, bindingCycle).
        namespace, name = meta(pod).get("namespace") or "", meta(pod).get("name") or ""
        self._note("bind", PODS, namespace, name)
        bound = await self.cluster.bind(namespace, name, node, user=SCHEDULER,
                                        uid=meta(pod).get("uid"))  # fmt: skip
        await self.event(bound, "Scheduled", f"Successfully assigned {namespace}/{name} to {node}",
                         component="default-scheduler")  # fmt: skip

    async def _start(self, pod: JsonDict) -> None:
        """The kubelet's status manager, in the two writes a pod whose image is present gets:
        first ``Pending`` with every container waiting ``ContainerCreating``
        (kubelet_pods.go ``convertToAPIContainerStatuses``' default waiting reason), hostIP,
        startTime and the conditions of status/generate.go (Initialized True, Ready and
        ContainersReady False ``ContainersNotReady``, PodReadyToStartContainers False); then,
        once the sandbox and containers run, ``Running`` with podIP, each container running,
        started and ready, and every condition True. Between the two, the Events
        kuberuntime_container.go ``startContainer`` records: Pulled, Created, Started."""
        node = pod["spec"]["nodeName"]
        status = pod.setdefault("status", {})
        containers = [c.get("name") for c in pod["spec"].get("containers") or []]
        images = {c.get("name"): c.get("image") for c in pod["spec"].get("containers") or []}
        user = node_user(node)
        namespace, name = meta(pod).get("namespace"), meta(pod).get("name")
        if not status.get("containerStatuses"):
            nodes = list(self.nodes)
            host_ip = f"192.168.0.{nodes.index(node) + 1 if node in nodes else 250}"
            status.update(phase="Pending", hostIP=host_ip, hostIPs=[{"ip": host_ip}],
                          startTime=now())  # fmt: skip
            unready = f"containers with unready status: [{' '.join(map(str, containers))}]"
            set_condition(status, "PodReadyToStartContainers", False, "")
            set_condition(status, "Initialized", True, "")
            set_condition(status, "Ready", False, "ContainersNotReady", unready)
            set_condition(status, "ContainersReady", False, "ContainersNotReady", unready)
            status["containerStatuses"] = [
                {"name": c, "image": images[c], "imageID": "", "lastState": {}, "ready": False,
                 "restartCount": 0, "started": False,
                 "state": {"waiting": {"reason": "ContainerCreating"}}}
                for c in containers
            ]  # fmt: skip
            self.writes.append(f"create containers of pods {namespace}/{name}")
            await self.cluster.update(PODS, pod, user=user, subresource="status")
            return
        n = next(self._ips)
        ip = f"10.244.{n // 250}.{n % 250 + 1}"
        started = now()
        status.update(phase="Running", podIP=ip, podIPs=[{"ip": ip}])
        for condition in ("PodReadyToStartContainers", "ContainersReady", "Ready"):
            set_condition(status, condition, True, "")
        status["containerStatuses"] = [
            {"name": c, "image": images[c], "imageID": f"docker.io/library/{images[c]}@sha256:0",
             "containerID": f"containerd://{name}-{c}", "lastState": {}, "ready": True,
             "restartCount": 0, "started": True, "state": {"running": {"startedAt": started}}}
            for c in containers
        ]  # fmt: skip
        for c in containers:
            for reason, message in (
                ("Pulled", f'Container image "{images[c]}" already present on machine'),
                ("Created", f"Created container: {c}"),
                ("Started", f"Started container {c}"),
            ):
                await self.event(pod, reason, message, component="kubelet", host=node, user=user)
        self.writes.append(f"run pods {namespace}/{name}")
        await self.cluster.update(PODS, pod, user=user, subresource="status")

    async def finish(
        self, namespace: str, name: str, *, phase: str = "Succeeded", exit_code: int | None = None
    ) -> JsonDict:
        """Terminate a running pod's containers with ``phase`` (the test's "the job ended")."""
        if phase not in TERMINAL:
            raise ValueError(f"phase must be one of {TERMINAL}, not {phase!r}")
        code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)

        async def attempt() -> JsonDict:
            pod = self.store.get(PODS, namespace, name)
            if pod is None or (pod.get("status") or {}).get("phase") != "Running":
                state = pod and pod.get("status")
                raise AssertionError(f"pod {namespace}/{name} is not Running: {state}")
            status = pod["status"]
            status["phase"] = phase
            status["containerStatuses"] = [
                {"name": c.get("name"), "state": {"terminated": {"exitCode": code}}}
                for c in pod["spec"].get("containers") or []
            ]
            set_condition(status, "Ready", False, "PodCompleted")
            node = node_user(pod["spec"]["nodeName"])
            return await self.cluster.update(PODS, pod, user=node, subresource="status")

        return await retry_on_conflict(attempt)

    async def finish_all(
        self, namespace: str, *, labels: Mapping[str, str] | None = None, phase: str = "Succeeded"
    ) -> list[str]:
        """:meth:`finish` every Running pod in ``namespace`` that carries ``labels``."""
        done = []
        for pod in self.store.list(PODS, namespace, labels=dict(labels or {})):
            if (pod.get("status") or {}).get("phase") == "Running":
                await self.finish(namespace, meta(pod)["name"], phase=phase)
                done.append(meta(pod)["name"])
        return done

    def env(self, pod: JsonDict, container: str | None = None) -> dict[str, str]:
        """:func:`resolved_env` with ConfigMaps and Secrets read from the fake cluster."""
        return resolved_env(pod, container, store=self.store)


# -- the environment a container sees ------------------------------------------------------------

_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """podFieldSelectorRuntimeValue, then fieldpath.ExtractFieldPathAsString for metadata.*.

    A subscripted label or annotation that is absent resolves to "" (Go map lookup), not an
    error. Paths the downward API does not support raise ``ValueError``.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    direct = {
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.hostIPs": ",".join(i.get("ip", "") for i in status.get("hostIPs") or []),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(i.get("ip", "") for i in status.get("podIPs") or []),
        "metadata.name": meta(pod).get("name", ""),
        "metadata.namespace": meta(pod).get("namespace", ""),
        "metadata.uid": meta(pod).get("uid", ""),
    }
    if path in direct:
        return str(direct[path] or "")
    if path == "spec.terminationGracePeriodSeconds":
        return str(spec.get("terminationGracePeriodSeconds", 30))
    match = _SUBSCRIPT.match(path)
    if match:
        source = labels_of(pod) if match.group(1) == "labels" else annotations_of(pod)
        return source.get(match.group(2), "")
    raise ValueError(f"unsupported fieldPath {path!r}")


def expand(value: str, mapping: Mapping[str, str]) -> str:
    """third_party/forked/golang/expansion Expand with MappingFuncFor.

    ``$(NAME)`` becomes NAME's value if defined, else stays ``$(NAME)``; ``$$`` is a literal
    ``$``; an unclosed ``$(`` and any other ``$x`` are kept as written.
    """
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch != "$" or i + 1 == len(value):
            out.append(ch)
            i += 1
            continue
        nxt = value[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = value.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
            else:
                name = value[i + 2 : close]
                out.append(mapping.get(name, f"$({name})"))
                i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


_ECHO = re.compile(r"""^\s*echo\s+(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|(\S.*?))\s*$""")
_SHELL_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def container_log(
    pod: Mapping[str, Any], container: str | None = None, *, store: Store | None = None
) -> str:
    """The output of a container whose command is ``sh -c SCRIPT``: each ``echo`` of the
    script, with ``$VAR`` and ``${VAR}`` taken from the environment the kubelet gives it
    (:func:`resolved_env`), as the shell would print it; nothing for any other command (only
    the echo of a smoke test is modelled, not a shell)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    chosen = next((c for c in containers if container in (None, c.get("name"))), None)
    if chosen is None:
        return ""
    command = [str(c) for c in (chosen.get("command") or []) + (chosen.get("args") or [])]
    if (
        len(command) < 3
        or command[0] not in ("sh", "/bin/sh", "bash", "/bin/bash")
        or (command[1] != "-c")
    ):
        return ""
    env = resolved_env(pod, chosen.get("name"), store=store)
    lines = []
    for statement in command[2].split(";"):
        match = _ECHO.match(statement)
        if match is None:
            continue
        double, single, bare = match.groups()
        if single is not None:
            lines.append(single)
            continue
        text = double if double is not None else bare
        lines.append(_SHELL_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), text))
    return "".join(line + "\n" for line in lines)


def _source(store: Store | None, res: Any, namespace: str, name: str) -> JsonDict | None:
    if store is None:
        raise ValueError(f"resolving {res.kind} {namespace}/{name} needs store=")
    return store.get(res, namespace, name)


def _data(obj: JsonDict | None, secret: bool) -> dict[str, str] | None:
    if obj is None:
        return None
    if not secret:
        return dict(obj.get("data") or {})
    data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    return {**data, **(obj.get("stringData") or {})}


def resolved_env(
    pod: Mapping[str, Any], container: str | None = None, *, store: Store | None = None
) -> dict[str, str]:
    """The environment ``container`` (default: the first container) runs with.

    Follows makeEnvironmentVariables: ``envFrom`` first (with ``prefix``), then ``env`` in
    order, a later entry replacing an earlier one; a non-empty ``value`` is expanded against
    the variables defined so far; ``valueFrom`` is resolved from the pod (``fieldRef``) or from
    ConfigMaps/Secrets in ``store``. A missing non-optional reference raises ``LookupError``,
    where the kubelet would refuse to start the container (CreateContainerConfigError).
    """
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    chosen = next((c for c in containers if container in (None, c.get("name"))), None)
    if chosen is None:
        raise LookupError(f"no container {container!r} in pod {meta(pod).get('name')}")
    ns = str(meta(pod).get("namespace") or "")
    env: dict[str, str] = {}
    for source in chosen.get("envFrom") or []:
        secret = "secretRef" in source
        ref = source.get("secretRef") or source.get("configMapRef") or {}
        res = SECRETS if secret else CONFIGMAPS
        data = _data(_source(store, res, ns, ref.get("name", "")), secret)
        if data is None:
            if ref.get("optional"):
                continue
            raise LookupError(f"{res.kind} {ns}/{ref.get('name')} not found")
        for k, v in data.items():
            env[source.get("prefix", "") + k] = v
    for var in chosen.get("env") or []:
        value = var.get("value") or ""
        frm = var.get("valueFrom")
        if value:
            value = expand(value, env)
        elif frm:
            if "fieldRef" in frm:
                value = field_value(pod, frm["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in frm or "secretKeyRef" in frm:
                secret = "secretKeyRef" in frm
                ref = frm.get("secretKeyRef") or frm.get("configMapKeyRef") or {}
                res = SECRETS if secret else CONFIGMAPS
                data = _data(_source(store, res, ns, ref.get("name", "")), secret)
                if data is None or ref.get("key") not in data:
                    if ref.get("optional"):
                        continue
                    raise LookupError(
                        f"key {ref.get('key')} of {res.kind} {ns}/{ref.get('name')} not found"
                    )
                value = data[ref["key"]]
            else:
                raise ValueError(f"env {var.get('name')}: valueFrom {sorted(frm)} is not modelled")
        env[var["name"]] = value
    return env
