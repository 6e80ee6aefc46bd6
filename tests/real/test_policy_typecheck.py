"""Every ValidatingAdmissionPolicy autowrap installs type-checks cleanly on kube-apiserver.

kube-apiserver type-checks each expression of a policy against every kind its
matchConstraints match and writes what it finds to ``status.typeChecking`` once it has
checked the policy's generation (``status.observedGeneration``). A warning there is an
expression that reads a field some matched kind does not have: at request time it is an
evaluation error, which ``failurePolicy: Fail`` turns into a refusal. The emulator in
testbed/admission_policy.py does not type-check; only the real apiserver says this.
"""

from __future__ import annotations

from typing import Any

import pytest

from testbed.real.cluster import RealCluster
from tests.real.support import eventually, kubectl_json

pytestmark = pytest.mark.real

Obj = dict[str, Any]
POLICY = "ValidatingAdmissionPolicy"


def installed_policies(cluster: RealCluster) -> list[str]:
    return sorted(
        str(o["metadata"]["name"]) for o in cluster.autowrap_objects if o.get("kind") == POLICY
    )


def type_checked(cluster: RealCluster, name: str) -> Obj | None:
    """The policy's ``status.typeChecking``, once the apiserver has checked the generation
    installed; None before."""
    policy = kubectl_json(cluster, "get", "validatingadmissionpolicy", name)
    status = policy.get("status") or {}
    if status.get("observedGeneration") != policy["metadata"].get("generation"):
        return None
    checked = status.get("typeChecking")
    return checked if isinstance(checked, dict) else None


def test_every_installed_policy_type_checks_without_a_warning(real_cluster: RealCluster) -> None:
    policies = installed_policies(real_cluster)
    assert policies, "deploy/ installs no ValidatingAdmissionPolicy"

    def all_checked() -> dict[str, Obj] | None:
        found = {name: type_checked(real_cluster, name) for name in policies}
        if any(checked is None for checked in found.values()):
            return None
        return {name: checked for name, checked in found.items() if checked is not None}

    checked = eventually(all_checked, what=f"kube-apiserver type-checking {', '.join(policies)}")
    warnings = [
        f"{name} {warning.get('fieldRef')}: {warning.get('warning')}"
        for name, result in sorted(checked.items())
        for warning in result.get("expressionWarnings") or []
    ]
    assert not warnings, "type-checking warnings:\n" + "\n\n".join(warnings)
