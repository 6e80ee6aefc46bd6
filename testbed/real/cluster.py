"""The running session as tests use it: kubeconfigs, kubectl, logs, metrics, and autowrap's
replicas, which a test may stop, restart or multiply while the rest of the cluster runs.

A replica is published only once it answers ``/readyz``: then the Service stand-in
(``proxy``) forwards to it and the Deployment counts it; stopping it withdraws both first, as
a terminating pod leaves its Service's endpoints before it exits.
"""

from __future__ import annotations

import functools
import http.client
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.real import autowrap, kubeapi
from testbed.real.processes import Supervisor, free_ports

Obj = dict[str, Any]
QUEUE = "team-queue"
CLUSTER_QUEUE = "cq"
FLAVOR = "a100"
NAMESPACE = "ml"
MALLORY = "mallory"
READY_TIMEOUT = 60.0


def https_status(port: int, path: str, timeout: float = 2.0) -> int:
    """The status of ``GET https://127.0.0.1:<port><path>``, the certificate not checked
    (health endpoints; what the certificate is worth is checked where it matters)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=context)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def add_namespace(
    admin: kubeapi.Api, name: str, *, queue: str = QUEUE, labels: dict[str, str] | None = None
) -> None:
    admin.apply({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": dict(labels or {})}})  # fmt: skip
    admin.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                 "metadata": {"name": queue, "namespace": name},
                 "spec": {"clusterQueue": CLUSTER_QUEUE}})  # fmt: skip


def answers(port: int, path: str) -> bool:
    return https_status(port, path) == 200


@dataclass
class Replica:
    name: str
    port: int
    metrics_port: int


@dataclass
class RealCluster:
    workdir: Path
    supervisor: Supervisor
    admin: kubeapi.Api
    server: str
    kubectl_binary: Path
    kubeconfigs: dict[str, Path]
    autowrap_objects: list[Obj]
    proxy: Any
    webhook_port: int
    timings: dict[str, float] = field(default_factory=dict)
    replicas: dict[str, Replica] = field(default_factory=dict)

    # -- what tests read -------------------------------------------------------------------------

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs["admin"]

    @property
    def mallory_kubeconfig(self) -> Path:
        return self.kubeconfigs[MALLORY]

    @property
    def autowrap_kubeconfig(self) -> Path:
        return self.kubeconfigs["autowrap"]

    def kubectl(
        self, *args: str, as_user: str = "admin", input: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """The built kubectl, as ``as_user`` (a key of :attr:`kubeconfigs`: admin, mallory,
        autowrap, or a controller's identity); never raises on a non-zero exit."""
        argv = [str(self.kubectl_binary), f"--kubeconfig={self.kubeconfigs[as_user]}", *args]
        return subprocess.run(argv, input=input, capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip

    def log_tail(self, component: str, lines: int = 40) -> str:
        return self.supervisor.log_tail(component, lines)

    def apiserver_metrics(self) -> str:
        text: str = self.admin.request("GET", "/metrics", raw=True)
        return text

    # -- namespaces ----------------------------------------------------------------------------

    def add_namespace(
        self, name: str, *, queue: str = QUEUE, labels: dict[str, str] | None = None
    ) -> None:
        """A namespace with a LocalQueue ``queue`` on the ClusterQueue, as the fake clusters
        set theirs up (namespace ``ml``, LocalQueue ``team-queue``, ClusterQueue ``cq``)."""
        add_namespace(self.admin, name, queue=queue, labels=labels)

    # -- autowrap's replicas ---------------------------------------------------------------------

    def refresh_policies(self) -> None:
        """Write the installed ConfigMap's policies where the replicas read them (what the
        kubelet does for a mounted ConfigMap; they reload on change)."""
        found = self.admin.get(f"/api/v1/namespaces/{autowrap.NAMESPACE}/configmaps/"
                               f"{autowrap.POLICY_CONFIGMAP}")  # fmt: skip
        if found is None:
            raise RuntimeError(f"ConfigMap {autowrap.NAMESPACE}/{autowrap.POLICY_CONFIGMAP} "
                               "is not installed")  # fmt: skip
        autowrap.write_policies(found, self.workdir / "autowrap" / "policies")

    def start_autowrap(self, replicas: int = 1, timeout: float = READY_TIMEOUT) -> list[str]:
        """Start replicas until ``replicas`` run; each is published once ``/readyz`` answers
        200. Returns the names of the replicas started."""
        self.refresh_policies()
        started = []
        index = 0
        while len(self.running_replicas()) < replicas:
            name = f"autowrap-{index}"
            index += 1
            if name in self.replicas and self.supervisor.processes[name].running:
                continue
            self._start_replica(name)
            started.append(name)
        for name in started:
            port = self.replicas[name].port
            self.supervisor.wait(name, functools.partial(answers, port, "/readyz"),
                                 timeout=timeout, what="ready (/readyz 200)")  # fmt: skip
        self._publish()
        return started

    def _start_replica(self, name: str) -> None:
        port, metrics_port = free_ports(2)
        directory = self.workdir / "autowrap" / name
        certs = directory / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        argv = autowrap.serve_argv(self.autowrap_objects, name, port=port, metrics_port=metrics_port,
                                   cert_dir=certs, policy_dir=self.workdir / "autowrap" / "policies",
                                   kubeconfig=self.autowrap_kubeconfig)  # fmt: skip
        self.supervisor.start(name, argv, env=autowrap.serve_env(self.autowrap_objects, name),
                              cwd=autowrap.REPO)  # fmt: skip
        self.replicas[name] = Replica(name, port, metrics_port)

    def running_replicas(self) -> list[Replica]:
        return [r for name, r in self.replicas.items() if self.supervisor.processes[name].running]

    def stop_autowrap(self, replica: str | None = None, timeout: float = 30.0) -> None:
        """Stop one replica (by name) or all: withdrawn from the Service first, then SIGTERM,
        which the server answers with its graceful drain."""
        names = [replica] if replica else [r.name for r in self.running_replicas()]
        stopping = set(names)
        self._publish(excluding=stopping)
        for name in names:
            self.supervisor.stop(name, timeout=timeout)

    def _publish(self, excluding: frozenset[str] | set[str] = frozenset()) -> None:
        """Route the Service stand-in to the live replicas and scale the Deployment to their
        number (autowrap.py says why), waiting until its status says so."""
        live = [r for r in self.running_replicas() if r.name not in excluding]
        self.proxy.set_backends([r.port for r in live])
        path = f"/apis/apps/v1/namespaces/{autowrap.NAMESPACE}/deployments/{autowrap.SERVICE}"
        self.admin.request("PATCH", f"{path}/scale", {"spec": {"replicas": len(live)}},
                           content_type="application/merge-patch+json")  # fmt: skip

        def settled() -> bool:
            status = (self.admin.get(path) or {}).get("status") or {}
            return all(int(status.get(k) or 0) == len(live) for k in ("replicas", "readyReplicas"))

        self.supervisor.wait("kube-controller-manager", settled, timeout=READY_TIMEOUT,
                             what=f"scaling Deployment {autowrap.SERVICE} to {len(live)}")  # fmt: skip

    def autowrap_metrics(self, replica: str = "autowrap-0") -> str:
        port = self.replicas[replica].metrics_port
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5.0)
        try:
            connection.request("GET", "/metrics")
            return connection.getresponse().read().decode()
        finally:
            connection.close()
