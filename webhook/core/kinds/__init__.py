"""The workload kinds autowrap can wrap, registered in one visible list.

To add a kind: write one module here implementing ``webhook.core.workload.KindAdapter`` (plus any
capability protocols it has) and add an instance to ``KINDS``. Nothing in ``plumbing/`` or
``rules/`` changes.
"""

from __future__ import annotations

from webhook.core.kinds.pod import PodKind
from webhook.core.kinds.volcano_job import VolcanoJobKind
from webhook.core.workload import KindAdapter

# Static conformance: mypy fails here if an adapter misses a method of the protocol.
_volcano: KindAdapter = VolcanoJobKind()
_pod: KindAdapter = PodKind()

KINDS: tuple[KindAdapter, ...] = (_volcano, _pod)


def _index(kinds: tuple[KindAdapter, ...]) -> dict[tuple[str, str], KindAdapter]:
    index: dict[tuple[str, str], KindAdapter] = {}
    for adapter in kinds:
        key = (adapter.api_version, adapter.kind)
        if key in index:
            raise ValueError(f"kind {adapter.kind} ({adapter.api_version}) is registered twice")
        index[key] = adapter
    return index


_BY_GVK = _index(KINDS)


def find(api_version: object, kind: object) -> KindAdapter | None:
    """The adapter for an object's apiVersion and kind, or None for kinds autowrap leaves alone."""
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return _BY_GVK.get((api_version, kind))
