"""The neutral view of a workload, and the adapter interface that produces it.

Plumbing and rules are written once against this interface and never import a kind module,
so adding PyTorchJob or JobSet means one new module in ``kinds/`` and one line in the
registry. The required protocol is small; what only some kinds do is a separate capability
protocol, probed with ``isinstance``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

from webhook.model.fields import FieldPath, Violation
from webhook.model.objects import Obj, as_list, as_map


@dataclass(frozen=True)
class Partition:
    """A group split into equal gangs (Volcano's ``partitionPolicy``)."""

    path: FieldPath
    total: int | None
    size: int | None
    minimum: int | None


@dataclass(frozen=True)
class PodGroup:
    """Pods that share one template: a Volcano task, or a single Pod.

    ``template_path`` locates the pod template inside the object (for a Pod, the object
    itself); ``podset_path`` is the same place in AppWrapper path syntax, or None where
    AppWrapper infers the podSet itself. ``pod_index_key`` names the pod annotation that the
    workload's controller sets to the pod's index within the group.
    """

    name: str
    replicas: int
    path: FieldPath
    template_path: FieldPath
    template: Mapping[str, Any]
    podset_path: str | None
    pod_index_key: str | None
    min_available: int | None = None
    partition: Partition | None = None


@dataclass(frozen=True)
class TopologySlot:
    """A place that can hold a network-topology spec, and whether it is job or partition level."""

    path: FieldPath
    value: object
    level: str  # "job" | "partition"


@dataclass(frozen=True)
class Dns:
    """How pods of the workload find each other.

    ``master_addr`` is the DNS name of node 0. ``patched`` is the object with whatever makes
    that name resolve (Volcano's svc plugin; a Pod's hostname/subdomain), and ``extra`` the
    objects that must live beside it (a Pod's headless Service).
    """

    master_addr: str
    patched: Obj
    extra: tuple[Obj, ...] = ()


class KindAdapter(Protocol):
    api_version: str
    kind: str
    resource: str
    # Whether the Kueue queue label alone asks for wrapping (true where Kueue cannot run the
    # kind itself, so the label can only mean "queue this through an AppWrapper").
    queue_label_requests_wrap: bool
    # The controllers that create objects of this kind, as (API group, kind) of the controller
    # ownerReference they set: in a `wrap: Always` namespace only such an owner exempts an
    # object from wrapping (any other ownerReference is refused). The one place this list lives.
    owner_kinds: frozenset[tuple[str, str]]

    def pod_groups(self, obj: Mapping[str, Any]) -> list[PodGroup]:
        """Every pod group, in spec order; never raises, whatever the object holds."""
        ...

    def master_group(self, obj: Mapping[str, Any], groups: Sequence[PodGroup]) -> PodGroup | None:
        """The group whose pod 0 is node 0 (the rendezvous host)."""
        ...

    def pod_name(self, obj: Mapping[str, Any], group: PodGroup, index: int) -> str:
        """The name (and DNS host label) of the index-th pod of a group."""
        ...

    def dns(self, obj: Obj, groups: Sequence[PodGroup], master: PodGroup, *, port: int) -> Dns:
        """Make node 0 resolvable by name from every pod; pure, returns a new object."""
        ...


@runtime_checkable
class HasTopology(Protocol):
    """Kinds whose spec carries network-topology constraints (Volcano ≥ 1.12)."""

    def topology_slots(
        self, obj: Mapping[str, Any], groups: Sequence[PodGroup]
    ) -> list[TopologySlot]:
        """Every place of ``obj`` that can hold a topology spec; ``groups`` are its pod groups."""
        ...


@runtime_checkable
class HasKindRules(Protocol):
    """Kinds with checks of their own (what their controller or webhook would refuse later)."""

    def check(self, obj: Mapping[str, Any]) -> list[Violation]: ...


@dataclass(frozen=True)
class PodAdditions:
    """What a workload's controller adds to one pod beyond its template, before the pod is
    created (Volcano's job plugins, ``OnPodCreate``).

    ``env`` is appended to every container (not init containers) after the template's entries,
    so where a name repeats one of autowrap's, kubelet gives the process this value (it keeps
    the last entry of a name). ``ports`` are added to every container that lacks that port
    number, and ``init_containers`` appended unless one of that name exists. ``source`` names
    the feature in words and ``path`` the field that asked for it.
    """

    source: str
    path: FieldPath
    env: tuple[tuple[str, str], ...] = ()
    ports: tuple[Mapping[str, Any], ...] = ()
    init_containers: tuple[Mapping[str, Any], ...] = ()


@runtime_checkable
class HasPodAdditions(Protocol):
    """Kinds whose controller adds env, ports or init containers to each pod it creates."""

    def pod_additions(
        self, obj: Mapping[str, Any], groups: Sequence[PodGroup]
    ) -> Callable[[PodGroup, int], list[PodAdditions]] | None:
        """What the controller adds to the ``index``-th pod of one of the object's ``groups``,
        in the order it adds it; None when the object enables nothing that adds to pods."""
        ...


@runtime_checkable
class HasServerDefaults(Protocol):
    """Kinds whose own admission fills fields of the spec in after create (Volcano's mutating
    webhook: task names, minAvailable, maxRetry, plugins)."""

    def with_server_defaults(self, spec: Any, stored: Any) -> Any:
        """``spec`` with each field that kind's admission fills in taken from ``stored`` where
        ``spec`` leaves it out; nothing else (a field the user removed stays removed)."""
        ...


@runtime_checkable
class HasControllerPods(Protocol):
    """Kinds whose own controller creates the pods from the object's templates (Volcano's job
    controller): how it names them and what it writes on them, so that a release can tell the
    pods it made from pods anyone else made to look like them."""

    def pod_claims(self, obj: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` says it is one of ``obj``'s by what the controller writes on it (a
        label or an annotation anyone may copy: enough to count it, never to release it)."""
        ...

    def claim_selectors(self, name: str) -> list[str]:
        """Label selectors that find the pods the controller made for the object ``name``."""
        ...

    def pod_mismatch(self, obj: Mapping[str, Any], group: PodGroup, pod: Mapping[str, Any]) -> str:
        """Empty when ``pod`` is one the controller makes for ``group`` of ``obj`` (its name,
        its annotations, its priority class); otherwise what differs."""
        ...

    def pod_position(self, obj: Mapping[str, Any], group: PodGroup, pod: Mapping[str, Any]) -> int:
        """Which of ``group``'s pods ``pod`` is (by the name the controller gives it), for
        what the controller adds per pod; 0 when its name is none of theirs."""
        ...


_CAPABLE: dict[tuple[type, Any], bool] = {}


def _capable(kind: type, capability: Any) -> bool:
    """``isinstance`` on a runtime-checkable protocol inspects every member on each call;
    adapters are few and fixed, so the answer is kept per adapter class."""
    key = (kind, capability)
    if key not in _CAPABLE:
        _CAPABLE[key] = issubclass(kind, capability)
    return _CAPABLE[key]


def has_topology(adapter: object) -> TypeGuard[HasTopology]:
    return _capable(type(adapter), HasTopology)


def has_kind_rules(adapter: object) -> TypeGuard[HasKindRules]:
    return _capable(type(adapter), HasKindRules)


def has_pod_additions(adapter: object) -> TypeGuard[HasPodAdditions]:
    return _capable(type(adapter), HasPodAdditions)


def pod_additions(
    adapter: object, obj: Mapping[str, Any], groups: Sequence[PodGroup]
) -> Callable[[PodGroup, int], list[PodAdditions]] | None:
    """What the kind's controller adds to each pod (None for kinds without the capability)."""
    if not has_pod_additions(adapter):
        return None
    return adapter.pod_additions(obj, groups)


def with_additions(pod: Obj, added: Sequence[PodAdditions]) -> Obj:
    """The pod as its controller creates it: ``added``'s env after every container's own, its
    ports where a container lacks that port number, its init containers where none has that
    name. A new pod; ``pod`` is not changed."""
    if not added:
        return pod
    spec = dict(as_map(pod.get("spec")))
    containers = []
    for raw in as_list(spec.get("containers")):
        container = dict(as_map(raw))
        for a in added:
            container["env"] = [
                *as_list(container.get("env")),
                *({"name": n, "value": v} for n, v in a.env),
            ]
            have = {as_map(p).get("containerPort") for p in as_list(container.get("ports"))}
            ports = [dict(p) for p in a.ports if p.get("containerPort") not in have]
            if ports:
                container["ports"] = [*as_list(container.get("ports")), *ports]
        containers.append(container)
    spec["containers"] = containers
    for a in added:
        have = {as_map(c).get("name") for c in as_list(spec.get("initContainers"))}
        extra = [dict(c) for c in a.init_containers if c.get("name") not in have]
        if extra:
            spec["initContainers"] = [*as_list(spec.get("initContainers")), *extra]
    return {**pod, "spec": spec}


def has_server_defaults(adapter: object) -> TypeGuard[HasServerDefaults]:
    return _capable(type(adapter), HasServerDefaults)


def has_controller_pods(adapter: object) -> TypeGuard[HasControllerPods]:
    return _capable(type(adapter), HasControllerPods)
