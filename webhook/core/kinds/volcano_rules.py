"""What Volcano's job admission webhook and its CRD schema refuse, checked before anything is
queued, each with its field path.

Sources, volcano-sh/volcano at ed72c7c: ``pkg/webhooks/admission/jobs/validate/admit_job.go``
(``validateJobCreate``), ``validate/util.go`` (``validatePolicies``, ``validateIO``,
``topoSort``) and the Job CRD ``installer/helm/chart/volcano/crd/bases/batch.volcano.sh_jobs.yaml``
(``CRD:<line>`` below; the same bytes as ``../shared/crds``). Volcano stops at the first problem
of a kind and says which task in words; these rules report every problem at its path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from webhook.model import dnsnames, quantity
from webhook.model.fields import SPEC, FieldPath, Violation, error
from webhook.model.objects import as_list, as_map, int_or_none
from webhook.model.yamltext import shown

TASKS = SPEC.child("tasks")

# util.go:30-43 (policyEventMap): the events a user may name; OutOfSync, CommandIssued and
# PodRunning are internal and refused.
EVENTS = (
    "*",
    "PodFailed",
    "PodEvicted",
    "PodPending",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
)
# util.go:45-60 (policyActionMap): the actions a user may name.
ACTIONS = (
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
)
# pkg/controllers/job/plugins/factory.go:33-41: the registered job plugins.
PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")
# CRD:4061-4067 (tasks[].topologyPolicy enum).
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
MPI_DEFAULT_MASTER = "master"  # pkg/controllers/job/plugins/distributed-framework/mpi/mpi.go:38


def check(spec: Mapping[str, Any], task_names: Sequence[str]) -> list[Violation]:
    """Job- and task-level rules; ``task_names`` are the tasks' names after Volcano's defaulting
    (``default<i>`` for a task without one), in spec order."""
    found: list[Violation] = []
    found += check_bounds(spec)
    found += check_queue(spec.get("queue"))
    found += check_policies(spec.get("policies"), SPEC.child("policies"))
    found += check_volumes(spec.get("volumes"))
    found += check_plugins(spec.get("plugins"), task_names)
    found += check_depends_on(as_list(spec.get("tasks")), task_names)
    for i, raw in enumerate(as_list(spec.get("tasks"))):
        task = as_map(raw)
        path = TASKS.index(i)
        found += check_policies(task.get("policies"), path.child("policies"))
        found += check_topology_policy(task, path)
    return found


# --- the CRD's bounds ----------------------------------------------------------------------------

# (field, minimum, CRD line): what the apiserver refuses before Volcano's webhook runs.
_JOB_BOUNDS = (
    ("minAvailable", 0, "CRD:54-57"),
    ("maxRetry", 0, "CRD:49-53"),
    ("ttlSecondsAfterFinished", 0, "CRD:4071-4074"),
    ("minSuccess", 1, "CRD:58-61"),
)
_TASK_BOUNDS = (
    ("replicas", 0, "CRD:239-242"),
    ("minAvailable", 0, "CRD:155-158"),
    ("maxRetry", 0, "CRD:151-154"),
)

_MEANING = {
    "replicas": "the pods this task creates",
    "minAvailable": "the pods that must run together",
    "maxRetry": "how often Volcano retries the job",
    "ttlSecondsAfterFinished": "seconds before Volcano deletes the finished job",
    "minSuccess": "the pods that must succeed",
}


def check_bounds(spec: Mapping[str, Any]) -> list[Violation]:
    found: list[Violation] = []
    for field, minimum, _source in _JOB_BOUNDS:
        found += _bound(spec, field, minimum, SPEC)
    for i, task in enumerate(as_list(spec.get("tasks"))):
        for field, minimum, _source in _TASK_BOUNDS:
            found += _bound(as_map(task), field, minimum, TASKS.index(i))
    return found


def _bound(owner: Mapping[str, Any], field: str, minimum: int, base: FieldPath) -> list[Violation]:
    if owner.get(field) is None:
        return []
    raw = owner[field]
    value = int_or_none(raw)
    path = base.child(field)
    meaning = _MEANING[field]
    if value is None:
        return [error(path, f"{shown(raw)} is not an integer; set {meaning} as a whole number")]
    if value < minimum:
        adjective = "negative" if value < 0 else "below 1"
        return [
            error(
                path, f"{value} is {adjective}; {field} is {meaning}, so use an integer ≥ {minimum}"
            )
        ]
    return []


# --- the queue ---------------------------------------------------------------------------------


def check_queue(queue: object) -> list[Violation]:
    """CRD:129-133 (a DNS-1123 subdomain of at most 253 characters) and admit_job.go:212-213
    (no job in the ``root`` queue, the parent of every queue)."""
    if queue is None or queue == "":
        return []  # Volcano defaults it to "default"
    path = SPEC.child("queue")
    if not isinstance(queue, str) or not dnsnames.is_dns1123_subdomain(queue):
        return [
            error(
                path,
                f"{queue!r} is not a Volcano queue name (lower-case letters, digits, '-' and '.', "
                "at most 253 characters); name an existing Volcano queue, or remove it for "
                "'default'",
            )
        ]
    if queue == "root":
        return [
            error(
                path,
                "Volcano refuses jobs in the root queue (the parent of every queue); name a leaf "
                "queue, or remove it for 'default'",
            )
        ]
    return []


# --- lifecycle policies ------------------------------------------------------------------------


def check_policies(raw: object, base: FieldPath) -> list[Violation]:
    """util.go:62-123 (``validatePolicies``), run on the job's and on every task's list."""
    found: list[Violation] = []
    seen_events: dict[str, FieldPath] = {}
    seen_codes: dict[int, FieldPath] = {}
    for j, item in enumerate(as_list(raw)):
        policy = as_map(item)
        path = base.index(j)
        events = _events(policy, path)
        code = policy.get("exitCode")
        if events and code is not None:  # util.go:68-71
            found.append(
                error(
                    path,
                    "sets both an event and exitCode; a policy reacts to one of them, so split it "
                    "into two policies",
                )
            )
            continue
        if not events and code is None:  # util.go:73-76
            found.append(
                error(path, "sets neither event(s) nor exitCode; add the one it should react to")
            )
            continue
        if events:
            for event, event_path in events:
                if event not in EVENTS:  # util.go:82-86
                    found.append(
                        error(
                            event_path,
                            f"{shown(event)} is not an event a policy can name; use one of: "
                            f"{', '.join(EVENTS)}",
                        )
                    )
                elif event in seen_events:  # util.go:93-99
                    found.append(
                        error(
                            event_path,
                            f"event {event!r} already has a policy at {seen_events[event]}; keep "
                            "one policy per event",
                        )
                    )
                else:
                    seen_events[event] = event_path
            found += _check_action(policy, path)
        else:
            value = int_or_none(code)
            code_path = path.child("exitCode")
            if value is None:
                found.append(error(code_path, f"{shown(code)} is not an exit code; use an integer"))
            elif value == 0:  # util.go:105-108
                found.append(
                    error(
                        code_path,
                        "0 is success, not an error code; use the non-zero code to react to",
                    )
                )
            elif value in seen_codes:  # util.go:109-114
                found.append(
                    error(
                        code_path,
                        f"exit code {value} already has a policy at {seen_codes[value]}; keep one "
                        "policy per exit code",
                    )
                )
            else:
                seen_codes[value] = code_path
            if policy.get("action") is not None:
                found += _check_action(policy, path)
    if "*" in seen_events and len(seen_events) > 1:  # util.go:118-120
        others = ", ".join(repr(e) for e in seen_events if e != "*")
        found.append(
            error(
                seen_events["*"],
                f"'*' covers every event, so no other event may have a policy ({others}); keep "
                "either '*' alone or the single events",
            )
        )
    return found


def _events(policy: Mapping[str, Any], path: FieldPath) -> list[tuple[str, FieldPath]]:
    """The policy's events, ``event`` and ``events`` merged without repeats (util.go:125-144)."""
    out: list[tuple[str, FieldPath]] = []
    for k, event in enumerate(as_list(policy.get("events"))):
        out.append((str(event), path.child("events").index(k)))
    single = policy.get("event")
    if single:
        out.append((str(single), path.child("event")))
    unique: dict[str, FieldPath] = {}
    for event, where in out:
        unique.setdefault(event, where)
    return list(unique.items())


def _check_action(policy: Mapping[str, Any], path: FieldPath) -> list[Violation]:
    action = policy.get("action")
    if action in ACTIONS:  # util.go:88-92
        return []
    return [
        error(
            path.child("action"),
            f"{shown(action)} is not an action a policy can take; use one of: {', '.join(ACTIONS)}",
        )
    ]


# --- volumes -----------------------------------------------------------------------------------


def check_volumes(raw: object) -> list[Violation]:
    """util.go:169-194 (``validateIO``) and CRD:4078-4081 (mountPath: non-empty, no ':')."""
    found: list[Violation] = []
    seen: dict[str, int] = {}
    for k, item in enumerate(as_list(raw)):
        volume = as_map(item)
        path = SPEC.child("volumes").index(k)
        mount = volume.get("mountPath")
        if not isinstance(mount, str) or not mount:
            found.append(
                error(
                    path.child("mountPath"),
                    "missing; set the directory where the volume is mounted in every container",
                )
            )
        elif ":" in mount:
            found.append(
                error(path.child("mountPath"), f"{mount!r} contains ':'; use a plain directory")
            )
        elif mount in seen:
            found.append(
                error(
                    path.child("mountPath"),
                    f"{mount!r} is already the mountPath of spec.volumes[{seen[mount]}]; give "
                    "every volume its own directory",
                )
            )
        else:
            seen[mount] = k
        claim, claim_name = volume.get("volumeClaim"), volume.get("volumeClaimName")
        if claim is None and not claim_name:
            found.append(
                error(
                    path,
                    "sets neither volumeClaim nor volumeClaimName; name an existing PVC in "
                    "volumeClaimName, or describe a new one in volumeClaim",
                )
            )
        elif claim is not None and claim_name:
            found.append(
                error(
                    path.child("volumeClaimName"),
                    "set together with volumeClaim; keep volumeClaimName to use an existing PVC, "
                    "or volumeClaim to create a new one",
                )
            )
        elif claim_name and (
            not isinstance(claim_name, str) or not dnsnames.is_dns1123_subdomain(claim_name)
        ):
            found.append(
                error(
                    path.child("volumeClaimName"),
                    f"{claim_name!r} is not a PVC name (lower-case letters, digits, '-' and '.'); "
                    "name an existing PersistentVolumeClaim",
                )
            )
    return found


# --- plugins -----------------------------------------------------------------------------------


def check_plugins(raw: object, task_names: Sequence[str]) -> list[Violation]:
    """admit_job.go:189-196 (every plugin registered) and :134-141 (the mpi plugin's master
    task, ``--master``, default ``master``, must exist)."""
    found: list[Violation] = []
    plugins = as_map(raw)
    base = SPEC.child("plugins")
    for name in plugins:
        if name not in PLUGINS:
            found.append(
                error(
                    base.key(str(name)),
                    f"Volcano has no job plugin {name!r}; use one of: {', '.join(PLUGINS)}",
                )
            )
    if "mpi" in plugins:
        master = _flag(as_list(plugins.get("mpi")), "master") or MPI_DEFAULT_MASTER
        if master not in task_names:
            found.append(
                error(
                    base.key("mpi"),
                    f"the mpi plugin's master task {master!r} does not exist; name a task "
                    f"{master!r}, or pass --master=<task> (tasks: {', '.join(task_names)})",
                )
            )
    return found


def _flag(args: list[Any], name: str) -> str | None:
    """A Go ``flag`` value from a plugin's arguments: ``--name=v``, ``-name=v`` or ``--name v``."""
    value: str | None = None
    for i, arg in enumerate(args):
        text = str(arg)
        for prefix in (f"--{name}", f"-{name}"):
            if text.startswith(prefix + "="):
                value = text[len(prefix) + 1 :]
            elif text == prefix and i + 1 < len(args):
                value = str(args[i + 1])
    return value


# --- task dependencies -------------------------------------------------------------------------


def check_depends_on(tasks: list[Any], task_names: Sequence[str]) -> list[Violation]:
    """admit_job.go:225-230 with util.go:196-253: the dependsOn graph must be a DAG. A name
    that is no task never resolves in Volcano's topological sort, so it is refused too."""
    found: list[Violation] = []
    known = set(task_names)
    edges: dict[str, list[str]] = {name: [] for name in task_names}
    for i, raw in enumerate(tasks):
        depends = as_map(as_map(raw).get("dependsOn"))
        for k, target in enumerate(as_list(depends.get("name"))):
            path = TASKS.index(i).child("dependsOn", "name").index(k)
            if target not in known:
                found.append(
                    error(
                        path,
                        f"no task is named {target!r}, so this task would never start; use one of: "
                        f"{', '.join(task_names)}",
                    )
                )
            elif i < len(task_names):
                edges[task_names[i]].append(str(target))
    cycle = _cycle(edges)
    if cycle:
        first = task_names.index(cycle[0])
        found.append(
            error(
                TASKS.index(first).child("dependsOn"),
                f"tasks wait for each other in a cycle ({' → '.join([*cycle, cycle[0]])}), so "
                "none of them would start; remove one of these dependencies",
            )
        )
    return found


def _cycle(edges: Mapping[str, list[str]]) -> list[str]:
    """One cycle of ``task → tasks it waits for``, in order, or []."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in edges:
        if node not in state:
            found = visit(node)
            if found:
                return list(found)
    return []


# --- NUMA topology policy ----------------------------------------------------------------------


def check_topology_policy(task: Mapping[str, Any], path: FieldPath) -> list[Violation]:
    """CRD:4061-4067 (the enum) and admit_job.go:379-416: with a policy other than ``none``,
    every container and init container asks for a whole, non-zero number of CPUs (its
    requests, or its limits where it sets no requests)."""
    policy = task.get("topologyPolicy")
    if policy is None or policy == "":
        return []
    where = path.child("topologyPolicy")
    if policy not in TOPOLOGY_POLICIES:
        return [
            error(
                where,
                f"{shown(policy)} is not a NUMA topology policy; use one of: "
                f"{', '.join(TOPOLOGY_POLICIES)}",
            )
        ]
    if policy == "none":
        return []
    found: list[Violation] = []
    spec = as_map(as_map(task.get("template")).get("spec"))
    for list_name in ("containers", "initContainers"):
        for ci, container in enumerate(as_list(spec.get(list_name))):
            resources = as_map(as_map(container).get("resources"))
            requests = as_map(resources.get("requests")) or as_map(resources.get("limits"))
            cpu = quantity.parse(requests.get("cpu"))
            if cpu is not None and cpu > 0 and cpu == cpu.to_integral_value():
                continue
            asked = "no CPUs" if cpu is None or cpu == 0 else f"{quantity.show(cpu)} CPUs"
            found.append(
                error(
                    path.child("template", "spec", list_name).index(ci).child("resources"),
                    f"asks for {asked}, but topologyPolicy {policy!r} needs a whole number of "
                    f"CPUs in every container; request e.g. cpu: {_whole_cpus(cpu)}",
                )
            )
    return found


def _whole_cpus(cpu: Decimal | None) -> str:
    if cpu is None or cpu <= 0:
        return "1"
    return str(int(cpu.to_integral_value(rounding="ROUND_CEILING")))
