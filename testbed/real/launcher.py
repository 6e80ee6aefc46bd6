"""Bring the real control plane up for one session, and down again whatever happens.

``launch()`` starts, on 127.0.0.1 only and in a temporary directory: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, KWOK with four GPU nodes, Kueue, the AppWrapper
controller, Volcano's three processes and autowrap (installed from ``deploy/``, served from
the host), then a ResourceFlavor, a ClusterQueue and namespace ``ml`` with its LocalQueue, as
the fake clusters have them. Each step waits for what it needs and no longer; a component that
does not come up within its deadline fails the launch with its own log tail. Everything is
stopped on the way out, including on Ctrl-C or an error.

``python -m testbed.real up`` does the same for a person and waits for Ctrl-C.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import functools
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from testbed.real import (
    addons,
    autowrap,
    build,
    controlplane,
    hosts,
    kubeapi,
    manifests,
    objects,
    processes,
)
from testbed.real.cluster import (
    MALLORY,
    NAMESPACE,
    RealCluster,
    add_namespace,
    answers,
)
from testbed.real.objects import cluster_queue, probe_appwrapper, probe_vcjob, resource_flavor
from testbed.real.pki import Authority, service_account_keys
from testbed.real.processes import ComponentError, Supervisor, free_ports, port_free
from testbed.real.proxy import ServiceProxy

Obj = dict[str, Any]
NEEDED = ("kubernetes", "etcd", "kwok", "kueue", "appwrapper", "volcano")
DEADLINE = 60.0
SERVICE_NAMES = (
    addons.service_host(autowrap.SERVICE, autowrap.NAMESPACE),
    addons.service_host(addons.KUEUE_WEBHOOK, addons.KUEUE_NS),
    addons.service_host(addons.APPWRAPPER_WEBHOOK, addons.APPWRAPPER_NS),
    addons.service_host(addons.VOLCANO_WEBHOOK, addons.VOLCANO_NS),
)
PORT_NAMES = (
    "etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kueue-webhook",
    "kueue-health", "kueue-metrics", "appwrapper-health", "appwrapper-metrics",
    "volcano-webhook", "volcano-webhook-health", "volcano-controllers-health",
    "volcano-controllers-metrics", "volcano-scheduler-health", "volcano-scheduler-metrics",
    "autowrap-webhook",
)  # fmt: skip


class MissingBinaries(RuntimeError):
    """Some upstream component is not built yet."""


def missing_binaries() -> list[str]:
    return [name for name in NEEDED if not build.components()[name].built()]


class Launch:
    """One bring-up: the steps in order, each timed into ``timings``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}
        components = build.components()
        self.bin = {name: components[name] for name in NEEDED}
        self.kubectl = self.bin["kubernetes"].binary("kubectl")
        self.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        for directory in ("logs", "pki", "kubeconfigs", "etc", "autowrap"):
            (workdir / directory).mkdir(parents=True, exist_ok=True)
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY", ""), "127.0.0.1",
                                          "localhost", ".svc"]))  # fmt: skip
        self.supervisor = Supervisor(workdir / "logs",
                                     {**os.environ, "NO_PROXY": no_proxy, "no_proxy": no_proxy})  # fmt: skip
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.kubeconfigs: dict[str, Path] = {}
        self.pool = ThreadPoolExecutor(max_workers=8)

    def mark(self, step: str) -> None:
        self.timings[step] = round(time.monotonic() - self.started, 1)

    # -- steps ---------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Certificates, the sources' renderings (in the background) and the host names."""
        if not port_free(addons.APPWRAPPER_WEBHOOK_PORT):
            raise ComponentError(f"appwrapper: port {addons.APPWRAPPER_WEBHOOK_PORT}, fixed in "
                                 "its cmd/main.go, is taken (another session running?)")  # fmt: skip
        self.sources = {name: self.pool.submit(build.source_dir, self.bin[name])
                        for name in ("kueue", "appwrapper", "volcano", "kwok")}  # fmt: skip
        pki = self.workdir / "pki"
        self.ca = Authority()
        ca_cert, ca_key = self.ca.pair.write(pki, "ca")
        serving = self.ca.serving(controlplane.APISERVER_NAMES, controlplane.APISERVER_IPS)
        cert, key = serving.write(pki, "apiserver")
        sa_key, sa_pub = service_account_keys(pki)
        self.pki = controlplane.Pki(ca_cert, ca_key, cert, key, sa_key, sa_pub)
        for name, user, groups in (("admin", "kubernetes-admin", ["system:masters"]),
                                   ("controller-manager", "system:kube-controller-manager", []),
                                   ("scheduler", "system:kube-scheduler", []),
                                   (MALLORY, MALLORY, [])):  # fmt: skip
            c, k = self.ca.client(user, groups).write(pki, name)
            self.kubeconfigs[name] = kubeapi.write_kubeconfig(
                self.workdir / "kubeconfigs" / f"{name}.kubeconfig", self.server, ca_cert,
                kubeapi.Credentials(cert=c, key=k),
                namespace=NAMESPACE if name == MALLORY else "default",
            )  # fmt: skip
        self.admin = kubeapi.Api(self.server, ca_cert, kubeapi.Credentials(
            cert=pki / "admin.crt", key=pki / "admin.key"))  # fmt: skip
        hosts.ensure(SERVICE_NAMES)
        hosts.unreachable(controlplane.POD_CIDR)
        self.renders = {
            "kueue": self.pool.submit(lambda: addons.kueue_objects(
                self.kubectl, self.sources["kueue"].result(), self.ports["kueue-webhook"],
                self.ca.cert_pem)),
            "appwrapper": self.pool.submit(lambda: addons.appwrapper_objects(
                self.kubectl, self.sources["appwrapper"].result())),
            "volcano": self.pool.submit(lambda: addons.volcano_objects(
                self.sources["volcano"].result(), self.ports["volcano-webhook"],
                self.ca.cert_pem)),
            "autowrap": self.pool.submit(autowrap.render, self.ports["autowrap-webhook"]),
            "deployments": self.pool.submit(lambda: [
                addons.kueue_deployment(self.kubectl, self.sources["kueue"].result(),
                                        self.bin["kueue"].version),
                addons.appwrapper_deployment(self.kubectl, self.sources["appwrapper"].result(),
                                             self.bin["appwrapper"].version),
                *addons.volcano_deployments(self.sources["volcano"].result(),
                                            self.bin["volcano"].version)]),
        }  # fmt: skip
        self.mark("prepared")

    def control_plane(self) -> None:
        k8s = self.bin["kubernetes"]
        sup = self.supervisor
        sup.start("etcd", controlplane.etcd(self.bin["etcd"].binary("etcd"), self.workdir / "etcd",
                                            self.ports["etcd"], self.ports["etcd-peer"]))  # fmt: skip
        health = f"http://127.0.0.1:{self.ports['etcd']}/health"
        sup.wait("etcd", lambda: b'"true"' in urllib.request.urlopen(health, timeout=2).read(),
                 timeout=DEADLINE, what="healthy")  # fmt: skip
        self.mark("etcd")
        sup.start(
            "kube-apiserver",
            controlplane.apiserver(
                k8s.binary("kube-apiserver"), self.pki, self.ports["etcd"], self.ports["apiserver"]
            ),
        )
        sup.wait("kube-apiserver",
                 lambda: self.admin.request("GET", "/readyz", raw=True, timeout=5) == "ok",
                 timeout=DEADLINE, what="ready (/readyz)", interval=0.25)  # fmt: skip
        self.mark("kube-apiserver")
        certs = self.workdir / "pki"
        sup.start("kube-controller-manager", controlplane.controller_manager(
            k8s.binary("kube-controller-manager"), self.pki, self.kubeconfigs["controller-manager"],
            self.ports["controller-manager"], certs))  # fmt: skip
        sup.start("kube-scheduler", controlplane.scheduler(
            k8s.binary("kube-scheduler"), self.kubeconfigs["scheduler"], self.ports["scheduler"],
            certs))  # fmt: skip
        stages = controlplane.kwok_stages(self.sources["kwok"].result(),
                                          self.workdir / "etc" / "kwok-stages.yaml")  # fmt: skip
        sup.start("kwok", controlplane.kwok(self.bin["kwok"].binary("kwok"),
                                            self.kubeconfigs["admin"], stages))  # fmt: skip
        for index in range(objects.NODES):
            self.admin.apply(controlplane.node(index))

    def install_upstream(self) -> None:
        """Every upstream install at once, then their CRDs established."""
        objs: list[Obj] = []
        for name in ("kueue", "appwrapper", "volcano"):
            objs += self.renders[name].result()
        for group in manifests.stages(objs):
            list(self.pool.map(self.admin.apply, group))
        crds = [o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"]
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        self.supervisor.wait(
            "kube-apiserver",
            lambda: all(kubeapi.condition(self.admin.get(path + n), "Established") for n in crds),
            timeout=DEADLINE, what=f"serving the {len(crds)} upstream CRDs (Established)",
        )  # fmt: skip
        self.mark("upstream installed")

    def token_kubeconfig(self, name: str, namespace: str, account: str) -> Path:
        token = self.admin.token(namespace, account)
        path = self.workdir / "kubeconfigs" / f"{name}.kubeconfig"
        self.kubeconfigs[name] = kubeapi.write_kubeconfig(path, self.server, self.pki.ca,
                                                          kubeapi.Credentials(token=token))  # fmt: skip
        return path

    def controllers(self) -> None:
        sup, p, etc = self.supervisor, self.ports, self.workdir / "etc"
        # Kueue
        kueue_certs = self.workdir / "kueue-certs"
        self.ca.serving([addons.service_host(addons.KUEUE_WEBHOOK, addons.KUEUE_NS)]).write(
            kueue_certs, "tls"
        )
        self.ca.serving(["localhost"]).write(addons.KUEUE_METRICS_CERTS, "tls")
        config = addons.kueue_config(webhook_port=p["kueue-webhook"], cert_dir=kueue_certs,
                                     health=p["kueue-health"], metrics=p["kueue-metrics"])  # fmt: skip
        (etc / "kueue.yaml").write_text(yaml.safe_dump(config))
        self.admin.apply(addons.kueue_config_map(config))
        kubeconfig = self.token_kubeconfig("kueue", addons.KUEUE_NS, addons.KUEUE_SA)
        sup.start("kueue", addons.kueue(self.bin["kueue"].binary("kueue"), etc / "kueue.yaml"),
                  env={"KUBECONFIG": str(kubeconfig)})  # fmt: skip
        # AppWrapper
        tmpdir = self.workdir / "appwrapper-tmp"
        tmpdir.mkdir(exist_ok=True)
        self.admin.apply(addons.appwrapper_config(tmpdir=tmpdir, health=p["appwrapper-health"],
                                                  metrics=p["appwrapper-metrics"]))  # fmt: skip
        kubeconfig = self.token_kubeconfig("appwrapper", addons.APPWRAPPER_NS, addons.APPWRAPPER_SA)
        sup.start("appwrapper", addons.appwrapper(self.bin["appwrapper"].binary("appwrapper")),
                  env={"KUBECONFIG": str(kubeconfig), "NAMESPACE": addons.APPWRAPPER_NS,
                       "TMPDIR": str(tmpdir)})  # fmt: skip
        # Volcano
        vc = self.bin["volcano"]
        source = self.sources["volcano"].result()
        ports = addons.VolcanoPorts(p["volcano-webhook"], p["volcano-webhook-health"],
                                    p["volcano-controllers-health"], p["volcano-controllers-metrics"],
                                    p["volcano-scheduler-health"], p["volcano-scheduler-metrics"])  # fmt: skip
        cert, key = self.ca.serving(
            [addons.service_host(addons.VOLCANO_WEBHOOK, addons.VOLCANO_NS)]
        ).write(self.workdir / "volcano-certs", "tls")
        configs = {}
        for process, account in addons.volcano_identities().items():
            configs[process] = self.token_kubeconfig(account, addons.VOLCANO_NS, account)
        sup.start(
            "vc-controller-manager",
            addons.volcano_controllers(
                vc.binary("vc-controller-manager"), configs["vc-controller-manager"], ports
            ),
        )
        sup.start(
            "vc-scheduler",
            addons.volcano_scheduler(
                vc.binary("vc-scheduler"), configs["vc-scheduler"], source, ports
            ),
        )
        sup.start("vc-webhook-manager", addons.volcano_webhook_manager(
            vc.binary("vc-webhook-manager"), configs["vc-webhook-manager"], source, ports,
            (self.pki.ca, cert, key)))  # fmt: skip
        self.mark("controllers started")

    def install_autowrap(self) -> RealCluster:
        objs = self.renders["autowrap"].result()
        manifest = self.workdir / "etc" / "autowrap-install.yaml"
        manifest.write_text(yaml.safe_dump_all(objs, sort_keys=False))
        cluster = RealCluster(
            workdir=self.workdir, supervisor=self.supervisor, admin=self.admin, server=self.server,
            kubectl_binary=self.kubectl, kubeconfigs=self.kubeconfigs, autowrap_objects=objs,
            proxy=ServiceProxy(self.ports["autowrap-webhook"]),
            webhook_port=self.ports["autowrap-webhook"], timings=self.timings,
        )  # fmt: skip
        applied = cluster.kubectl("apply", "-f", str(manifest))
        if applied.returncode != 0:
            raise ComponentError(f"kubectl apply of autowrap's release failed:\n{applied.stderr}")
        self.token_kubeconfig("autowrap", autowrap.NAMESPACE, autowrap.SERVICE_ACCOUNT)
        self.mark("autowrap installed")
        return cluster

    def queues(self) -> None:
        """The ResourceFlavor and ClusterQueue (created once Kueue's webhooks answer), the
        user namespace with its LocalQueue, and mallory, an editor there."""
        self.supervisor.wait("kueue", lambda: self.admin.apply(resource_flavor()),
                             timeout=DEADLINE, what="answering its webhooks (ResourceFlavor)")  # fmt: skip
        self.admin.apply(cluster_queue())
        # Kueue's, the AppWrapper controller's and Volcano's Deployments, created once Kueue's webhooks
        # (which judge Deployments) answer; their processes run on the host.
        for deployment in self.renders["deployments"].result():
            self.admin.apply(deployment)
        add_namespace(self.admin, NAMESPACE)
        self.admin.apply({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{MALLORY}-edit", "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": MALLORY}],
        })  # fmt: skip
        self.mark("kueue ready, queues")

    def mount_appwrapper_certificate(self) -> bool:
        """What the kubelet does for the AppWrapper pod: its rotator writes the webhook
        certificate into the Secret and waits for the files to appear in its certificate
        directory (a mounted Secret in a cluster). True once written."""
        secret = self.admin.get(f"/api/v1/namespaces/{addons.APPWRAPPER_NS}/secrets/"
                                f"{addons.APPWRAPPER_SECRET}")  # fmt: skip
        data = (secret or {}).get("data") or {}
        if not all(data.get(key) for key in ("ca.crt", "tls.crt", "tls.key")):
            return False
        directory = self.workdir / "appwrapper-tmp" / "k8s-webhook-server" / "serving-certs"
        directory.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            (directory / key).write_bytes(base64.b64decode(value))
        return True

    def readiness(self) -> None:
        sup, admin = self.supervisor, self.admin
        sup.wait("appwrapper", self.mount_appwrapper_certificate, timeout=DEADLINE,
                 what="writing its webhook certificate into its Secret")  # fmt: skip
        sup.wait("appwrapper", lambda: admin.create(probe_appwrapper(), dry_run=True),
                 timeout=DEADLINE, what="answering its webhooks (AppWrapper dry run)")  # fmt: skip
        self.mark("appwrapper ready")
        queue = "/apis/scheduling.volcano.sh/v1beta1/queues/default"
        sup.wait("vc-scheduler",
                 lambda: ((admin.get(queue) or {}).get("status") or {}).get("state") == "Open",
                 timeout=DEADLINE, what="creating the default queue (Open)")  # fmt: skip
        sup.wait("vc-webhook-manager", lambda: admin.create(probe_vcjob(), dry_run=True),
                 timeout=DEADLINE, what="answering its webhooks (Volcano Job dry run)")  # fmt: skip
        self.mark("volcano ready")
        sup.wait("kwok", lambda: self.nodes_ready(),
                 timeout=DEADLINE, what=f"{objects.NODES} nodes Ready without the not-ready taint")  # fmt: skip
        self.mark("nodes ready")
        for deployment in self.renders["deployments"].result():
            namespace, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
            path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
            sup.wait("kube-controller-manager",
                     lambda p=path: ((admin.get(p) or {}).get("status") or {}).get("readyReplicas"),
                     timeout=DEADLINE, what=f"Deployment {namespace}/{name} ready")  # fmt: skip
        self.mark("deployments ready")

    def nodes_ready(self) -> bool:
        listed = self.admin.request("GET", "/api/v1/nodes")
        ready = [n for n in listed["items"] if controlplane.node_ready(n)]
        return len(ready) == objects.NODES

    def health(self) -> None:
        for name, port in (("kube-controller-manager", self.ports["controller-manager"]),
                           ("kube-scheduler", self.ports["scheduler"])):  # fmt: skip
            self.supervisor.wait(name, functools.partial(answers, port, "/healthz"),
                                 timeout=DEADLINE, what="healthy (/healthz)")  # fmt: skip


LOCK_PATH = Path(tempfile.gettempdir()) / "autowrap-real-cluster.lock"


@contextlib.contextmanager
def launch(workdir: Path | None = None, *, replicas: int = 1) -> Iterator[RealCluster]:
    """The whole cluster up, yielded; stopped (and a temporary ``workdir`` removed) on exit."""
    missing = missing_binaries()
    if missing:
        raise MissingBinaries(f"not built: {', '.join(missing)}; run python -m testbed.real build")
    owned = workdir is None
    directory = Path(tempfile.mkdtemp(prefix="autowrap-real-")) if owned else workdir
    assert directory is not None
    run = Launch(directory)
    cluster: RealCluster | None = None
    # One real cluster on a machine at a time: its ports (the AppWrapper webhook's 9443 is
    # fixed) and /etc/hosts names are the machine's. A second session waits its turn.
    lock = open(LOCK_PATH, "w")  # noqa: SIM115 (held for the whole session, closed below)
    fcntl.flock(lock, fcntl.LOCK_EX)
    reaped = processes.reap_leftovers()
    for program in reaped:
        print(f"testbed.real: stopped {program}, left running by an earlier session")
    deadline = time.monotonic() + 15.0
    while reaped and not processes.port_free(addons.APPWRAPPER_WEBHOOK_PORT):
        if time.monotonic() > deadline:  # prepare() then says who holds it
            break
        time.sleep(0.2)
    try:
        run.prepare()
        run.control_plane()
        run.install_upstream()
        run.controllers()
        # Kueue's webhooks (its no-op ones for Deployments and Pods included) fail closed:
        # nothing else is created before they answer.
        run.queues()
        cluster = run.install_autowrap()
        run.health()
        cluster.start_autowrap(replicas)
        run.mark("autowrap ready")
        run.readiness()
        run.mark("ready")
        yield cluster
    finally:
        if cluster is not None:
            cluster.proxy.close()
        run.supervisor.stop_all()
        run.pool.shutdown(wait=False, cancel_futures=True)
        if owned:
            shutil.rmtree(directory, ignore_errors=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops the cluster as Ctrl-C does."""
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.real up",
                                     description="Run the real control plane until Ctrl-C.")  # fmt: skip
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a "
                        "temporary directory, removed at the end)")  # fmt: skip
    parser.add_argument("--replicas", type=int, default=1, help="autowrap replicas (default 1)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = threading.Event()
    try:
        with launch(args.workdir, replicas=args.replicas) as cluster:
            print(f"up in {cluster.timings.get('ready', 0):.1f} s: {cluster.timings}")
            print(f"logs: {cluster.workdir / 'logs'}")
            print(f"export KUBECONFIG={cluster.admin_kubeconfig}")
            print(f"# as mallory (edit in {NAMESPACE}): {cluster.mallory_kubeconfig}")
            print(f"# as autowrap: {cluster.autowrap_kubeconfig}")
            print("Ctrl-C stops everything.", flush=True)
            stop.wait()
    except KeyboardInterrupt:
        print("stopped")
    except (MissingBinaries, ComponentError) as error:
        print(f"testbed.real up: {error}")
        return 1
    return 0
