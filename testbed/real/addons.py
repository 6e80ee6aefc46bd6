"""Kueue, the AppWrapper controller and Volcano on the host: what each installs, its
configuration and its command line.

Each runs with a token of the ServiceAccount its own install creates and binds (the names
deploy/base/controller-identities.yaml lists), so the apiserver authorizes it by the RBAC its
project ships and autowrap's rules see the usernames they were written for. Every listener is on
127.0.0.1 with a port of its own, except the AppWrapper webhook, whose ``:9443`` is fixed in its
``cmd/main.go`` (so Kueue's webhook moves elsewhere).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.real import helm, manifests

Obj = dict[str, Any]
KUEUE_NS = "kueue-system"
KUEUE_SA = "kueue-controller-manager"
KUEUE_WEBHOOK = "kueue-webhook-service"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
# Where Kueue's releases publish the manager image (its Makefile's IMAGE_REGISTRY for a release).
KUEUE_IMAGE = "registry.k8s.io/kueue/kueue"
# Kueue reads its metrics certificate from this fixed path when it does not manage certificates.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
KUEUE_FRAMEWORKS = ("batch/job", "workload.codeflare.dev/appwrapper")
APPWRAPPER_NS = "appwrapper-system"
APPWRAPPER_SA = "appwrapper-controller-manager"
APPWRAPPER_WEBHOOK = "appwrapper-webhook-service"
APPWRAPPER_WEBHOOK_PORT = 9443
APPWRAPPER_SECRET = "appwrapper-webhook-server-cert"
APPWRAPPER_DEPLOYMENT = "appwrapper-controller-manager"
VOLCANO_NS = "volcano-system"
VOLCANO_RELEASE = "volcano"
VOLCANO_WEBHOOK = f"{VOLCANO_RELEASE}-admission-service"
VOLCANO_CHART = "installer/helm/chart/volcano"
VOLCANO_TEMPLATES = ("controllers.yaml", "scheduler.yaml", "admission.yaml", "webhooks.yaml",
                     "vcjob_editor_role.yaml", "vcjob_viewer_role.yaml")  # fmt: skip
VOLCANO_CRDS = ("config/crd/volcano/bases", "config/crd/jobflow/bases")


def service_host(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc"


# -- Kueue -------------------------------------------------------------------------------------


def kueue_objects(kubectl: Path, source: Path, webhook_port: int, ca_pem: bytes) -> list[Obj]:
    """Kueue's ``config/default`` as ``kubectl kustomize`` renders it: CRDs (with the
    conversion webhook its kustomization patches in), RBAC, webhooks, served from the host."""
    rendered = manifests.kustomize(kubectl, source / "config" / "default")
    kept = manifests.select(rendered)
    return manifests.serve_from_host(kept, {f"{KUEUE_WEBHOOK}.{KUEUE_NS}": webhook_port}, ca_pem)


def kueue_deployment(kubectl: Path, source: Path, version: str) -> Obj:
    """Kueue's Deployment as its release manifest ships it: the image its releases publish,
    tagged with the version that runs on the host, and the feature gate it runs with."""
    rendered = manifests.kustomize(kubectl, source / "config" / "default")
    gates = [
        a for a in kueue(Path("/manager"), Path("/config.yaml")) if a.startswith("--feature-gates")
    ]
    return released(rendered, KUEUE_DEPLOYMENT, f"{KUEUE_IMAGE}:{version}", gates)


def released(rendered: list[Obj], name: str, image: str, extra_args: list[str]) -> Obj:
    """The Deployment ``name`` of a rendered install, with ``image`` and ``extra_args``.

    Its process runs on the host, so its pod is KWOK's (Running, ready, doing nothing); what
    it is there for is what a user's cluster shows about the controller: its Deployment, the
    version in its image's tag, its arguments and a ready replica (what ``autowrap doctor``
    reads, as ``kubectl get deployments`` does)."""
    deployment = copy.deepcopy(next(o for o in rendered if o["kind"] == "Deployment"
                                    and o["metadata"]["name"] == name))  # fmt: skip
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["image"] = image
    container["args"] = [*(container.get("args") or []),
                         *(a for a in extra_args if a not in (container.get("args") or []))]  # fmt: skip
    deployment["spec"]["replicas"] = 1
    return deployment


def kueue_config(*, webhook_port: int, cert_dir: Path, health: int, metrics: int) -> Obj:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": KUEUE_NS,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }  # fmt: skip


def kueue_config_map(config: Obj) -> Obj:
    """``kueue-manager-config`` holding the configuration Kueue runs with (what doctor reads)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": KUEUE_NS},
            "data": {"controller_manager_config.yaml": yaml.safe_dump(config)}}  # fmt: skip


def kueue(binary: Path, config: Path) -> list[str]:
    # The on-demand visibility server would bind a port of its own and wants an APIService.
    return [str(binary), f"--config={config}", "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=info"]  # fmt: skip


# -- AppWrapper --------------------------------------------------------------------------------


def appwrapper_objects(kubectl: Path, source: Path) -> list[Obj]:
    """The AppWrapper controller's ``config/default``: CRD, RBAC, webhooks and the empty Secret
    its certificate rotator fills (it also writes the webhooks' caBundle itself)."""
    rendered = manifests.kustomize(kubectl, source / "config" / "default")
    kept = manifests.select(rendered, manifests.INSTALL_KINDS | {"Secret"})
    hosted = {f"{APPWRAPPER_WEBHOOK}.{APPWRAPPER_NS}": APPWRAPPER_WEBHOOK_PORT}
    return manifests.serve_from_host(kept, hosted)


def appwrapper_deployment(kubectl: Path, source: Path, version: str) -> Obj:
    """The AppWrapper controller's Deployment as its release ships it (its image tagged with
    the version that runs on the host)."""
    rendered = manifests.kustomize(kubectl, source / "config" / "default")
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    image = str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])
    return released(rendered, APPWRAPPER_DEPLOYMENT, f"{image.rsplit(':', 1)[0]}:{version}", [])


def appwrapper_config(*, tmpdir: Path, health: int, metrics: int) -> Obj:
    """``appwrapper-operator-config``: its one key. controller-runtime serves the certificate
    from ``$TMPDIR/k8s-webhook-server/serving-certs`` whatever the config says, so the rotator
    is pointed there too."""
    config = {
        "controllerManager": {"health": {"bindAddress": f"127.0.0.1:{health}"},
                              "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
                              "leaderElection": False},
        "certManagement": {"certificateDir": str(tmpdir / "k8s-webhook-server" / "serving-certs")},
    }  # fmt: skip
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "appwrapper-operator-config", "namespace": APPWRAPPER_NS},
            "data": {"config.yaml": yaml.safe_dump(config)}}  # fmt: skip


def appwrapper(binary: Path) -> list[str]:
    return [str(binary), "--zap-log-level=info"]


# -- Volcano -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VolcanoPorts:
    webhook: int
    webhook_health: int
    controllers_health: int
    controllers_metrics: int
    scheduler_health: int
    scheduler_metrics: int


def volcano_objects(source: Path, webhook_port: int, ca_pem: bytes) -> list[Obj]:
    """Volcano's CRDs (``config/crd``) and, from its chart's templates with the chart's default
    values, the ServiceAccounts, RBAC and webhook configurations, served from the host."""
    crds = manifests.load(sorted(p for d in VOLCANO_CRDS for p in (source / d).glob("*.yaml")))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VOLCANO_NS}}
    chart = helm.chart_objects(source / VOLCANO_CHART, VOLCANO_TEMPLATES,
                               manifests.INSTALL_KINDS, release=VOLCANO_RELEASE,
                               namespace=VOLCANO_NS)  # fmt: skip
    hosted = {f"{VOLCANO_WEBHOOK}.{VOLCANO_NS}": webhook_port}
    return [namespace, *crds, *manifests.serve_from_host(chart, hosted, ca_pem)]


def volcano_deployments(source: Path, version: str) -> list[Obj]:
    """Volcano's three Deployments as its release install (``installer/volcano-development.yaml``,
    what ``kubectl apply`` users apply) ships them, each image tagged with the version that
    runs on the host."""
    objs = manifests.load([source / "installer" / "volcano-development.yaml"])
    out = []
    for obj in objs:
        if obj.get("kind") != "Deployment":
            continue
        image = str(obj["spec"]["template"]["spec"]["containers"][0]["image"])
        out.append(
            released(objs, obj["metadata"]["name"], f"{image.rsplit(':', 1)[0]}:{version}", [])
        )
    return out


def volcano_values(source: Path) -> Obj:
    values: Obj = yaml.safe_load((source / VOLCANO_CHART / "values.yaml").read_text())
    return values


def volcano_controllers(binary: Path, kubeconfig: Path, ports: VolcanoPorts) -> list[str]:
    return [
        str(binary), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
        "--enable-healthz=true", f"--healthz-address=127.0.0.1:{ports.controllers_health}",
        "--enable-metrics=true", f"--listen-address=127.0.0.1:{ports.controllers_metrics}",
        "--logtostderr",
    ]  # fmt: skip


def volcano_scheduler(
    binary: Path, kubeconfig: Path, source: Path, ports: VolcanoPorts
) -> list[str]:
    values = volcano_values(source)
    conf = source / VOLCANO_CHART / values["basic"]["scheduler_config_file"]
    return [
        str(binary), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
        f"--scheduler-conf={conf}", "--cache-dumper=false",
        "--enable-healthz=true", f"--healthz-address=127.0.0.1:{ports.scheduler_health}",
        "--enable-metrics=true", f"--listen-address=127.0.0.1:{ports.scheduler_metrics}",
        "--logtostderr",
    ]  # fmt: skip


def volcano_webhook_manager(
    binary: Path,
    kubeconfig: Path,
    source: Path,
    ports: VolcanoPorts,
    certs: tuple[Path, Path, Path],
) -> list[str]:
    """``certs``: CA, serving certificate, key. It patches the CA into its configurations."""
    values = volcano_values(source)
    ca, cert, key = certs
    conf = source / VOLCANO_CHART / values["basic"]["admission_config_file"]
    url = f"https://{service_host(VOLCANO_WEBHOOK, VOLCANO_NS)}:{ports.webhook}"
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        f"--enabled-admission={values['custom']['enabled_admissions']}",
        f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", f"--ca-cert-file={ca}",
        f"--admission-conf={conf}", f"--webhook-url={url}",
        "--listen-address=127.0.0.1", f"--port={ports.webhook}",
        "--enable-healthz=true", f"--healthz-address=127.0.0.1:{ports.webhook_health}",
        "--logtostderr",
    ]  # fmt: skip


def volcano_identities() -> dict[str, str]:
    """Process name → the chart's ServiceAccount it runs as."""
    return {
        "vc-controller-manager": f"{VOLCANO_RELEASE}-controllers",
        "vc-scheduler": f"{VOLCANO_RELEASE}-scheduler",
        "vc-webhook-manager": f"{VOLCANO_RELEASE}-admission",
    }
