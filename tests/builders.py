"""Fluent builders for test inputs and expected values (Kueue's ``testing/wrappers`` style).

Every builder starts from a valid default, every method returns the builder, ``build()``
returns a fresh dict (mutating it never affects the builder) and ``clone()`` forks a builder.

    job = volcano_job("train", ns="ml").task("worker", replicas=3, gpus=8).queue("team-a")
    obj = job.build()
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Self

import yaml

from webhook.core import engine
from webhook.core import policy as policy_mod
from webhook.model import names

VOLCANO_API = "batch.volcano.sh/v1alpha1"
IMAGE = "registry.example.com/ml/torch:2.4"


class _Builder:
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


class VolcanoJobBuilder(_Builder):
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
        task: dict[str, Any] = {}
        if name is not None:
            task["name"] = name
        if replicas is not None:
            task["replicas"] = replicas
        if min_available is not None:
            task["minAvailable"] = min_available
        if partition is not None:
            task["partitionPolicy"] = dict(partition)
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
    topo: dict[str, Any] = {}
    if mode is not None:
        topo["mode"] = mode
    if tier is not None:
        topo["highestTierAllowed"] = tier
    if tier_name is not None:
        topo["highestTierName"] = tier_name
    return topo


class PodBuilder(_Builder):
    def __init__(self, name: str = "solo", ns: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if ns is not None:
            metadata["namespace"] = ns
        self._obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, **pod_template()}

    def gpus(self, count: int, resource: str = "nvidia.com/gpu") -> Self:
        c = self._obj["spec"]["containers"][0]
        c["resources"] = {"limits": {resource: count}, "requests": {resource: count}}
        return self

    def env(self, name: str, value: str) -> Self:
        self._obj["spec"]["containers"][0].setdefault("env", []).append(
            {"name": name, "value": value}
        )
        return self

    def spec(self, **fields: Any) -> Self:
        self._obj["spec"].update(fields)
        return self


class AppWrapperBuilder(_Builder):
    def __init__(self, name: str = "aw", ns: str | None = None) -> None:
        metadata: dict[str, Any] = {"name": name}
        if ns is not None:
            metadata["namespace"] = ns
        self._obj = {
            "apiVersion": names.APPWRAPPER_API_VERSION,
            "kind": "AppWrapper",
            "metadata": metadata,
            "spec": {"components": []},
        }

    def component(
        self, template: Mapping[str, Any], podsets: Sequence[Mapping[str, Any]] | None = None
    ) -> Self:
        comp: dict[str, Any] = {"template": copy.deepcopy(dict(template))}
        if podsets is not None:
            comp["podSets"] = [dict(p) for p in podsets]
        self._obj["spec"]["components"].append(comp)
        return self

    def suspend(self, value: bool = True) -> Self:
        self._obj["spec"]["suspend"] = value
        return self

    def fault_tolerance(self, key: str, value: str) -> Self:
        return self.annotate(names.FAULT_TOLERANCE_PREFIX + key, value)


class PolicyBuilder(_Builder):
    """A policy document; defaults to every namespace, wrap Always, default queue ``q``."""

    def __init__(self, name: str = "test") -> None:
        self._obj = {
            "apiVersion": "autowrap.io/v1alpha1",
            "kind": "Policy",
            "metadata": {"name": name},
            "spec": {
                "namespaces": {"names": ["*"]},
                "wrap": "Always",
                "queue": {"default": "q"},
            },
        }

    def _spec(self) -> dict[str, Any]:
        return self._obj["spec"]

    def names(self, *patterns: str) -> Self:
        if patterns:
            self._spec()["namespaces"]["names"] = list(patterns)
        else:
            self._spec()["namespaces"].pop("names", None)
        return self

    def exclude(self, *patterns: str) -> Self:
        self._spec()["namespaces"]["exclude"] = list(patterns)
        return self

    def selector(self, match_labels: Mapping[str, str] | None = None, **extra: Any) -> Self:
        sel: dict[str, Any] = {}
        if match_labels:
            sel["matchLabels"] = dict(match_labels)
        sel.update(extra)
        self._spec()["namespaces"]["selector"] = sel
        return self

    def opt_in(self) -> Self:
        self._spec()["wrap"] = "OptIn"
        return self

    def audit(self) -> Self:
        self._spec()["enforcement"] = "Audit"
        return self

    def queues(self, default: str | None = None, allowed: Sequence[str] = ()) -> Self:
        q: dict[str, Any] = {}
        if default is not None:
            q["default"] = default
        if allowed:
            q["allowed"] = list(allowed)
        self._spec()["queue"] = q
        return self

    def ft_defaults(self, **values: str) -> Self:
        self._spec().setdefault("faultTolerance", {})["defaults"] = dict(values)
        return self

    def ft_caps(self, **values: str) -> Self:
        self._spec().setdefault("faultTolerance", {})["caps"] = dict(values)
        return self

    def master_port(self, port: int) -> Self:
        self._spec()["masterPort"] = port
        return self

    def accelerators(self, *resources: str) -> Self:
        self._spec()["accelerators"] = list(resources)
        return self

    def reserved_env(self, *env_names: str) -> Self:
        self._spec()["reservedEnv"] = list(env_names)
        return self

    def topology(self, **fields: Any) -> Self:
        self._spec()["topology"] = fields
        return self

    def set(self, **fields: Any) -> Self:
        self._spec().update(fields)
        return self

    def yaml(self) -> str:
        return yaml.safe_dump(self.build(), sort_keys=False)

    def parsed(self) -> policy_mod.Policy:
        return policy_mod.parse(self.yaml(), source=f"{self._obj['metadata']['name']}.yaml")[0]


def volcano_job(name: str = "train", ns: str | None = None) -> VolcanoJobBuilder:
    return VolcanoJobBuilder(name, ns)


def pod(name: str = "solo", ns: str | None = None) -> PodBuilder:
    return PodBuilder(name, ns)


def appwrapper(name: str = "aw", ns: str | None = None) -> AppWrapperBuilder:
    return AppWrapperBuilder(name, ns)


def policy(name: str = "test") -> PolicyBuilder:
    return PolicyBuilder(name)


def policy_set(*builders: PolicyBuilder) -> policy_mod.PolicySet:
    chosen = builders or (PolicyBuilder(),)
    return policy_mod.build([(f"{b.build()['metadata']['name']}.yaml", b.yaml()) for b in chosen])


def context(
    *builders: PolicyBuilder,
    ns: str = "ml",
    labels: Mapping[str, str] | None = None,
    user: str = "",
    uid: str = "",
) -> engine.Context:
    return engine.Context(
        policies=policy_set(*builders),
        namespace=ns,
        namespace_labels=dict(labels or {}),
        user=user,
        uid=uid,
    )


def spec_of(policy_builder: PolicyBuilder | None = None) -> policy_mod.PolicySpec:
    return (policy_builder or PolicyBuilder()).parsed().spec
