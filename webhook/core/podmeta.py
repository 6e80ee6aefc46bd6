"""Pods waiting for a release, as the controller's cache keeps them: from their metadata alone.

The controller follows labelled pods that autowrap has not released (its watch selects
``workload.codeflare.dev/appwrapper,!autowrap.io/released``), and anyone who may create pods
can label theirs so, and fill them up to what the apiserver stores. So the watch asks for
metadata only (PartialObjectMetadata), and the cache keeps of it a few bounded fields: which
AppWrapper the pod names, its podSet, its controller, whether it is being deleted and its
``generation``. That is enough to know which AppWrapper to look at and when; the decisions
themselves (what to release, which pods run without Kueue's admission) read the pods live.

``generation`` says whether anything may have taken the gate off: the apiserver counts every
change of a pod's spec in it (KEP-5067, Pod Generation, from Kubernetes 1.33), and a pod is
created with its gate, so a pod at generation 1 still has it. Autowrap's own release changes
the spec too, but the same write labels the pod released, which takes it out of the watch.
A cluster that does not count (no ``generation``) is read live whenever it matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.adoption import PODSET_ANNOTATION
from webhook.model import names
from webhook.model.objects import as_list, as_map

Obj = dict[str, Any]

# Anything longer is not a podSet index admission wrote; cut, so that it costs nothing kept.
_PODSET_CHARS = 8
_KEPT = ("name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp")
_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")


def waiting_pod(pod: Mapping[str, Any]) -> Obj | None:
    """A labelled pod not released yet, from its metadata, as the cache keeps it; None for a
    pod no admission of autowrap's prepared (no podSet annotation): never released, so never
    cached. The result holds the same few short fields whatever the pod carries."""
    metadata = as_map(pod.get("metadata"))
    annotations = as_map(metadata.get("annotations"))
    podset = annotations.get(PODSET_ANNOTATION)
    if podset is None:
        return None
    kept: Obj = {k: metadata[k] for k in _KEPT if k in metadata}
    aw_name = as_map(metadata.get("labels")).get(names.APPWRAPPER_LABEL)
    kept["labels"] = {names.APPWRAPPER_LABEL: aw_name} if isinstance(aw_name, str) else {}
    kept["annotations"] = {PODSET_ANNOTATION: str(podset)[:_PODSET_CHARS]}
    controller = next(
        (as_map(r) for r in as_list(metadata.get("ownerReferences"))
         if as_map(r).get("controller") is True),
        None,
    )  # fmt: skip
    if controller is not None:
        kept["ownerReferences"] = [{k: controller[k] for k in _OWNER_KEYS if k in controller}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept}


def spec_changed(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's spec may have changed since it was created (its gate taken off among
    other things): a ``generation`` above 1, or none counted."""
    generation = as_map(pod.get("metadata")).get("generation")
    return not isinstance(generation, int) or generation > 1
