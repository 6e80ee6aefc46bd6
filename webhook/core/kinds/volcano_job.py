"""Volcano ``batch.volcano.sh/v1alpha1`` Job: one pod group per task.

Facts used here (Volcano master ed72c7c): pods are named ``{job}-{task}-{i}``; the
controller sets ``volcano.sh/task-index`` on each pod at creation; the ``svc`` plugin
creates the headless Service ``{job}`` and sets each pod's hostname to its name and
subdomain to the job name when the template leaves them empty; task names default to
``default<i>`` in Volcano's mutating webhook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.core.kinds import volcano_pytorch, volcano_rules
from webhook.core.workload import Dns, Partition, PodAdditions, PodGroup, TopologySlot
from webhook.model import dnsnames, names, objects
from webhook.model.fields import METADATA, SPEC, FieldPath, Violation, error, warning
from webhook.model.objects import Obj, as_list, as_map, int_or_none

TASKS = SPEC.child("tasks")
PUBLISH_NOT_READY = "--publish-not-ready-addresses"


class VolcanoJobKind:
    api_version = "batch.volcano.sh/v1alpha1"
    kind = "Job"
    resource = "jobs"
    queue_label_requests_wrap = True
    # Each sets a controller ownerReference on the Volcano Jobs it creates: AppWrapper
    # (project-codeflare/appwrapper internal/controller/appwrapper/resource_management.go,
    # controllerutil.SetControllerReference), Volcano CronJob (volcano at ed72c7c
    # pkg/controllers/cronjob/cronjob_controller_util.go:272, metav1.NewControllerRef with the
    # kind batch.volcano.sh/v1alpha1 CronJob of cronjob_controller.go:49) and JobFlow
    # (pkg/controllers/jobflow/jobflow_controller_action.go:278, SetControllerReference; group
    # flow.volcano.sh, staging/src/volcano.sh/apis/pkg/apis/flow/v1alpha1/register.go:29).
    owner_kinds = frozenset({
        ("workload.codeflare.dev", "AppWrapper"),
        ("batch.volcano.sh", "CronJob"),
        ("flow.volcano.sh", "JobFlow"),
    })  # fmt: skip

    def pod_groups(self, obj: Mapping[str, Any]) -> list[PodGroup]:
        groups = []
        for i, task in enumerate(as_list(as_map(obj.get("spec")).get("tasks"))):
            task = as_map(task)
            path = TASKS.index(i)
            name = task.get("name")
            partition = None
            if "partitionPolicy" in task:
                pp = as_map(task.get("partitionPolicy"))
                partition = Partition(
                    path=path.child("partitionPolicy"),
                    total=int_or_none(pp.get("totalPartitions")),
                    size=int_or_none(pp.get("partitionSize")),
                    minimum=int_or_none(pp.get("minPartitions")),
                )
            groups.append(
                PodGroup(
                    name=name if isinstance(name, str) and name else f"default{i}",
                    replicas=max(int_or_none(task.get("replicas")) or 0, 0),
                    path=path,
                    template_path=path.child("template"),
                    template=as_map(task.get("template")),
                    podset_path=f"template.spec.tasks[{i}].template",
                    pod_index_key=names.VOLCANO_TASK_INDEX,
                    min_available=int_or_none(task.get("minAvailable")),
                    partition=partition,
                )
            )
        return groups

    def master_group(self, obj: Mapping[str, Any], groups: Sequence[PodGroup]) -> PodGroup | None:
        wanted = objects.annotations_of(obj).get(names.MASTER_TASK_ANNOTATION)
        by_name = {g.name: g for g in groups}
        if wanted in by_name:
            return by_name[wanted]
        return by_name.get("master") or (groups[0] if groups else None)

    def pod_name(self, obj: Mapping[str, Any], group: PodGroup, index: int) -> str:
        return f"{objects.name_of(obj)}-{group.name}-{index}"

    # What Volcano's job controller makes of a task template (createJobPod,
    # pkg/controllers/job/job_controller_util.go; volcano.md section 3): the pod is named
    # ``{job}-{task}-{i}`` for i below the task's replicas, carries the job's name and the task's
    # in the annotations volcano.sh/job-name and volcano.sh/task-spec (and the same labels), and
    # takes the template's priorityClassName, else the job's.

    def pod_claims(self, obj: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        job = objects.name_of(obj)
        return bool(job) and job in (
            objects.annotations_of(pod).get(names.VOLCANO_JOB_NAME),
            objects.labels_of(pod).get(names.VOLCANO_JOB_NAME),
        )

    def claim_selectors(self, name: str) -> list[str]:
        return [f"{names.VOLCANO_JOB_NAME}={name}"]

    def pod_mismatch(self, obj: Mapping[str, Any], group: PodGroup, pod: Mapping[str, Any]) -> str:
        job, pod_name = objects.name_of(obj), objects.name_of(pod)
        made = {self.pod_name(obj, group, i) for i in range(group.replicas)}
        if pod_name not in made:
            return (
                f"Volcano names the pods of task {group.name!r} {job}-{group.name}-<i> with "
                f"i below its {group.replicas} replica(s), and this one is {pod_name!r}"
            )
        annotations = objects.annotations_of(pod)
        for key, wanted in ((names.VOLCANO_JOB_NAME, job), (names.VOLCANO_TASK_SPEC, group.name)):
            if annotations.get(key) != wanted:
                return f"annotation {key} is {annotations.get(key)!r}, Volcano writes {wanted!r}"
        template_class = as_map(group.template.get("spec")).get("priorityClassName")
        wanted_class = template_class or as_map(obj.get("spec")).get("priorityClassName") or ""
        have_class = as_map(pod.get("spec")).get("priorityClassName") or ""
        if have_class != wanted_class:
            return (
                f"spec.priorityClassName is {have_class or 'unset'!r}, and Kueue admitted the "
                f"job at {wanted_class or 'no priority class'!r}"
            )
        return ""

    def pod_position(self, obj: Mapping[str, Any], group: PodGroup, pod: Mapping[str, Any]) -> int:
        name = objects.name_of(pod)
        return next((i for i in range(group.replicas) if self.pod_name(obj, group, i) == name), 0)

    def dns(self, obj: Obj, groups: Sequence[PodGroup], master: PodGroup, *, port: int) -> Dns:
        patched = dict(obj)
        plugins = objects.own_map(objects.own_map(patched, "spec"), "plugins")
        svc = plugins.get("svc")
        if not isinstance(svc, list):
            plugins["svc"] = [f"{PUBLISH_NOT_READY}=true"]
        elif not any(str(arg).startswith(PUBLISH_NOT_READY) for arg in svc):
            plugins["svc"] = [*svc, f"{PUBLISH_NOT_READY}=true"]
        pod_spec = as_map(master.template.get("spec"))
        job = objects.name_of(obj)
        host = pod_spec.get("hostname") or self.pod_name(obj, master, 0)
        subdomain = pod_spec.get("subdomain") or job
        return Dns(master_addr=f"{host}.{subdomain}", patched=patched)

    def pod_additions(
        self, obj: Mapping[str, Any], groups: Sequence[PodGroup]
    ) -> Callable[[PodGroup, int], list[PodAdditions]] | None:
        """What Volcano's job plugins add to a pod beyond the env autowrap reads: the pytorch
        plugin's env, port and init container (``volcano_pytorch``). The svc and env plugins
        add names autowrap never sets (``VC_*``, ``VK_TASK_INDEX``), so they are left out."""
        pytorch = volcano_pytorch.additions(obj, groups)
        if pytorch is None:
            return None
        return lambda group, index: [pytorch(group, index)]

    def topology_slots(
        self, obj: Mapping[str, Any], groups: Sequence[PodGroup]
    ) -> list[TopologySlot]:
        spec = as_map(obj.get("spec"))
        slots = [TopologySlot(SPEC.child("networkTopology"), spec.get("networkTopology"), "job")]
        for group in groups:
            if group.partition is not None:
                path = group.partition.path.child("networkTopology")
                slots.append(TopologySlot(path, objects.get(obj, path), "partition"))
        return slots

    def with_server_defaults(self, spec: Any, stored: Any) -> Any:
        """What Volcano's mutating webhook fills in (mutate_job.go: queue, schedulerName,
        maxRetry and minAvailable of the job; name, minAvailable, maxRetry and, with
        hostNetwork, dnsPolicy of each task; the svc and ssh plugins it adds), from ``stored``."""
        if not isinstance(spec, dict) or not isinstance(stored, dict):
            return spec
        result = dict(spec)
        for key in ("queue", "schedulerName", "maxRetry", "minAvailable"):
            if key not in result and key in stored:
                result[key] = stored[key]
        plugins, stored_plugins = result.get("plugins"), stored.get("plugins")
        if isinstance(plugins, dict) and isinstance(stored_plugins, dict):
            added = {k: v for k, v in stored_plugins.items() if k in ("svc", "ssh")}
            result["plugins"] = {**added, **plugins}
        tasks, stored_tasks = result.get("tasks"), stored.get("tasks")
        if (
            isinstance(tasks, list)
            and isinstance(stored_tasks, list)
            and len(tasks) == len(stored_tasks)
        ):
            result["tasks"] = [
                _task_defaults(task, old) for task, old in zip(tasks, stored_tasks, strict=True)
            ]
        return result

    def check(self, obj: Mapping[str, Any]) -> list[Violation]:
        """What Volcano's webhook, CRD schema or controller would refuse, or silently break."""
        spec = as_map(obj.get("spec"))
        found: list[Violation] = []
        job = objects.name_of(obj)
        if job and not dnsnames.is_dns1035_label(job):
            found.append(
                error(
                    METADATA.child("name"),
                    f"{job!r} is not a DNS-1035 label (lower case letters, digits and '-', starting "
                    "with a letter, at most 63 characters); Volcano names the job's headless Service "
                    "after the job, so rename the job",
                )
            )
        tasks = as_list(spec.get("tasks"))
        if not tasks:
            found.append(
                error(TASKS, "a Volcano Job needs at least one task; add one under spec.tasks")
            )
        found += self._check_tasks(obj, tasks)
        groups = self.pod_groups(obj)
        total = sum(g.replicas for g in groups)
        # A negative count is reported where it is (volcano_rules.check_bounds), never as a
        # job minAvailable above a total it made up (Volcano's own test replica-lessThanZero).
        negative = any((int_or_none(as_map(t).get("replicas")) or 0) < 0 for t in tasks)
        # Nor above a total that counts a mistyped count (replicas: "2", reported where it is
        # by the schema check) as 0: one mistake, one error.
        mistyped = any(_mistyped_replicas(t) for t in tasks)
        found += _check_replicas_set(tasks, total, negative or mistyped)
        job_min = int_or_none(spec.get("minAvailable"))
        if job_min is not None and job_min > total and not negative and not mistyped:
            found.append(
                error(
                    SPEC.child("minAvailable"),
                    f"minAvailable {job_min} is more than the {total} pods the tasks create; "
                    f"lower it to at most {total} or add replicas",
                )
            )
        found += self._check_lifecycle(spec)
        found += self._check_plugins(obj, [g.name for g in groups])
        found += volcano_rules.check(spec, [g.name for g in groups])
        return found

    def _check_tasks(self, obj: Mapping[str, Any], tasks: list[Any]) -> list[Violation]:
        found: list[Violation] = []
        seen: dict[str, int] = {}
        for i, raw in enumerate(tasks):
            task = as_map(raw)
            path = TASKS.index(i)
            name = task.get("name")
            if isinstance(name, str) and name:
                if not dnsnames.is_dns1123_label(name):
                    found.append(
                        error(
                            path.child("name"),
                            f"{name!r} is not a DNS-1123 label (lower case letters, digits and '-', "
                            "at most 63 characters); rename the task",
                        )
                    )
                if name in seen:
                    found.append(
                        error(
                            path.child("name"),
                            f"task name {name!r} is already used by spec.tasks[{seen[name]}]; "
                            "give every task its own name",
                        )
                    )
                seen.setdefault(name, i)
            replicas = int_or_none(task.get("replicas")) or 0
            minimum = int_or_none(task.get("minAvailable"))
            if minimum is not None and minimum > replicas >= 0 and not _mistyped_replicas(task):
                found.append(
                    error(
                        path.child("minAvailable"),
                        f"minAvailable {minimum} is more than replicas {replicas}; lower "
                        "minAvailable or raise replicas",
                    )
                )
            hostname = objects.get(task, FieldPath(("template", "spec", "hostname")))
            if hostname and replicas > 1:
                found.append(
                    error(
                        path.child("template", "spec", "hostname"),
                        f"all {replicas} replicas would share the hostname {hostname!r}, so only one "
                        "of them can be reached by name; remove hostname and Volcano's svc plugin "
                        "names every pod after itself",
                    )
                )
            for j, policy in enumerate(as_list(task.get("policies"))):
                if as_map(policy).get("action") == "CompleteJob":
                    found.append(_complete_job_warning(path.child("policies").index(j)))
        return found

    def _check_lifecycle(self, spec: Mapping[str, Any]) -> list[Violation]:
        found = []
        if spec.get("ttlSecondsAfterFinished") is not None:
            found.append(
                warning(
                    SPEC.child("ttlSecondsAfterFinished"),
                    "Volcano may delete the finished job while its AppWrapper still watches it, "
                    "which fails the AppWrapper; remove it and rely on the AppWrapper's "
                    "successTTLDuration",
                )
            )
        if spec.get("minSuccess") is not None:
            found.append(
                warning(
                    SPEC.child("minSuccess"),
                    "a job that completes on minSuccess leaves pods the AppWrapper expects to "
                    "succeed, so it may be reset and rerun; remove minSuccess",
                )
            )
        for j, policy in enumerate(as_list(spec.get("policies"))):
            if as_map(policy).get("action") == "CompleteJob":
                found.append(_complete_job_warning(SPEC.child("policies").index(j)))
        return found

    def _check_plugins(self, obj: Mapping[str, Any], task_names: list[str]) -> list[Violation]:
        spec = as_map(obj.get("spec"))
        plugins = as_map(spec.get("plugins"))
        found = []
        svc = plugins.get("svc")
        if isinstance(svc, list) and f"{PUBLISH_NOT_READY}=false" in svc:
            found.append(
                warning(
                    SPEC.child("plugins").key("svc"),
                    "with --publish-not-ready-addresses=false a pod's name resolves only once it is "
                    "Ready, so rendezvous on MASTER_ADDR can fail at start; drop that argument",
                )
            )
        # Where the plugin does add env, the env rule compares it with autowrap's.
        master = volcano_pytorch.missing_master(obj, task_names)
        if master is not None:
            found.append(
                warning(
                    volcano_pytorch.PATH,
                    f"{volcano_pytorch.SOURCE} looks for a task named {master!r} (its --master) "
                    "and adds nothing without one; autowrap sets MASTER_ADDR, MASTER_PORT, "
                    "WORLD_SIZE, RANK and torchrun's PET_* itself, so remove the pytorch plugin",
                )
            )
        return found


def _mistyped_replicas(task: object) -> bool:
    """A task whose ``replicas`` is set but not an integer (``"2"``): counted as 0 pods."""
    replicas = as_map(task).get("replicas")
    return replicas is not None and int_or_none(replicas) is None


def _check_replicas_set(tasks: list[Any], total: int, negative: bool) -> list[Violation]:
    """A task without ``replicas`` creates no pods: Volcano's TaskSpec.Replicas is a plain
    int32 with no default (staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/job.go:246-249),
    and its mutating webhook fills none. autowrap plans the same zero, and says so."""
    if not tasks or negative:
        return []
    if total == 0:
        return [
            warning(
                TASKS,
                "no task has replicas ≥ 1, so the job creates no pods (Volcano's default replicas "
                "is 0) and NNODES is 0; set replicas on the tasks",
            )
        ]
    found: list[Violation] = []
    for i, task in enumerate(tasks):
        if as_map(task).get("replicas") is None:
            found.append(
                warning(
                    TASKS.index(i).child("replicas"),
                    "not set, so Volcano creates no pods for this task (replicas defaults to 0) "
                    "and autowrap counts none in NNODES; set replicas, or remove the task",
                )
            )
    return found


def _complete_job_warning(path: FieldPath) -> Violation:
    return warning(
        path.child("action"),
        "CompleteJob ends the job while pods may still run, and the AppWrapper counts those "
        "as missing successes (it may reset and rerun the job); prefer letting every pod exit",
    )


def _task_defaults(task: Any, stored: Any) -> Any:
    if not isinstance(task, dict) or not isinstance(stored, dict):
        return task
    result = dict(task)
    for key in ("name", "minAvailable", "maxRetry"):
        if key not in result and key in stored:
            result[key] = stored[key]
    spec = objects.get(result, FieldPath(("template", "spec")))
    stored_spec = objects.get(stored, FieldPath(("template", "spec")))
    if (
        isinstance(spec, dict)
        and isinstance(stored_spec, dict)
        and spec.get("hostNetwork")
        and "dnsPolicy" not in spec
        and "dnsPolicy" in stored_spec
    ):
        template = dict(result["template"])
        template["spec"] = {**spec, "dnsPolicy": stored_spec["dnsPolicy"]}
        result["template"] = template
    return result
