"""Redirect mode: running the same command again changes nothing that runs.

Two updates a user makes without meaning to change anything, both by re-running what the docs
give (a CI job, a Makefile, a GitOps sync, a second run "to be sure"):

- ``autowrap render job.yaml | kubectl apply -f -`` once the AppWrapper is admitted. Kueue
  wrote ``podSetInfos`` into its components and ``suspend: false``; the manifest has neither.
  ``spec.components`` is a list without a merge key, so kubectl's three-way JSON merge patch
  (kubectl apply/patcher.go: a kind not in kubectl's scheme gets
  ``jsonmergepatch.CreateThreeWayJSONMergePatch``) and server-side apply both replace it whole,
  dropping Kueue's placement. ``render`` prints no ``spec.suspend`` (autowrap's and Kueue's
  webhooks suspend an AppWrapper on create), so the flip is never sent; this module keeps
  Kueue's ``podSetInfos`` (:func:`kept_kueue_state`). A manifest that does say
  ``suspend: true`` (written by hand, or by an earlier ``render``) re-applied over a running
  AppWrapper would stop it: while Kueue's Workload still holds an admission, that stop is not
  Kueue's and is undone (:func:`stops_the_same_work`, :func:`undone_stop`).
- ``kubectl apply -f job.yaml`` of the original Job once the AppWrapper created it. Before
  admission kubectl creates, and the create is answered with the redirect; after, kubectl finds
  the Job and patches it, and Volcano refuses with "job updates may not change fields other
  than …" about fields the user did not touch. The Job's spec is the AppWrapper's: the answer
  is the redirect again (:func:`component_update`).

Pure functions over plain dicts; ``webhook.admission`` calls them on UPDATE.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from webhook.model import names, objects
from webhook.model.objects import as_list, as_map

Obj = dict[str, Any]
KUEUE_FIELD = "podSetInfos"


def for_apply(appwrapper: Mapping[str, Any]) -> Obj:
    """An AppWrapper as ``render`` prints it for ``kubectl apply``: without ``spec.suspend``
    (any other object as it is).

    Kueue's AppWrapper webhook suspends an AppWrapper with a queue name on create
    (pkg/controller/jobframework/base_webhook.go ``Default`` → defaults.go
    ``ApplyDefaultForSuspend``; appwrapper.md §5), and so does autowrap's own AppWrapper webhook
    (``engine.complete``). A manifest that says ``suspend: true`` would send it again on every
    re-apply, and kubectl's three-way merge sends it whenever the stored value (Kueue's
    ``false``, once admitted) differs: the AppWrapper controller then deletes what runs
    (Running + suspend → Suspending; AppWrapper v1.2.1's webhook allows the change)."""
    result = dict(appwrapper)
    spec = as_map(result.get("spec"))
    if objects.is_appwrapper(appwrapper) and "suspend" in spec:
        result["spec"] = {k: v for k, v in spec.items() if k != "suspend"}
    return result


def kept_kueue_state(new: Mapping[str, Any], old: Mapping[str, Any]) -> Obj | None:
    """``new`` with the stored components' ``podSetInfos`` when an update re-sends the same
    work without them and leaves ``suspend`` as stored; None when there is nothing to keep.

    Kueue writes ``podSetInfos`` only together with a change of ``suspend`` (admission:
    ``RunWithPodSetsInfo`` and ``suspend: false`` in one update; preemption: ``suspend: true``
    and ``RestorePodSetsInfo``), so an update that drops them without touching ``suspend`` is
    never Kueue's: it is a re-apply. Any other change (a template, podSets, their number) is
    passed on unchanged, for the AppWrapper's own webhook to judge (components are immutable)."""
    if not objects.is_appwrapper(new) or not objects.is_appwrapper(old):
        return None
    new_spec, old_spec = as_map(new.get("spec")), as_map(old.get("spec"))
    if objects.is_suspended(new) != objects.is_suspended(old):
        return None
    new_components = as_list(new_spec.get("components"))
    old_components = as_list(old_spec.get("components"))
    if len(new_components) != len(old_components):
        return None
    kept: list[Any] = []
    for fresh, stored in zip(new_components, old_components, strict=True):
        fresh, stored = as_map(fresh), as_map(stored)
        if _work(fresh) != _work(stored):
            return None
        if KUEUE_FIELD in stored and KUEUE_FIELD not in fresh:
            kept.append({**fresh, KUEUE_FIELD: copy.deepcopy(stored[KUEUE_FIELD])})
        else:
            kept.append(dict(fresh))
    if kept == new_components:
        return None
    result = objects.deep_copy(dict(new))
    result["spec"]["components"] = kept
    return result


def stops_the_same_work(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether an update sets ``spec.suspend`` from false to true and re-sends the same work:
    a manifest that says ``suspend: true`` (written by hand, or printed by an earlier
    ``render``) applied again over a running AppWrapper, or Kueue's own preemption. Which of
    the two is decided on Kueue's Workload (:func:`undone_stop`)."""
    if not objects.is_appwrapper(new) or not objects.is_appwrapper(old):
        return False
    new_spec, old_spec = as_map(new.get("spec")), as_map(old.get("spec"))
    if not objects.is_suspended(new) or objects.is_suspended(old):
        return False
    new_components = as_list(new_spec.get("components"))
    old_components = as_list(old_spec.get("components"))
    return len(new_components) == len(old_components) and all(
        _work(as_map(a)) == _work(as_map(b))
        for a, b in zip(new_components, old_components, strict=True)
    )


def undone_stop(new: Mapping[str, Any], old: Mapping[str, Any]) -> Obj:
    """``new`` with the stored ``suspend`` and components (Kueue's ``podSetInfos`` included):
    the update leaves what runs alone. Used only while Kueue's Workload holds an admission,
    which Kueue takes back (``Evicted``, or no longer ``Admitted``) before it suspends a job
    itself (jobframework reconciler: an evicted Workload stops its job; a job running without
    an admitted Workload is stopped), so a stop that comes while Kueue still admits it is
    not Kueue's, and Kueue would start it again anyway, from scratch."""
    result = objects.deep_copy(dict(new))
    old_spec = as_map(old.get("spec"))
    if "suspend" in old_spec:
        result["spec"]["suspend"] = old_spec["suspend"]
    else:
        result["spec"].pop("suspend", None)
    result["spec"]["components"] = copy.deepcopy(list(as_list(old_spec.get("components"))))
    return result


def stop_warning(namespace: str, name: str) -> str:
    return (
        f"spec.suspend: true was not applied: Kueue admitted AppWrapper {namespace}/{name} and "
        "it runs, and suspending it would delete its pods (Kueue would start it again from "
        "scratch); leave spec.suspend out of the manifest. To stop it, delete it (kubectl "
        f"delete appwrapper {name} -n {namespace}) or deactivate its Workload (kubectl patch "
        'workload NAME --type merge -p \'{"spec":{"active":false}}\')'
    )


def _work(component: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in component.items() if k != KUEUE_FIELD}


def component_of(old: Mapping[str, Any]) -> str:
    """The AppWrapper that created this object (its controller), for an object autowrap did
    not adopt; "" otherwise. Adopted objects have their own UPDATE path
    (``adoption.normalize_update``)."""
    if names.ADOPTION_LABEL in objects.labels_of(old):
        return ""
    for reference in as_list(as_map(old.get("metadata")).get("ownerReferences")):
        reference = as_map(reference)
        if (
            reference.get("controller") is True
            and reference.get("kind") == "AppWrapper"
            and str(reference.get("apiVersion") or "").startswith(names.APPWRAPPER_GROUP + "/")
        ):
            return str(reference.get("name") or "")
    return ""


def component_update(new: Mapping[str, Any], old: Mapping[str, Any], namespace: str) -> str | None:
    """The answer to an update of the spec of an object an AppWrapper created (redirect mode's
    wrapped Job, once Kueue admitted it), or None when the update leaves the spec alone (labels,
    annotations, the garbage collector's owner references pass).

    The object's spec is the AppWrapper's copy (``spec.components[].template``): an update
    cannot change what the AppWrapper re-creates after a reset or preemption, and a size change
    would run more than Kueue admitted (which ``autowrap-adopted-job-size`` refuses in the
    apiserver itself, with autowrap up or down). So a re-applied manifest, changed or not, is
    answered as its create was: with the AppWrapper that stands for it."""
    aw_name = component_of(old)
    if not aw_name or new.get("spec") == old.get("spec"):
        return None
    kind = str(old.get("kind") or "object")
    name = objects.name_of(old)
    return (
        f"{kind} {namespace}/{name} was wrapped into AppWrapper {namespace}/{aw_name}; Kueue "
        f"admitted it and the AppWrapper created this {kind} from its own copy, which an update "
        "does not change (re-applying the manifest changes nothing). Follow it with: kubectl "
        f"get appwrapper {aw_name} -n {namespace}; to run a changed manifest, delete the "
        f"AppWrapper (kubectl delete appwrapper {aw_name} -n {namespace}) and apply it again"
    )
