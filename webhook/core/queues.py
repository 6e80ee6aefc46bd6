"""Whether a Kueue ClusterQueue lets adopt mode work, from the ClusterQueue itself.

Adopt mode gates pods and releases them once Kueue admits the AppWrapper. Two kinds of
ClusterQueue break that: one whose admission checks send work to other clusters (MultiKueue: the
local AppWrapper controller ignores the AppWrapper, adopt-mode.md Q6), and one whose flavors
place pods by topology (TAS: Kueue's topology gate cannot be added to pods that already exist,
Q5). Admission then redirects, and ``autowrap doctor`` says so. Pure: the caller reads the
ClusterQueue and answers, per flavor name, whether its ResourceFlavor names a topology.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.model.objects import as_list, as_map


def admission_checks(cluster_queue: Mapping[str, Any]) -> list[str]:
    """The admission checks a ClusterQueue names, in either of Kueue's two fields."""
    spec = as_map(cluster_queue.get("spec"))
    checks = [str(c) for c in as_list(spec.get("admissionChecks"))]
    strategy = as_list(as_map(spec.get("admissionChecksStrategy")).get("admissionChecks"))
    return checks + [str(as_map(c).get("name")) for c in strategy]


def flavor_names(cluster_queue: Mapping[str, Any]) -> list[str]:
    """Every ResourceFlavor the ClusterQueue's resource groups use, in order."""
    spec = as_map(cluster_queue.get("spec"))
    return [
        str(as_map(flavor).get("name") or "")
        for group in as_list(spec.get("resourceGroups"))
        for flavor in as_list(as_map(group).get("flavors"))
    ]


def redirect_reason(
    name: str, cluster_queue: Mapping[str, Any], has_topology: Callable[[str], bool]
) -> str | None:
    """Why adopt mode cannot serve this ClusterQueue, or None when it can."""
    if any("multikueue" in c.lower() for c in admission_checks(cluster_queue)):
        return f"ClusterQueue {name!r} sends work to other clusters (MultiKueue)"
    for flavor in flavor_names(cluster_queue):
        if has_topology(flavor):
            return (
                f"ClusterQueue {name!r} uses topology-aware scheduling (ResourceFlavor {flavor!r})"
            )
    return None
