"""Who made an AppWrapper, and whether it stands for the work a request asks for.

autowrap answers "your job was wrapped into AppWrapper X" and adopts an existing AppWrapper
only when X is autowrap's own and wraps that very work. Annotations prove nothing: anyone who
may create AppWrappers in the namespace can copy ``autowrap.io/spec-hash`` or
``autowrap.io/origin-uid`` onto one that runs something else. Two records can be trusted:

* the AppWrapper operator's user labels: its mutating webhook writes the *authenticated*
  requester's name and uid on every create, over whatever the object said, and its validating
  webhook freezes them (internal/webhook/appwrapper_webhook.go:95-98, :270-275). Where they
  are present they decide;
* where that webhook is not installed (the labels are absent), ``metadata.managedFields``: the
  apiserver records the field manager of the create, and autowrap creates with its own
  (``names.FIELD_MANAGER``). Anyone can name that manager deliberately, so this is the weaker
  record; the wrapped work is still compared whole.

Pure: the identity comes from the shell (a SelfSubjectReview of autowrap's credentials).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.model import names, objects
from webhook.model.objects import as_list, as_map

# pkg/utils/utils.go:624 (AppWrapper): Go's \w is ASCII letters, digits and underscore.
_NOT_LABEL_CHARACTER = re.compile(r"[^-_.0-9A-Za-z]")


@dataclass(frozen=True)
class Me:
    """autowrap's own identity as the apiserver authenticates it."""

    username: str
    uid: str = ""


def sanitize_label(value: str) -> str:
    """The AppWrapper operator's SanitizeLabel (pkg/utils/utils.go:627-637): cut to 63 bytes,
    every other character to ``_``, then ``-_.`` trimmed at both ends."""
    cut = value.encode()[:63].decode(errors="replace")
    return _NOT_LABEL_CHARACTER.sub("_", cut).strip("-_.")


def stranger(appwrapper: Mapping[str, Any], me: Me) -> str | None:
    """None when ``me`` created the AppWrapper; otherwise who did, as its records say, for a
    message ("was created by bob", "was not created by autowrap")."""
    labels = objects.labels_of(appwrapper)
    user = labels.get(names.APPWRAPPER_USER_LABEL)
    if user is not None:
        userid = labels.get(names.APPWRAPPER_USERID_LABEL, "")
        mine = user == sanitize_label(me.username) and (
            not me.uid or not userid or userid == sanitize_label(me.uid)
        )
        return None if mine else f"was created by {user or 'an unnamed user'}"
    for entry in as_list(as_map(appwrapper.get("metadata")).get("managedFields")):
        entry = as_map(entry)
        if entry.get("manager") == names.FIELD_MANAGER and not entry.get("subresource"):
            return None
    return "was not created by autowrap"


def component_template(appwrapper: Mapping[str, Any] | None) -> Any:
    """The wrapped object: the first component's template (autowrap makes one component)."""
    components = as_list(as_map(as_map(appwrapper).get("spec")).get("components"))
    return as_map(components[0]).get("template") if components else None


def same_work(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether ``existing`` wraps exactly the object ``wanted`` wraps, compared whole."""
    have, want = component_template(existing), component_template(wanted)
    return have is not None and objects.canonical_hash(have) == objects.canonical_hash(want)


def settings(appwrapper: Mapping[str, Any]) -> dict[str, str]:
    """What else decides how the work runs: its queue, priority and fault tolerance."""
    labels = objects.labels_of(appwrapper)
    keys = (names.QUEUE_LABEL, names.PRIORITY_LABEL)
    found: dict[str, str] = {k: labels[k] for k in keys if k in labels}
    found.update(
        (k, v)
        for k, v in objects.annotations_of(appwrapper).items()
        if k.startswith(names.FAULT_TOLERANCE_PREFIX)
    )
    return found
