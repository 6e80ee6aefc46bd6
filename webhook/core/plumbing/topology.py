"""Network-topology defaults from policy, at job level and at partition level.

Volcano ≥ 1.14 has no default tier, so a job without ``networkTopology`` is placed anywhere;
the platform's default states what "close enough" means for its fabric.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core.policy import TopologyPolicy
from webhook.core.workload import TopologySlot
from webhook.model import objects
from webhook.model.objects import Obj


def apply_defaults(obj: Obj, slots: Iterable[TopologySlot], policy: TopologyPolicy) -> Obj:
    defaults = {"job": policy.default, "partition": policy.partition_default}
    result = obj
    for slot in slots:
        default = defaults.get(slot.level)
        if slot.value is None and default is not None:
            if result is obj:
                result = dict(obj)
            objects.put(result, slot.path, default.as_spec())
    return result
