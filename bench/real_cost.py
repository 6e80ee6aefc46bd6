"""What autowrap costs a real control plane: ``python -m bench.real_cost [--jobs N]``.

On the real control plane of ``testbed.real`` (kube-apiserver, Kueue, the AppWrapper
controller, Volcano, KWOK nodes, autowrap served from the host), bursts of N one-pod workloads
are created at once (one ``kubectl create -f`` of N documents) and followed until every pod
runs. Each burst reports:

* the time from the create until every pod is Running;
* CPU seconds per process (utime + stime from ``/proc/<pid>/stat``, whole process groups),
  and per workload;
* kube-apiserver's own view of every admission webhook it called
  (``apiserver_admission_webhook_admission_duration_seconds``: count, mean, p50 and p99
  interpolated from the histogram's buckets as ``histogram_quantile`` does);
* API requests the apiserver served (``apiserver_request_total``) and those autowrap made
  (``autowrap_kube_api_request_duration_seconds_count``), per workload, by verb and resource.

The bursts: with autowrap's webhook configurations removed (the baseline), unlabelled Volcano
Jobs and Pods, and AppWrappers written by hand the way a user without autowrap submits them;
with autowrap installed, the same unlabelled ones (what autowrap costs work it leaves alone),
labelled Volcano Jobs and labelled Pods in adopt mode, and the same in redirect mode (a policy
added for their namespaces). ``--burst NAME`` runs only the bursts named. Each burst also
reports autowrap's peak memory (VmHWM over the replica's processes). The figures are printed and written as
JSON (``--out``); docs/performance.md keeps them. Timings are measured here, never asserted by
a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testbed.real import launcher
from testbed.real.cluster import RealCluster

Obj = dict[str, Any]
TICKS = os.sysconf("SC_CLK_TCK")
RUNNING_DEADLINE = 900.0
WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$"
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Small enough that 500 fit on the four KWOK nodes (32 cpu, 140 pods each) and in the quota.
SMALL: Obj = {"limits": {"cpu": "100m", "memory": "64Mi"}}


# --- what a burst creates ---------------------------------------------------------------------


# A labelled workload names its LocalQueue (the installed default policy gives none).
WRAPPED = {"autowrap.io/wrap": "true", "kueue.x-k8s.io/queue-name": "team-queue"}


def volcano_job(name: str, namespace: str, *, labelled: bool) -> Obj:
    labels = dict(WRAPPED) if labelled else {}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [{
            "name": "worker", "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "trainer", "image": "torch:2.4", "command": ["torchrun", "train.py"],
                "resources": SMALL}]}}}]},
    }  # fmt: skip


def pod(name: str, namespace: str, *, labelled: bool) -> Obj:
    labels = dict(WRAPPED) if labelled else {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "torch:2.4",
            "resources": SMALL}]},
    }  # fmt: skip


def handwritten(name: str, namespace: str, *, queue: str) -> Obj:
    """An AppWrapper as a user without autowrap writes it: the Volcano Job inside, labelled for
    Kueue, with the podSet declared."""
    job = volcano_job(name, namespace, labelled=False)
    del job["metadata"]["namespace"]
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"components": [{"template": job, "podSets": [
            {"path": "template.spec.tasks[0].template", "replicas": 1}]}]},
    }  # fmt: skip


# --- what is measured -----------------------------------------------------------------------------


def cpu_seconds(cluster: RealCluster) -> dict[str, float]:
    """CPU used so far by each supervised process's group (a replica's workers included)."""
    out: dict[str, float] = {}
    for name, process in cluster.supervisor.processes.items():
        if not process.running:
            continue
        group = os.getpgid(process.popen.pid)
        total = 0.0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group:  # pgrp
                total += (int(fields[11]) + int(fields[12])) / TICKS
        out[name] = total
    return out


def peak_rss_mib(cluster: RealCluster) -> dict[str, float]:
    """Each running autowrap replica's peak memory: VmHWM summed over its process group (the
    serving process and the controller process share the container's limit)."""
    out: dict[str, float] = {}
    for replica in cluster.running_replicas():
        group = os.getpgid(cluster.supervisor.processes[replica.name].popen.pid)
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) != group:
                    continue
                status = (entry / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        out[replica.name] = round(total / 1024, 1)
    return out


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or line.startswith("#"):
            continue
        labels = dict(_LABEL.findall(match.group("labels") or ""))
        try:
            found.append((match.group("name"), labels, float(match.group("value"))))
        except ValueError:
            continue
    return found


def _delta(after: float, before: float) -> float:
    return max(after - before, 0.0)


def webhooks(before: str, after: str) -> dict[str, dict[str, float]]:
    """Per webhook name: calls, mean, p50 and p99 seconds during the burst (bucket deltas)."""

    def table(text: str) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = defaultdict(float)
        for name, labels, value in samples(text):
            if not name.startswith(WEBHOOK_METRIC):
                continue
            suffix = name[len(WEBHOOK_METRIC) :]
            out[(labels.get("name", ""), f"{suffix}:{labels.get('le', '')}")] += value
        return out

    old, new = table(before), table(after)
    names = sorted({hook for hook, _ in new})
    result: dict[str, dict[str, float]] = {}
    for hook in names:
        count = _delta(new.get((hook, "_count:"), 0), old.get((hook, "_count:"), 0))
        if not count:
            continue
        total = _delta(new.get((hook, "_sum:"), 0), old.get((hook, "_sum:"), 0))
        buckets = sorted(
            (float(key.split(":", 1)[1]), _delta(value, old.get((h, key), 0)))
            for (h, key), value in new.items()
            if h == hook and key.startswith("_bucket:")
        )
        result[hook] = {"calls": count, "mean_ms": 1000 * total / count,
                        "p50_ms": 1000 * quantile(0.5, buckets),
                        "p99_ms": 1000 * quantile(0.99, buckets)}  # fmt: skip
    return result


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over cumulative buckets (upper bound, count), linear in a bucket."""
    if not buckets:
        return 0.0
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            inside = cumulative - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, cumulative
    return lower


def requests(before: str, after: str, metric: str, keys: tuple[str, ...]) -> dict[str, float]:
    """A counter's growth during the burst, summed by the labels ``keys``."""

    def table(text: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for name, labels, value in samples(text):
            if name == metric:
                out[" ".join(labels.get(k, "") for k in keys)] += value
        return out

    old, new = table(before), table(after)
    return {
        k: _delta(v, old.get(k, 0.0)) for k, v in sorted(new.items()) if _delta(v, old.get(k, 0.0))
    }


# --- a burst ----------------------------------------------------------------------------------------


def running_pods(cluster: RealCluster, namespace: str) -> int:
    listed = cluster.admin.get(f"/api/v1/namespaces/{namespace}/pods") or {}
    return sum(
        1
        for p in listed.get("items") or []
        if (p.get("status") or {}).get("phase") == "Running"
        and not (p.get("spec") or {}).get("schedulingGates")
    )


def burst(
    cluster: RealCluster,
    what: str,
    namespace: str,
    build: Callable[[str, str], Obj],
    count: int,
    *,
    redirected: bool = False,
) -> Obj:
    """``redirected``: each create is answered with redirect mode's denial, which names the
    AppWrapper made for it (kubectl then exits non-zero)."""
    cluster.add_namespace(namespace)
    documents = [build(f"{what}-{i:04d}", namespace) for i in range(count)]
    text = "---\n".join(yaml.safe_dump(d) for d in documents)
    metrics_before = cluster.apiserver_metrics()
    autowrap_before = _autowrap_metrics(cluster)
    cpu_before = cpu_seconds(cluster)
    started = time.monotonic()
    created = cluster.kubectl("create", "-f", "-", input=text, timeout=600)
    created_s = time.monotonic() - started
    wrapped = created.stderr.count("was wrapped into AppWrapper")
    if (created.returncode != 0 and not redirected) or (redirected and wrapped != count):
        raise RuntimeError(f"{what}: kubectl create failed: {created.stderr[-2000:]}")
    deadline = started + RUNNING_DEADLINE
    while running_pods(cluster, namespace) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not every pod ran within {RUNNING_DEADLINE:.0f} s")
        time.sleep(0.25)
    running_s = time.monotonic() - started
    cpu_after = cpu_seconds(cluster)
    metrics_after = cluster.apiserver_metrics()
    autowrap_after = _autowrap_metrics(cluster)
    cpu = {k: round(_delta(v, cpu_before.get(k, 0.0)), 3) for k, v in cpu_after.items()}
    peak = peak_rss_mib(cluster)
    # Emptied before the next burst: the four nodes hold 560 pods.
    for kind in ("jobs.batch.volcano.sh", "appwrappers", "pods"):
        cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false", timeout=600)
    while cluster.admin.get(f"/api/v1/namespaces/{namespace}/pods").get("items"):  # type: ignore[union-attr]
        time.sleep(0.5)
    served = requests(
        metrics_before, metrics_after, "apiserver_request_total", ("verb", "resource")
    )
    autowrap_calls = requests(autowrap_before, autowrap_after,
                              "autowrap_kube_api_request_duration_seconds_count", ("call",))  # fmt: skip
    return {
        "what": what, "count": count, "create_s": round(created_s, 2),
        "all_running_s": round(running_s, 2), "cpu_s": cpu,
        "cpu_ms_per_workload": {k: round(1000 * v / count, 2) for k, v in cpu.items()},
        "autowrap_peak_rss_mib": peak,
        "webhooks": {k: {m: round(v, 2) for m, v in f.items()}
                     for k, f in webhooks(metrics_before, metrics_after).items()},
        "apiserver_requests_per_workload": {k: round(v / count, 2) for k, v in served.items()},
        "autowrap_calls_per_workload": {k: round(v / count, 2) for k, v in autowrap_calls.items()},
    }  # fmt: skip


def _autowrap_metrics(cluster: RealCluster) -> str:
    return "\n".join(cluster.autowrap_metrics(r.name) for r in cluster.running_replicas())


class _Progress(list[Obj]):
    """The bursts so far, written out after each one (a later burst that fails keeps them)."""

    def __init__(self, out: Path | None) -> None:
        super().__init__()
        self.out = out

    def append(self, burst: Obj) -> None:
        super().append(burst)
        print(json.dumps(burst), flush=True)
        if self.out is not None:
            self.out.write_text(json.dumps({"bursts": list(self)}, indent=2) + "\n")


# --- autowrap's webhooks out and back -------------------------------------------------------------

CONFIGURATIONS = (("mutatingwebhookconfiguration", "autowrap-mutating"),
                  ("validatingwebhookconfiguration", "autowrap-validating"))  # fmt: skip


def remove_webhooks(cluster: RealCluster) -> list[Obj]:
    saved = []
    for kind, name in CONFIGURATIONS:
        found = cluster.kubectl("get", kind, name, "-o", "json")
        if found.returncode != 0:
            raise RuntimeError(found.stderr)
        obj = json.loads(found.stdout)
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            obj["metadata"].pop(key, None)
        saved.append(obj)
        cluster.kubectl("delete", kind, name)
    return saved


def restore_webhooks(cluster: RealCluster, saved: list[Obj]) -> None:
    for obj in saved:
        done = cluster.kubectl("create", "-f", "-", input=json.dumps(obj))
        if done.returncode != 0:
            raise RuntimeError(done.stderr)


# Each burst: what it creates, and whether it is redirected (a policy in Redirect mode for its
# namespace); the baseline's run with autowrap's webhooks removed.
BASELINE: dict[str, Callable[[str, str], Obj]] = {
    "base-jobs": lambda n, ns: volcano_job(n, ns, labelled=False),
    "base-pods": lambda n, ns: pod(n, ns, labelled=False),
    "handwritten": lambda n, ns: handwritten(n, ns, queue="team-queue"),
}
INSTALLED: dict[str, Callable[[str, str], Obj]] = {
    "unlabelled-jobs": lambda n, ns: volcano_job(n, ns, labelled=False),
    "unlabelled-pods": lambda n, ns: pod(n, ns, labelled=False),
    "adopt-jobs": lambda n, ns: volcano_job(n, ns, labelled=True),
    "adopt-pods": lambda n, ns: pod(n, ns, labelled=True),
    "redirect-jobs": lambda n, ns: volcano_job(n, ns, labelled=True),
    "redirect-pods": lambda n, ns: pod(n, ns, labelled=True),
}
BURSTS = (*BASELINE, *INSTALLED)
POLICY_KEY = "zz-bench-redirect.yaml"


def redirect_policy(namespaces: list[str]) -> Obj:
    return {"apiVersion": "autowrap.io/v1alpha1", "kind": "Policy",
            "metadata": {"name": "bench-redirect"},
            "spec": {"namespaces": {"names": namespaces}, "wrap": "OptIn",
                     "mode": "Redirect"}}  # fmt: skip


def _policy_loads(cluster: RealCluster) -> float:
    return sum(v for name, labels, v in samples(_autowrap_metrics(cluster))
               if name == "autowrap_policy_reloads_total" and labels.get("result") == "loaded")  # fmt: skip


def install_redirect_policy(cluster: RealCluster, namespaces: list[str]) -> None:
    """The bench's redirect namespaces in Redirect mode, in the installed ConfigMap, loaded by
    every replica."""
    before = _policy_loads(cluster)
    text = yaml.safe_dump(redirect_policy(namespaces), sort_keys=False)
    done = cluster.kubectl("patch", "configmap", "autowrap-policies", "-n", "autowrap-system",
                           "--type=merge", "-p", json.dumps({"data": {POLICY_KEY: text}}))  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    cluster.refresh_policies()
    deadline = time.monotonic() + 60
    while _policy_loads(cluster) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError("the redirect policy was not loaded within 60 s")
        time.sleep(0.5)


def run(count: int, out: Path | None = None, only: tuple[str, ...] = BURSTS) -> Obj:
    results: list[Obj] = _Progress(out)
    with launcher.launch() as cluster:
        if any(b in BASELINE for b in only):
            saved = remove_webhooks(cluster)
            try:
                time.sleep(2.0)  # the apiserver's webhook configuration cache follows a watch
                for what, build in BASELINE.items():
                    if what in only:
                        results.append(burst(cluster, what, f"bench-{what}", build, count))
            finally:
                restore_webhooks(cluster, saved)
            time.sleep(2.0)
        redirected = [f"bench-{b}" for b in only if b.startswith("redirect-")]
        if redirected:
            install_redirect_policy(cluster, redirected)
        for what, build in INSTALLED.items():
            if what in only:
                results.append(burst(cluster, what, f"bench-{what}", build, count,
                                     redirected=what.startswith("redirect-")))  # fmt: skip
    return {"jobs": count, "bursts": results}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.real_cost", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100, help="workloads per burst (default 100)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument(
        "--burst",
        action="append",
        choices=BURSTS,
        dest="bursts",
        help="run only this burst (repeatable; default: all of them)",
    )
    args = parser.parse_args()
    figures = run(args.jobs, args.out, tuple(args.bursts or BURSTS))
    text = json.dumps(figures, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
