"""The pod schema AppWrapper parses every podSet's spec with, and its snapshot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import podschema_snapshot
from webhook.model import podschema
from webhook.model.fields import FieldPath

SPEC = FieldPath(("spec",))
DATA = Path(__file__).resolve().parents[2] / "webhook" / "model" / "podschema_data.py"


def found(spec):
    return [(str(v.path), v.severity.value) for v in podschema.check_spec(spec, SPEC)]


def test_the_snapshot_matches_the_kubernetes_clients_models():
    expected = podschema_snapshot.render()
    if os.environ.get("AUTOWRAP_UPDATE_PODSCHEMA") == "1":
        DATA.write_text(expected)
    assert DATA.read_text() == expected, (
        "regenerate: AUTOWRAP_UPDATE_PODSCHEMA=1 pytest " + __file__
    )


def test_a_valid_spec_with_every_kind_of_value():
    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "hostNetwork": False,
        "nodeSelector": {"a": "b"},
        "overhead": {"cpu": 1},
        "containers": [
            {
                "name": "c",
                "image": "x",
                "command": ["a"],
                "ports": [{"containerPort": 80}],
                "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "4Gi"}},
                "readinessProbe": {"httpGet": {"port": "http", "path": "/"}},
                "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
            }
        ],
        "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}],
        "affinity": None,
    }
    assert found(spec) == []


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({"nodeSelectr": {}}, [("spec.nodeSelectr", "error")], id="unknown field"),
        pytest.param(
            {"containers": [{"name": "c", "ports": [{"containerPort": "80"}]}]},
            [("spec.containers[0].ports[0].containerPort", "error")],
            id="a quoted integer",
        ),
        pytest.param({"hostNetwork": "true"}, [("spec.hostNetwork", "error")], id="a quoted bool"),
        pytest.param(
            {"containers": {"name": "c"}}, [("spec.containers", "error")], id="not a list"
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"limits": {"cpu": "lots"}}}]},
            [("spec.containers[0].resources.limits[cpu]", "error")],
            id="not a quantity",
        ),
        pytest.param({"hostnameOverride": "h"}, [("spec.hostnameOverride", "warning")], id="1.34"),
        pytest.param({"workloadRef": {"name": "w"}}, [("spec.workloadRef", "warning")], id="1.35"),
        pytest.param(
            {"containers": [{"name": "c", "lifecycle": {"stopSignal": "SIGTERM"}}]},
            [("spec.containers[0].lifecycle.stopSignal", "warning")],
            id="1.33 inside a container",
        ),
    ],
)
def test_findings(spec, want):
    assert found(spec) == want
