"""Network-topology constraints: Volcano's enum and exclusivity, and the policy's maximum tier."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core.workload import TopologySlot
from webhook.model.fields import Violation, error, warning
from webhook.model.objects import as_map, int_or_none
from webhook.model.yamltext import shown


def check(slots: Iterable[TopologySlot], *, max_tier: int | None) -> list[Violation]:
    found: list[Violation] = []
    for slot in slots:
        if slot.value is None:
            continue
        if not isinstance(slot.value, dict):
            found.append(error(slot.path, "must be a map with mode and highestTierAllowed"))
            continue
        topo = as_map(slot.value)
        mode = topo.get("mode", "hard")
        if mode not in ("hard", "soft"):
            found.append(
                error(
                    slot.path.child("mode"),
                    f'{shown(mode)} is not a topology mode; use "hard" or "soft"',
                )
            )
        has_tier = "highestTierAllowed" in topo and topo["highestTierAllowed"] is not None
        has_name = "highestTierName" in topo and topo["highestTierName"] is not None
        if has_tier:
            tier = int_or_none(topo["highestTierAllowed"])
            path = slot.path.child("highestTierAllowed")
            if tier is None or tier < 0:
                found.append(
                    error(
                        path,
                        f"{shown(topo['highestTierAllowed'])} is not a tier; use an integer ≥ 0",
                    )
                )
            elif max_tier is not None and tier > max_tier:
                found.append(
                    error(
                        path,
                        f"tier {tier} is above the maximum {max_tier} this namespace's policy "
                        f"allows; use a tier ≤ {max_tier}",
                    )
                )
        if has_tier and has_name:
            found.append(
                error(
                    slot.path,
                    "must not specify 'highestTierAllowed' and 'highestTierName' simultaneously; "
                    "keep one of them",
                )
            )
        if mode == "hard" and not has_tier and not has_name:
            found.append(
                warning(
                    slot.path,
                    "hard mode without highestTierAllowed or highestTierName constrains nothing "
                    "(Volcano ≥ 1.14 has no default tier); set a tier",
                )
            )
    return found
