"""Volcano Jobs for tests and the testbed: one fluent builder and the one training-job factory.

Tests reach it through ``tests.builders`` (with the other builders); the testbed, which does
not import the tests, uses it directly, so a change to the Job's shape is made once.

    job = VolcanoJobBuilder("train", ns="ml").task("worker", replicas=3, gpus=8).queue("team-a")
    obj = job.build()
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Self

from webhook.model import names

VOLCANO_API = "batch.volcano.sh/v1alpha1"
IMAGE = "registry.example.com/ml/torch:2.4"


class Builder:
    """What every builder shares: a default object, fluent edits, a fresh dict per build."""

    _obj: dict[str, Any]

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def clone(self) -> Self:
        twin = copy.copy(self)
        twin.__dict__ = copy.deepcopy(self.__dict__)
        return twin

    def _meta(self) -> dict[str, Any]:
        return self._obj.setdefault("metadata", {})

    def label(self, key: str, value: str) -> Self:
        self._meta().setdefault("labels", {})[key] = value
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._meta().setdefault("annotations", {})[key] = value
        return self

    def meta(self, **fields: Any) -> Self:
        self._meta().update(fields)
        return self

    def namespace(self, ns: str) -> Self:
        self._meta()["namespace"] = ns
        return self

    def generate_name(self, prefix: str) -> Self:
        self._meta().pop("name", None)
        self._meta()["generateName"] = prefix
        return self

    def queue(self, name: str) -> Self:
        return self.label(names.QUEUE_LABEL, name)

    def wrap(self, value: str = "true") -> Self:
        return self.label(names.WRAP_LABEL, value)

    def owned_by(self, kind: str = "ReplicaSet", name: str = "owner") -> Self:
        self._meta()["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u-1", "controller": True}
        ]
        return self


def container(
    name: str = "main",
    *,
    gpus: int | None = None,
    resource: str = "nvidia.com/gpu",
    env: Mapping[str, str] | Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": IMAGE, "command": ["torchrun", "train.py"]}
    if gpus is not None:
        c["resources"] = {"limits": {resource: gpus}, "requests": {resource: gpus}}
    if env is not None:
        c["env"] = _env_list(env)
    return c


def _env_list(env: Mapping[str, str] | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(env, Mapping):
        return [{"name": k, "value": v} for k, v in env.items()]
    return [dict(e) for e in env]


def pod_template(
    *,
    gpus: int | None = None,
    resource: str = "nvidia.com/gpu",
    env: Mapping[str, str] | Sequence[dict[str, Any]] | None = None,
    init_containers: int = 0,
    containers: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            container(
                "main" if i == 0 else f"side{i}",
                gpus=gpus if i == 0 else None,
                resource=resource,
                env=env,
            )
            for i in range(containers)
        ],
    }
    if init_containers:
        spec["initContainers"] = [container(f"init{i}") for i in range(init_containers)]
    return {"spec": spec}


class VolcanoJobBuilder(Builder):
    """A Volcano Job; without any ``.task(...)`` it builds one task ``worker`` of one replica."""

    def __init__(self, name: str, ns: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if ns is not None:
            metadata["namespace"] = ns
        self._obj = {
            "apiVersion": VOLCANO_API,
            "kind": "Job",
            "metadata": metadata,
            "spec": {"schedulerName": "volcano", "tasks": []},
        }
        self._default_task = True

    def build(self) -> dict[str, Any]:
        obj = super().build()
        if self._default_task:
            obj["spec"]["tasks"] = [{"name": "worker", "replicas": 1, "template": pod_template()}]
        return obj

    def task(
        self,
        name: str | None,
        *,
        replicas: int | None = 1,
        gpus: int | None = None,
        resource: str = "nvidia.com/gpu",
        env: Mapping[str, str] | Sequence[dict[str, Any]] | None = None,
        init_containers: int = 0,
        containers: int = 1,
        min_available: int | None = None,
        partition: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> Self:
        task = _given(
            name=name,
            replicas=replicas,
            minAvailable=min_available,
            partitionPolicy=None if partition is None else dict(partition),
        )
        task["template"] = pod_template(
            gpus=gpus,
            resource=resource,
            env=env,
            init_containers=init_containers,
            containers=containers,
        )
        task.update(extra)
        self._default_task = False
        self._obj["spec"]["tasks"].append(task)
        return self

    def no_tasks(self) -> Self:
        self._default_task = False
        self._obj["spec"]["tasks"] = []
        return self

    def _task(self, name: str) -> dict[str, Any]:
        return next(t for t in self._obj["spec"]["tasks"] if t.get("name") == name)

    def template_spec(self, task: str, **fields: Any) -> Self:
        self._task(task)["template"]["spec"].update(fields)
        return self

    def template_meta(self, task: str, **fields: Any) -> Self:
        self._task(task)["template"].setdefault("metadata", {}).update(fields)
        return self

    def template_label(self, task: str, key: str, value: str) -> Self:
        meta = self._task(task)["template"].setdefault("metadata", {})
        meta.setdefault("labels", {})[key] = value
        return self

    def env(self, task: str, name: str, value: str, *, container_index: int = 0) -> Self:
        c = self._task(task)["template"]["spec"]["containers"][container_index]
        c.setdefault("env", []).append({"name": name, "value": value})
        return self

    def init_env(self, task: str, name: str, value: str) -> Self:
        c = self._task(task)["template"]["spec"]["initContainers"][0]
        c.setdefault("env", []).append({"name": name, "value": value})
        return self

    def container_field(self, task: str, key: str, value: Any, *, index: int = 0) -> Self:
        self._task(task)["template"]["spec"]["containers"][index][key] = value
        return self

    def task_field(self, task: str, key: str, value: Any) -> Self:
        self._task(task)[key] = value
        return self

    def spec(self, **fields: Any) -> Self:
        self._obj["spec"].update(fields)
        return self

    def topology(
        self, mode: str | None = "hard", tier: int | None = None, tier_name: str | None = None
    ) -> Self:
        self._obj["spec"]["networkTopology"] = _topology(mode, tier, tier_name)
        return self

    def partition_topology(
        self,
        task: str,
        mode: str | None = "hard",
        tier: int | None = None,
        tier_name: str | None = None,
    ) -> Self:
        self._task(task)["partitionPolicy"]["networkTopology"] = _topology(mode, tier, tier_name)
        return self

    def master(self, task: str) -> Self:
        return self.annotate(names.MASTER_TASK_ANNOTATION, task)

    def nproc(self, value: str) -> Self:
        return self.annotate(names.NPROC_ANNOTATION, value)

    def port(self, value: str) -> Self:
        return self.annotate(names.MASTER_PORT_ANNOTATION, value)


def _topology(mode: str | None, tier: int | None, tier_name: str | None) -> dict[str, Any]:
    return _given(mode=mode, highestTierAllowed=tier, highestTierName=tier_name)


def _given(**fields: Any) -> dict[str, Any]:
    """The fields a test gave a value, in order: None leaves a field out of the object, as a
    user who does not set it does (so tests reach the defaults and the missing-field checks)."""
    return {field: value for field, value in fields.items() if value is not None}


def training_job(
    name: str = "train",
    *,
    namespace: str,
    queue: str | None,
    masters: int = 1,
    workers: int = 3,
    gpus: int = 8,
    image: str = "torch:2.4",
    command: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
    scheduler: bool = True,
) -> dict[str, Any]:
    """The master/worker training Job users submit: ``trainer`` containers asking for ``gpus``
    GPUs each, labelled for ``queue`` unless ``labels`` says otherwise (``{}``: no label at all).
    ``scheduler=False`` leaves ``schedulerName`` to Volcano's defaulting."""
    job = VolcanoJobBuilder(name, ns=namespace)
    for task, replicas in (("master", masters), ("worker", workers)):
        job.task(task, replicas=replicas)
        trainer: dict[str, Any] = {"name": "trainer", "image": image}
        if command is not None:
            trainer["command"] = list(command)
        trainer["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
        job.template_spec(task, containers=[trainer])
    if labels is not None:
        job.meta(labels=dict(labels))
    elif queue is not None:
        job.queue(queue)
    obj = job.build()
    if not scheduler:
        del obj["spec"]["schedulerName"]
    return obj


# How users write a container's resources, each spelling kube-apiserver stores differently on
# the pod than on the Job's template (requests defaulted from limits, canonical quantities):
# the adopt-mode release must recognise every one of them as the admitted template.
RESOURCE_SPELLINGS: dict[str, dict[str, Any]] = {
    "limits-only": {"limits": {"nvidia.com/gpu": 1}},
    "requests-equal-limits": {
        "requests": {"nvidia.com/gpu": "1", "cpu": "1"},
        "limits": {"nvidia.com/gpu": "1", "cpu": "1"},
    },
    "integers": {"requests": {"cpu": 2}, "limits": {"nvidia.com/gpu": 1, "cpu": 2}},
    "fractions": {
        "requests": {"cpu": "0.5", "memory": "1024Mi"},
        "limits": {"cpu": "0.5", "memory": "1024Mi", "nvidia.com/gpu": 1},
    },
    "millis": {"requests": {"cpu": "1000m"}, "limits": {"nvidia.com/gpu": "1", "cpu": "1500m"}},
    "binary": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1536Mi", "nvidia.com/gpu": 1}},
    # Stored as "1m" on the pod: kube-apiserver rounds a Pod's quantities up to milli.
    "sub-milli": {"limits": {"nvidia.com/gpu": 1, "cpu": "0.0001"}},
}


def with_resources(job: dict[str, Any], resources: Mapping[str, Any]) -> dict[str, Any]:
    """``job`` with every task's first container asking for ``resources``."""
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(dict(resources))
    return job


def with_init_container(job: dict[str, Any], resources: Mapping[str, Any]) -> dict[str, Any]:
    """``job`` with an init container (asking for ``resources``) in every task."""
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        spec["initContainers"] = [{"name": "fetch", "image": "busybox:1.36",
                                   "command": ["true"], "resources": copy.deepcopy(dict(resources))}]  # fmt: skip
    return job
