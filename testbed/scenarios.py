"""Hardening scenarios shared by tests/hardening and ``python -m bench.hardening``.

Each scenario drives the real autowrap server on loopback (the harness's ``Cluster``, or a
``python -m webhook serve`` process) and returns what it observed; the tests assert on small
runs, the bench runs the same code at a larger scale and reports the figures.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import shutil
import socket
import ssl
import string
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from testbed.apiserver import UserInfo
from testbed.cluster.cluster import FakeCluster
from testbed.pki import ServingPki, service_hostname, write_pki
from testbed.policies import in_mode
from testbed.redirect import ALICE, NAMESPACE, QUEUE, REPO, Cluster, pod, vcjob
from webhook.model import names

Obj = dict[str, Any]
SNI = service_hostname()
API_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


# --- building requests -------------------------------------------------------------------------


def gvk(obj: Obj) -> Obj:
    api_version = str(obj.get("apiVersion") or "v1")
    group, _, version = api_version.rpartition("/")
    return {"group": group, "version": version, "kind": str(obj.get("kind") or "")}


def admission_request(
    obj: Obj | None,
    *,
    uid: str | None = None,
    user: UserInfo = ALICE,
    dry_run: bool = False,
    namespace: str = NAMESPACE,
    operation: str = "CREATE",
) -> Obj:
    """The ``request`` of an AdmissionReview as kube-apiserver sends it for ``obj``."""
    source = obj if isinstance(obj, dict) else {}
    kind = gvk(source)
    resource = {"group": kind["group"], "version": kind["version"],
                "resource": kind["kind"].lower() + "s"}  # fmt: skip
    meta = source.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return {
        "uid": uid or str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": name if isinstance(name, str) else "",
        "namespace": namespace,
        "operation": operation,
        "userInfo": user.to_json(),
        "object": obj,
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


def review(request: Obj) -> Obj:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def labelled_vcjob(name: str, *, env_value: str = "v", annotation: str = "") -> Obj:
    job = vcjob(name)
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "APP_TOKEN", "value": env_value}]
    if annotation:
        job["metadata"]["annotations"] = {"team.example.com/note": annotation}
    return job


def labelled_pod(name: str, *, env_value: str = "v", annotation: str = "") -> Obj:
    obj = pod(name)
    obj["spec"]["containers"][0]["env"] = [{"name": "APP_TOKEN", "value": env_value}]
    if annotation:
        obj["metadata"]["annotations"] = {"team.example.com/note": annotation}
    return obj


def plain_pod(name: str) -> Obj:
    """A Pod no policy wraps: answered from the engine alone, without API calls."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}  # fmt: skip


# --- hostile inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    """One request body; ``review_uid`` is set when the body is a well-formed AdmissionReview."""

    label: str
    body: bytes
    content_type: str = "application/json"
    review_uid: str | None = None


_ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 2**63, 1.5e308, -0.0, "", "x" * 5000, "ünïcødé-名前-🚀", "\u202e",
    "a\nb", [], [None], {}, {"": ""}, [[[]]], {"a": {"b": {"c": []}}}, "$(rm -rf /)",
)  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


def _set(root: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return root


def _drop(root: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return root
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return root


def mutate_object(rng: random.Random, obj: Obj, mutations: int) -> Obj:
    """``obj`` with some fields replaced by values of the wrong type, or removed."""
    out = copy.deepcopy(obj)
    for _ in range(mutations):
        paths = [p for p in _paths(out) if p]
        if not paths:
            break
        path = rng.choice(paths)
        if rng.random() < 0.25:
            out = _drop(out, path)
        else:
            out = _set(out, path, copy.deepcopy(rng.choice(_ODD_VALUES)))
    return out


def _random_name(rng: random.Random) -> str:
    alphabet = string.ascii_lowercase + string.digits + "-.ÄéЖ名🚀_ "
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))


def object_cases(rng: random.Random, index: int) -> Hostile:
    """A well-formed AdmissionReview whose object is strange: the answer must be a review."""
    base = rng.choice([labelled_vcjob(f"fz-{index}"), labelled_pod(f"fz-{index}"),
                       plain_pod(f"fz-{index}")])  # fmt: skip
    choice = rng.randrange(6)
    if choice == 0:
        obj = mutate_object(rng, base, rng.randint(1, 6))
    elif choice == 1:
        obj = copy.deepcopy(base)
        obj["metadata"]["name"] = _random_name(rng)
    elif choice == 2:
        obj = copy.deepcopy(base)
        count = rng.choice([500, 5000, 20000])
        env = [{"name": f"E{i}", "value": "v" * rng.randint(0, 20)} for i in range(count)]
        containers = _containers(obj)
        containers[0]["env"] = env
    elif choice == 3:
        obj = copy.deepcopy(base)
        obj["apiVersion"] = rng.choice(["batch.volcano.sh/v9", "example.com/v1", "", "v1beta1"])
        obj["kind"] = rng.choice(["Job", "Pod", "CronJob", "AppWrapper", "Widget", "", "ジョブ"])
    elif choice == 4:
        obj = copy.deepcopy(base)
        nested: Any = "leaf"
        for _ in range(rng.randint(50, 180)):
            nested = {"n": nested} if rng.random() < 0.5 else [nested]
        obj.setdefault("spec", {})["extra"] = nested
    else:
        obj = mutate_object(rng, base, 1)
        obj = obj if isinstance(obj, dict) else {}
        if isinstance(obj.get("metadata"), dict):
            obj["metadata"]["labels"] = {_random_name(rng): _random_name(rng) for _ in range(5)}
    if not isinstance(obj, dict):
        obj = {"value": obj}
    request = admission_request(obj, operation=rng.choice(OPERATIONS))
    return Hostile(f"object-{choice}", encode(review(request)), review_uid=request["uid"])


def _containers(obj: Obj) -> list[Obj]:
    if obj.get("kind") == "Pod":
        containers: list[Obj] = obj["spec"]["containers"]
    else:
        containers = obj["spec"]["tasks"][0]["template"]["spec"]["containers"]
    return containers


def envelope_cases(rng: random.Random, index: int) -> Hostile:
    """A body that is not a usable AdmissionReview (or may not be): never a 5xx."""
    request = admission_request(labelled_vcjob(f"env-{index}"))
    good = review(request)
    choice = rng.randrange(12)
    if choice == 0:
        return Hostile("not-json", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 400))))
    if choice == 1:
        return Hostile("empty", b"")
    if choice == 2:
        return Hostile("wrong-content-type", encode(good),
                       content_type=rng.choice(["text/plain", "application/yaml",
                                                "application/x-www-form-urlencoded"]))  # fmt: skip
    if choice == 3:
        depth = rng.choice([300, 5000, 100000])
        return Hostile("deep-json", b'{"request":' + b"[" * depth + b"]" * depth + b"}")
    if choice == 4:
        raw = encode(good).decode()
        dup = raw.replace('"uid":', '"uid": "first", "uid":', 1)
        return Hostile("duplicate-keys", dup.encode(), review_uid=request["uid"])
    if choice == 5:
        broken = copy.deepcopy(good)
        key = rng.choice(["uid", "kind", "operation", "userInfo", "dryRun", "object", "name"])
        broken["request"][key] = copy.deepcopy(rng.choice(_ODD_VALUES))
        return Hostile(f"request-{key}", encode(broken))
    if choice == 6:
        broken = copy.deepcopy(good)
        del broken["request"][rng.choice(["uid", "kind", "operation"])]
        return Hostile("request-missing", encode(broken))
    if choice == 7:
        broken = copy.deepcopy(good)
        broken["apiVersion"] = rng.choice(["admission.k8s.io/v1beta1", "v1", "", None, 1])
        broken["kind"] = rng.choice(["AdmissionReview", "Status", None])
        return Hostile("envelope-version", encode(broken))
    if choice == 8:
        return Hostile("top-level", encode(rng.choice([[], "x", 1, None, {}, {"request": None}])))
    if choice == 9:
        return Hostile("utf8-invalid", encode(good)[:-10] + b"\xff\xfe" + encode(good)[-10:])
    if choice == 10:
        return Hostile("truncated", encode(good)[: rng.randint(1, len(encode(good)) - 1)])
    return Hostile("nan-and-infinity", encode(good).replace(b'"dryRun": false', b'"dryRun": NaN'))


def oversize_case() -> Hostile:
    request = admission_request(plain_pod("huge"))
    request["object"]["metadata"]["annotations"] = {"x": "y" * (names.MAX_BODY_BYTES + 1)}
    return Hostile("over-7MiB", encode(review(request)))


def hostile_inputs(seed: int, count: int) -> list[Hostile]:
    rng = random.Random(seed)
    cases = [object_cases(rng, i) if i % 2 else envelope_cases(rng, i) for i in range(count)]
    return [*cases, oversize_case()]


# --- sending and judging -----------------------------------------------------------------------


@dataclass
class Answer:
    status: int | None
    body: Any
    error: str = ""
    elapsed: float = 0.0


async def post(
    session: aiohttp.ClientSession,
    port: int,
    path: str,
    body: bytes,
    tls: ssl.SSLContext,
    *,
    content_type: str = "application/json",
    timeout_param: str = "10s",
) -> Answer:
    started = time.monotonic()
    try:
        async with session.post(
            f"https://127.0.0.1:{port}{path}",
            params={"timeout": timeout_param},
            data=body,
            headers={"Content-Type": content_type},
            ssl=tls,
            server_hostname=SNI,
        ) as resp:
            raw = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return Answer(None, None, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
    try:
        parsed: Any = json.loads(raw)
    except ValueError:
        parsed = raw
    return Answer(status, parsed, "", time.monotonic() - started)


def judge(case: Hostile, answer: Answer) -> str | None:
    """What is wrong with the answer to ``case``, or None when it keeps the contract."""
    if answer.error:
        return f"{case.label}: no HTTP answer ({answer.error})"
    status = answer.status or 0
    if status >= 500:
        return f"{case.label}: HTTP {status}"
    if status == 200:
        return _judge_review(case, answer.body)
    if 400 <= status < 500:
        if case.review_uid is not None:
            return f"{case.label}: a well-formed review was answered HTTP {status}"
        message = answer.body.get("message") if isinstance(answer.body, dict) else None
        if not isinstance(message, str) or not message:
            return f"{case.label}: HTTP {status} without a reason"
        if "Traceback" in message:
            return f"{case.label}: a traceback in the answer"
        return None
    return f"{case.label}: unexpected HTTP {status}"


def _judge_review(case: Hostile, body: Any) -> str | None:
    if not isinstance(body, dict) or body.get("apiVersion") != API_VERSION:
        return f"{case.label}: HTTP 200 without an admission.k8s.io/v1 AdmissionReview"
    if body.get("kind") != "AdmissionReview" or not isinstance(body.get("response"), dict):
        return f"{case.label}: HTTP 200 without a response"
    response = body["response"]
    if case.review_uid is not None and response.get("uid") != case.review_uid:
        return f"{case.label}: uid {response.get('uid')!r} is not {case.review_uid!r}"
    if not isinstance(response.get("allowed"), bool):
        return f"{case.label}: allowed is not a boolean"
    if response["allowed"] is False:
        status = response.get("status") or {}
        if not status.get("message") or int(status.get("code", 0)) < 400:
            return f"{case.label}: a denial without code and message"
        if "autowrap hit an internal error" in str(status.get("message")):
            return f"{case.label}: autowrap crashed on the request"
    return None


@dataclass
class Tally:
    sent: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def add(self, case: Hostile, answer: Answer) -> None:
        self.sent += 1
        self.by_status[str(answer.status) if answer.status else "no-answer"] += 1
        problem = judge(case, answer)
        if problem is not None:
            self.problems.append(problem)


async def send_all(
    port: int, tls: ssl.SSLContext, cases: list[Hostile], *, concurrency: int = 4
) -> Tally:
    tally = Tally()
    queue = list(enumerate(cases))
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            while queue:
                index, case = queue.pop()
                path = names.VALIDATE_PATH if index % 2 else names.MUTATE_PATH
                answer = await post(session, port, path, case.body, tls,
                                    content_type=case.content_type)  # fmt: skip
                tally.add(case, answer)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally


# --- API faults --------------------------------------------------------------------------------

CREATE = r"/appwrappers$"
SAR = r"/subjectaccessreviews$"
GET_AW = r"/appwrappers/[^/]+$"
QUEUES = r"/localqueues$"
NAMESPACE_GET = r"/api/v1/namespaces/[^/]+$"
BUDGET = 3.0  # the apiserver's ?timeout= in fault runs, so that "too slow" is quick to reach

FAULTS: dict[str, list[dict[str, Any]]] = {
    "create answers 500": [{"method": "POST", "path_regex": CREATE, "status": 500}],
    "create answers 503": [{"method": "POST", "path_regex": CREATE, "status": 503}],
    "create answers 409 Conflict": [{"method": "POST", "path_regex": CREATE, "status": 409}],
    "create answers 403": [{"method": "POST", "path_regex": CREATE, "status": 403}],
    "create answers 429": [{"method": "POST", "path_regex": CREATE, "status": 429}],
    "create slower than the budget": [
        {"method": "POST", "path_regex": CREATE, "status": None, "delay": BUDGET + 0.5}
    ],
    "create drops the connection": [
        {"method": "POST", "path_regex": CREATE, "status": None, "drop_connection": True}
    ],
    "create stored, then 500": [
        {"method": "POST", "path_regex": CREATE, "status": 500, "after_effect": True}
    ],
    "create stored, then 504": [
        {"method": "POST", "path_regex": CREATE, "status": 504, "after_effect": True}
    ],
    "create stored, then connection lost": [
        {
            "method": "POST",
            "path_regex": CREATE,
            "status": None,
            "drop_connection": True,
            "after_effect": True,
        }
    ],  # fmt: skip
    "create stored, answer too late": [
        {
            "method": "POST",
            "path_regex": CREATE,
            "status": None,
            "delay": BUDGET + 0.5,
            "after_effect": True,
        }
    ],  # fmt: skip
    "create stored and lost, then get answers 500": [
        {
            "method": "POST",
            "path_regex": CREATE,
            "status": None,
            "drop_connection": True,
            "after_effect": True,
        },
        {"method": "GET", "path_regex": GET_AW, "status": 500},
    ],  # fmt: skip
    "SubjectAccessReview answers 500": [{"method": "POST", "path_regex": SAR, "status": 500}],
    "SubjectAccessReview answers 403": [{"method": "POST", "path_regex": SAR, "status": 403}],
    "SubjectAccessReview slower than the budget": [
        {"method": "POST", "path_regex": SAR, "status": None, "delay": BUDGET + 0.5}
    ],
    "SubjectAccessReview drops the connection": [
        {"method": "POST", "path_regex": SAR, "status": None, "drop_connection": True}
    ],
    "LocalQueue list answers 500": [{"method": "GET", "path_regex": QUEUES, "status": 500}],
    "namespace get answers 500": [{"method": "GET", "path_regex": NAMESPACE_GET, "status": 500}],
}


# A fault run is a list of phases: the faults are injected, the same object is created once,
# and the faults are cleared; a clean retry follows the last phase.
PHASES: dict[str, list[list[dict[str, Any]]]] = {name: [specs] for name, specs in FAULTS.items()}
PHASES["create stored and lost, then get answers 500"] = [
    [{"method": "POST", "path_regex": CREATE, "status": None, "drop_connection": True,
      "after_effect": True}],
    [{"method": "GET", "path_regex": GET_AW, "status": 500}],
]  # fmt: skip
del FAULTS["create stored and lost, then get answers 500"]


@dataclass
class FaultOutcome:
    name: str
    first_allowed: bool
    messages: list[str]
    existed_after_failure: bool
    retry_message: str
    retry_code: int
    appwrappers_after_retry: int
    problems: list[str]

    @property
    def first_message(self) -> str:
        return self.messages[0]


def told_it_may_exist(message: str, ns: str, name: str) -> bool:
    return f"AppWrapper {ns}/{name}" in message and f"kubectl get appwrapper {name} -n {ns}" in (
        message
    )


async def fault_run(cluster: Cluster, fault: str, name: str) -> FaultOutcome:
    """Creates of the same object under each phase's faults, then a retry with a healthy API."""
    obj = labelled_vcjob(name)
    before = len(cluster.appwrappers())
    problems: list[str] = []
    messages: list[str] = []
    allowed = []
    existed = False
    for phase in PHASES[fault]:
        for spec in phase:
            cluster.kube.inject(**spec)
        started = time.monotonic()
        result = await cluster.emulator.create(obj, user=ALICE, request_timeout=BUDGET)
        delay = max(float(spec.get("delay", 0.0)) for spec in phase)
        # A slowed call finishes on the API's side after autowrap gave up on it.
        await asyncio.sleep(max(0.0, started + delay + 0.2 - time.monotonic()))
        cluster.kube.clear_faults()
        messages.append(result.message)
        allowed.append(result.allowed)
        existed = (NAMESPACE, name) in cluster.appwrappers()
        if result.allowed:
            problems.append("a create under a fault was admitted")
        if "was wrapped into" in result.message:
            problems.append(f"a failure was reported as a wrap: {result.message}")
        if existed and not told_it_may_exist(result.message, NAMESPACE, name):
            problems.append(f"an AppWrapper exists but the denial did not say so: {result.message}")
    retry = await cluster.emulator.create(obj, user=ALICE, request_timeout=BUDGET)
    count = sum(1 for key in cluster.appwrappers() if key == (NAMESPACE, name))
    if f"was wrapped into AppWrapper {NAMESPACE}/{name}" not in retry.message:
        problems.append(f"the retry did not answer with the redirect: {retry.message}")
    if count != 1:
        problems.append(f"{count} AppWrappers after the retry")
    if len(cluster.appwrappers()) != before + 1:
        problems.append("AppWrappers other than the retried one appeared")
    if cluster.emulator.contract_violations:
        problems.append(f"contract violations: {cluster.emulator.contract_violations}")
    return FaultOutcome(fault, allowed[0], messages, existed, retry.message,
                        retry.status_code, count, problems)  # fmt: skip


# --- rotation, reload and sustained load ------------------------------------------------------


@dataclass
class LoadTally:
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    handshakes: int = 0
    # Wraps answered with the redirect ("... was wrapped into AppWrapper ..."): each one
    # stands for an AppWrapper created. A wrap may also be refused, with a reason, when the
    # fake API answers too slowly for the budget on a loaded machine.
    wrapped: int = 0

    def ok(self) -> bool:
        return not self.failures


def _redirected(answer: Answer) -> bool:
    response = answer.body.get("response") if isinstance(answer.body, dict) else None
    status = response.get("status") if isinstance(response, dict) else None
    return isinstance(status, dict) and "was wrapped into AppWrapper" in str(status.get("message"))


def request_mix(index: int) -> tuple[str, bytes, str | None]:
    """The load's requests: cheap pass-throughs, AppWrapper completions and wraps."""
    which = index % 4
    if which == 3:
        obj = labelled_vcjob(f"load-{index}")
        path = names.VALIDATE_PATH
    elif which == 2:
        job = vcjob(f"aw-{index}", labels={})
        obj = {"apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper",
               "metadata": {"name": f"aw-{index}", "namespace": NAMESPACE,
                            "labels": {names.QUEUE_LABEL: QUEUE}},
               "spec": {"components": [{"template": job}]}}  # fmt: skip
        path = names.MUTATE_PATH
    else:
        obj = plain_pod(f"p-{index}")
        path = names.VALIDATE_PATH
    request = admission_request(obj)
    return path, encode(review(request)), request["uid"]


async def load(
    port: int,
    tls: ssl.SSLContext,
    stop: asyncio.Event,
    tally: LoadTally,
    *,
    clients: int = 4,
    new_connection_every: int = 1,
    limit: int | None = None,
) -> None:
    """Send the request mix from ``clients`` clients until ``stop`` (or ``limit`` requests in
    all); every answer is judged.

    ``new_connection_every=1`` makes every request a fresh TLS handshake.
    """
    counter = iter(range(10**9 if limit is None else limit))

    async def client() -> None:
        session: aiohttp.ClientSession | None = None
        sent = 0
        try:
            while not stop.is_set():
                if session is None or sent % new_connection_every == 0:
                    if session is not None:
                        await session.close()
                    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
                    tally.handshakes += 1
                index = next(counter, None)
                if index is None:
                    break
                path, body, uid = request_mix(index)
                answer = await post(session, port, path, body, tls)
                sent += 1
                tally.requests += 1
                problem = judge(Hostile(f"load-{index}", body, review_uid=uid), answer)
                if problem is None and answer.status != 200:
                    problem = f"load-{index}: HTTP {answer.status}"
                if problem is not None:
                    tally.failures.append(problem)
                elif _redirected(answer):
                    tally.wrapped += 1
        finally:
            if session is not None:
                await session.close()

    await asyncio.gather(*(client() for _ in range(clients)))


async def served_certificate(port: int, tls: ssl.SSLContext) -> bytes:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls, server_hostname=SNI)
    ssl_object = writer.get_extra_info("ssl_object")
    der: bytes = ssl_object.getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return der


async def rotate(cluster_pki: ServingPki, cert_dir: Path, reloads: Any, times: int) -> list[bytes]:
    """Write ``times`` new serving pairs from the same CA into ``cert_dir``; wait for each.

    ``reloads`` returns the server's reload count.
    """
    written = []
    for _ in range(times):
        seen = reloads()
        fresh = write_pki(cert_dir, cluster_pki.dns_names, ca=cluster_pki.ca)
        written.append(fresh.cert_pem)
        deadline = time.monotonic() + 10
        while reloads() == seen and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
    return written


def rss_kib(pid: int | None = None) -> int:
    status = Path(f"/proc/{pid or os.getpid()}/status").read_text()
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# --- a served process ----------------------------------------------------------------------


def free_port() -> int:
    """A loopback port free right now; the server binds it a moment later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Served:
    process: subprocess.Popen[str]
    port: int
    pki: ServingPki
    log: Path


async def start_serve(
    pki: ServingPki,
    kube: FakeCluster,
    tmp_path: Path,
    *,
    policies: Path = REPO / "policies",
    repo: Path | None = None,
) -> Served:
    """``autowrap serve`` as its own process; ``repo`` serves another checkout's code."""
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    for source in (pki.cert_path, pki.key_path, pki.ca_path):
        shutil.copy(source, cert_dir / source.name)
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    kube.add_namespace(NAMESPACE)
    kube.add_local_queue(NAMESPACE, QUEUE)
    kube.allow(ALICE.username, verb="create", group=names.APPWRAPPER_GROUP,
               resource=names.APPWRAPPER_PLURAL, namespace=NAMESPACE)  # fmt: skip
    port, metrics_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--metrics-port", str(metrics_port), "--cert-dir", str(cert_dir),
         "--policy", str(in_mode(policies, tmp_path / "policies", "Redirect")),
         "--kubeconfig", str(kubeconfig), "--no-controller"],
        cwd=repo or REPO, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    served = Served(process, port, pki, log)
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            try:
                async with session.get(f"https://127.0.0.1:{port}{names.READYZ_PATH}",
                                       ssl=pki.client_context(), server_hostname=SNI) as resp:  # fmt: skip
                    if resp.status == 200:
                        return served
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"autowrap serve did not become ready: {log.read_text()}")


async def soak(served: Served, seconds: float | None = None, *, requests: int | None = None,
               clients: int = 4, sample_every: float = 2.0,
               warm_up: float = 3.0) -> dict[str, Any]:  # fmt: skip
    """Load a served process for ``seconds`` (a measurement: bench/), or until it has
    answered ``requests`` (a check: the same work whatever the machine's speed). Its RSS is
    sampled every ``sample_every`` seconds after ``warm_up``; by requests, once a quarter of
    them are answered and at the end."""
    pid = served.process.pid
    tls = served.pki.client_context()
    tally, stop = LoadTally(), asyncio.Event()
    traffic = asyncio.create_task(load(served.port, tls, stop, tally, clients=clients,
                                       new_connection_every=50, limit=requests))  # fmt: skip
    started = time.monotonic()
    samples: list[tuple[float, int]] = []
    if requests is not None:
        while tally.requests < requests // 4 and not traffic.done():
            await asyncio.sleep(0.05)  # until a quarter is answered, however long that takes
        samples.append((tally.requests, rss_kib(pid)))
        await traffic
        samples.append((tally.requests, rss_kib(pid)))
    while seconds is not None and time.monotonic() - started < seconds:
        await asyncio.sleep(sample_every)
        elapsed = time.monotonic() - started
        if elapsed >= warm_up:
            samples.append((round(elapsed, 1), rss_kib(pid)))
        if served.process.poll() is not None:
            break
    stop.set()
    await traffic
    rss = [kib for _, kib in samples] or [rss_kib(pid)]
    return {
        "seconds": round(time.monotonic() - started, 1),
        "requests": tally.requests,
        "wraps": (tally.requests + 1) // 4,  # every fourth request of the mix is a wrap
        "wrapped": tally.wrapped,
        "errors": len(tally.failures),
        "error_samples": tally.failures[:5],
        "rss_kib_after_warm_up": rss[0],
        "rss_kib_end": rss[-1],
        "rss_kib_max": max(rss),
        "rss_growth_kib": rss[-1] - rss[0],
        "alive": served.process.poll() is None,
    }
