"""Building the AppWrapper around a wrap candidate: cleaning, naming, origin and hash.

The builder only encloses; everything the AppWrapper needs beyond that (plumbing, podSets,
queue and fault-tolerance defaults) is added by the same completion that serves AppWrappers
users submit themselves, so a wrapped object and a hand-written AppWrapper converge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.rules import podsets
from webhook.model import dnsnames, names, objects
from webhook.model.fields import FieldPath
from webhook.model.objects import Obj, as_list, as_map

_SERVER_FIELDS = (
    "uid",
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "namespace",
)
_MOVED_LABELS = (names.QUEUE_LABEL, names.PRIORITY_LABEL)
_DROPPED_LABELS = (names.WRAP_LABEL, names.KUEUE_MANAGED_LABEL, names.APPWRAPPER_LABEL)
_TOKEN_VOLUME_PREFIX = "kube-api-access-"


def clean(obj: Mapping[str, Any], template_paths: Iterable[FieldPath]) -> Obj:
    """The object as a component: no server-set fields, no status, no trigger label, and none of
    what Kueue's pod webhook may have added (its labels, finalizer, gates), which would keep the
    wrapped pods gated forever."""
    result = objects.deep_copy(dict(obj))
    result.pop("status", None)
    metadata = result.get("metadata")
    if isinstance(metadata, dict):
        for key in _SERVER_FIELDS:
            metadata.pop(key, None)
        _drop_keys(
            metadata,
            "annotations",
            (names.LAST_APPLIED_ANNOTATION,),
            prefixes=(names.FAULT_TOLERANCE_PREFIX,),
        )
        _drop_keys(metadata, "labels", _MOVED_LABELS + _DROPPED_LABELS)
        finalizers = [f for f in as_list(metadata.get("finalizers")) if f != names.KUEUE_FINALIZER]
        if finalizers:
            metadata["finalizers"] = finalizers
        else:
            metadata.pop("finalizers", None)
    for path in template_paths:
        template = objects.get(result, path)
        if isinstance(template, dict):
            _clean_pod_template(template)
    return result


def _clean_pod_template(template: dict[str, Any]) -> None:
    metadata = template.get("metadata")
    if isinstance(metadata, dict):
        _drop_keys(metadata, "labels", _MOVED_LABELS + _DROPPED_LABELS)
        _drop_keys(metadata, "annotations", names.KUEUE_POD_ANNOTATIONS)
    spec = template.get("spec")
    if not isinstance(spec, dict):
        return
    gates = [
        g
        for g in as_list(spec.get("schedulingGates"))
        if as_map(g).get("name") not in names.KUEUE_GATES
    ]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    _drop_token_volume(spec)


def _drop_token_volume(spec: dict[str, Any]) -> None:
    """The ServiceAccount admission plugin's projected token volume names a token of *this*
    pod; the pod the AppWrapper creates later gets its own."""
    injected = {
        v["name"]
        for v in as_list(spec.get("volumes"))
        if isinstance(v, dict)
        and str(v.get("name", "")).startswith(_TOKEN_VOLUME_PREFIX)
        and "projected" in v
    }
    if not injected:
        return
    spec["volumes"] = [v for v in spec["volumes"] if as_map(v).get("name") not in injected]
    if not spec["volumes"]:
        del spec["volumes"]
    for list_name in ("initContainers", "containers"):
        for container in as_list(spec.get(list_name)):
            if isinstance(container, dict) and isinstance(container.get("volumeMounts"), list):
                mounts = [
                    m for m in container["volumeMounts"] if as_map(m).get("name") not in injected
                ]
                if mounts:
                    container["volumeMounts"] = mounts
                else:
                    del container["volumeMounts"]


def _drop_keys(
    metadata: dict[str, Any], field: str, keys: Iterable[str], prefixes: tuple[str, ...] = ()
) -> None:
    current = metadata.get(field)
    if not isinstance(current, dict):
        return
    for key in list(current):
        if key in keys or (prefixes and str(key).startswith(prefixes)):
            del current[key]
    if not current:
        del metadata[field]


def fault_tolerance(obj: Mapping[str, Any]) -> dict[str, str]:
    return {
        k: v
        for k, v in objects.annotations_of(obj).items()
        if k.startswith(names.FAULT_TOLERANCE_PREFIX)
    }


def appwrapper_name(obj: Mapping[str, Any], *, seed: str) -> str:
    """The object's name where it can serve (a DNS-1123 label of at most 61 characters, so that
    Kueue's podSet names ``<name>-<i>`` stay labels); otherwise a stable derived name."""
    own = objects.name_of(obj)
    limit = names.APPWRAPPER_MAX_NAME
    if own and len(own) <= limit and dnsnames.is_dns1123_label(own):
        return own
    suffix = objects.canonical_hash([own, seed])[:5]
    if own:
        base = dnsnames.to_label(own, limit=limit - 6, fallback="aw")
        return f"{base}-{suffix}"
    prefix = str(as_map(obj.get("metadata")).get("generateName") or "")
    base = dnsnames.to_label(prefix, limit=limit - 6, fallback="aw")
    return f"{base}-{suffix}"


def deployed_components(appwrapper: Mapping[str, Any]) -> list[Obj]:
    """Each component as the AppWrapper controller will create it: the template in the
    AppWrapper's namespace with the label ``workload.codeflare.dev/appwrapper: <name>`` on the
    object and on every podSet's pod template (resource_management.go:217-348, A2 in
    adopt-mode.md). The label also keeps autowrap's own wrap webhooks away from it. Kueue's
    podSetInfos are not known before admission and are left out."""
    metadata = as_map(appwrapper.get("metadata"))
    name, namespace = metadata.get("name"), metadata.get("namespace")
    found: list[Obj] = []
    for component in as_list(as_map(appwrapper.get("spec")).get("components")):
        template = as_map(component).get("template")
        if not isinstance(template, dict):
            continue
        obj = objects.deep_copy(template)
        meta = objects.own_map(obj, "metadata")
        if namespace:
            meta["namespace"] = namespace
        objects.own_map(meta, "labels")[names.APPWRAPPER_LABEL] = str(name)
        for podset in as_list(as_map(component).get("podSets")):
            resolved = podsets.resolve(obj, str(as_map(podset).get("path", "")))
            if isinstance(resolved, str):
                continue
            pod_template = objects.get(obj, FieldPath(resolved[1].parts[1:]))
            if isinstance(pod_template, dict):
                labels = objects.own_map(objects.own_map(pod_template, "metadata"), "labels")
                labels[names.APPWRAPPER_LABEL] = str(name)
        found.append(obj)
    return found


def enclose(
    component: Obj,
    *,
    name: str,
    namespace: str | None,
    queue: str | None,
    priority: str | None,
    fault_tolerance: Mapping[str, str],
    origin: Mapping[str, str],
) -> Obj:
    labels = {}
    if queue:
        labels[names.QUEUE_LABEL] = queue
    if priority:
        labels[names.PRIORITY_LABEL] = priority
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = labels
    metadata["annotations"] = {**origin, **fault_tolerance}
    return {
        "apiVersion": names.APPWRAPPER_API_VERSION,
        "kind": "AppWrapper",
        "metadata": metadata,
        "spec": {"suspend": True, "components": [{"template": component}]},
    }
