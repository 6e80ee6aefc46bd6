"""Policy tests (``autowrap test``): manifests with the outcome each should get under a policy set.

A test file is named ``autowrap-test.yaml`` (``autowrap test DIR`` finds every one under DIR,
as ``kyverno test`` finds ``kyverno-test.yaml``). Paths in it are relative to the file::

    apiVersion: autowrap.io/v1alpha1
    kind: PolicyTest
    name: shipped-policies
    policies: ../policies              # a policy file or directory
    cases:
      - name: a labeled job in team-a gets the team's queue
        manifest: manifests/job.yaml   # one or more documents
        namespace: team-a              # for documents that name none (default: default)
        namespaceLabels: {}            # the namespace's labels, for label-selected policies
        expect:                        # one entry per document, in order
          - object: Job/train          # optional: kind/name of the document
            result: wrapped            # wrapped | completed | rejected | unchanged
            policy: team-a             # optional; null: no policy covers the namespace
            queue: team-a-queue        # optional: the AppWrapper's queue
            violations: [spec.tasks[0].replicas]   # optional: exactly these paths
            warnings: []               # optional: exactly these paths

Parsing and comparing are pure; ``autowrap test`` reads the files and runs ``engine.admit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from webhook.cli.summary import Result, Summary
from webhook.core import policyerrors
from webhook.model import names, objects, yamltext

TEST_FILE = "autowrap-test.yaml"


class TestFileError(Exception):
    """A test file that cannot be used; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Expectation(_Model):
    object: str | None = None
    result: Result
    policy: str | None = None
    queue: str | None = None
    violations: tuple[str, ...] | None = None
    warnings: tuple[str, ...] | None = None


class Case(_Model):
    name: str = Field(min_length=1)
    manifest: str = Field(min_length=1)
    namespace: str = "default"
    namespace_labels: dict[str, str] = Field(default_factory=dict, alias="namespaceLabels")
    expect: tuple[Expectation, ...] = Field(min_length=1)


class TestFile(_Model):
    api_version: Literal["autowrap.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["PolicyTest"]
    name: str = Field(min_length=1)
    policies: str = Field(min_length=1)
    cases: tuple[Case, ...] = Field(min_length=1)


def parse(text: str, *, source: str) -> TestFile:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TestFileError(yamltext.yaml_error(source, exc, text)) from None
    if not isinstance(doc, dict):
        raise TestFileError(f"{source}: expected a mapping with kind: PolicyTest")
    try:
        return TestFile.model_validate(doc)
    except ValidationError as exc:
        problems = policyerrors.describe_all(TestFile, exc.errors())
        raise TestFileError(f"{source}: {problems}") from None


def compare(
    expected: Expectation, obj: Mapping[str, Any], got: Summary, produced: object
) -> list[str]:
    """What differs between an expectation and what a document got (its summary, and the
    object admission produced); empty when the expectation holds."""
    problems: list[str] = []
    if expected.object is not None:
        actual = f"{obj.get('kind')}/{objects.name_of(obj)}"
        if actual != expected.object:
            problems.append(f"object: expected {expected.object}, the document is {actual}")
    if got.result is not expected.result:
        why = "; ".join(f.render() for f in got.violations) or got.reason
        problems.append(f"result: expected {expected.result.value}, got {got.result.value} ({why})")
    if "policy" in expected.model_fields_set and got.policy != expected.policy:
        problems.append(f"policy: expected {expected.policy}, got {got.policy}")
    if expected.queue is not None:
        queue = queue_of(produced)
        if queue != expected.queue:
            problems.append(f"queue: expected {expected.queue}, got {queue}")
    for label, want, have in (
        ("violations", expected.violations, got.violations),
        ("warnings", expected.warnings, got.warnings),
    ):
        if want is None:
            continue
        paths = [f.path for f in have]
        missing = [p for p in want if p not in paths]
        extra = [f.render() for f in have if f.path not in want]
        if missing:
            problems.append(f"{label}: expected at {', '.join(missing)}, got none there")
        if extra:
            problems.append(f"{label}: not expected: {'; '.join(extra)}")
    return problems


def queue_of(produced: object) -> str | None:
    """The queue a produced object is queued in: an AppWrapper's queue label, or (adopt mode)
    the queue annotation admission writes on the object."""
    if not isinstance(produced, Mapping):
        return None
    return objects.labels_of(produced).get(names.QUEUE_LABEL) or objects.annotations_of(
        produced
    ).get(names.QUEUE_ANNOTATION)
