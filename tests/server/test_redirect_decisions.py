"""Redirect mode's decisions, one AdmissionReview at a time: ``admission.review_body`` with the
real ``kubernetes`` client against the fake API, without the apiserver emulator in front (the
whole chain is ``test_e2e.py``'s), so that each case costs a few API calls.

What is asserted is what a client and a user act on: the status code and reason of the
denial, the AppWrapper it names in its details, the AppWrapper stored, what the request line
records, and the parts of the redirect message (the object, the AppWrapper, whether it was a
dry run, the queue).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from testbed.apiserver import UserInfo
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import APPWRAPPERS
from testbed.policies import in_mode
from testbed.redirect import ALICE, MALLORY, NAMESPACE, QUEUE, REPO, pod, vcjob
from testbed.scenarios import admission_request, review
from webhook import admission
from webhook.core import audit, policy
from webhook.core.policy import PolicySet
from webhook.model import names
from webhook.shell import policyfiles
from webhook.shell.kube import KubeClient

Obj = dict[str, Any]

# The redirect message, by its parts: what was submitted, where it went, whether it was a dry
# run, and the queue Kueue holds it in.
REDIRECT = re.compile(
    r"(?P<kind>\w+) (?P<namespace>[a-z0-9-]+)/(?P<name>[a-z0-9.-]+) was wrapped into AppWrapper "
    r"(?P<aw_namespace>[a-z0-9-]+)/(?P<appwrapper>[a-z0-9.-]+)"
    r"(?P<dry_run> \(dry run: nothing was created\))?; "
    r"Kueue queues it in '(?P<queue>[^']*)' and creates the (?P<created>\w+) once admitted\. "
    r"Follow it with: kubectl get appwrapper (?P<follow>[a-z0-9.-]+) -n (?P<follow_ns>[a-z0-9-]+)"
)


@dataclass
class Answer:
    response: Obj
    record: admission.Record

    @property
    def allowed(self) -> bool:
        return bool(self.response["allowed"])

    @property
    def status(self) -> Obj:
        status: Obj = self.response.get("status") or {}
        return status

    @property
    def code_and_reason(self) -> tuple[int, str]:
        return self.status.get("code", 200), self.status.get("reason", "")

    @property
    def message(self) -> str:
        return str(self.status.get("message", ""))

    @property
    def warnings(self) -> list[str]:
        return list(self.response.get("warnings") or [])

    def redirect(self) -> dict[str, str | None]:
        """The redirect message's parts; fails when the answer is not a whole redirect."""
        assert self.code_and_reason == (403, "Forbidden"), self.message
        found = REDIRECT.fullmatch(self.message)
        assert found is not None, self.message
        return found.groupdict()


@dataclass
class Redirect:
    kube: FakeCluster
    deps: admission.Deps

    async def validate(
        self,
        obj: Obj,
        *,
        user: UserInfo = ALICE,
        dry_run: bool = False,
        name: str | None = None,
        deps: admission.Deps | None = None,
    ) -> Answer:
        """/validate's answer to a create of ``obj``; ``name`` overrides the request's name."""
        request = admission_request(obj, user=user, dry_run=dry_run)
        if name is not None:
            request["name"] = name
        record = admission.Record(webhook="validate")
        response = (await admission.review_body(
            orjson.dumps(review(request)), webhook="validate", timeout=10,
            deps=deps or self.deps, record=record,
        ))["response"]  # fmt: skip
        answer = Answer(response, record)
        # What every answer keeps: the apiserver drops a response for another uid
        # (admissionreview.go), and the request line counts what the answer carried and, for
        # a refusal, its code.
        assert response["uid"] == request["uid"]
        assert record.warnings == len(answer.warnings)
        if record.decision in ("rejected", "api-error"):
            assert record.code == answer.code_and_reason[0]
        return answer

    def research(self) -> None:
        """Label the namespace for the research-audit policy (Audit: rejections become
        ``(audit) ...`` warnings); before the first request, as the client caches labels."""
        self.kube.add_namespace(NAMESPACE, {"autowrap.io/tier": "research"})

    def appwrappers(self) -> dict[tuple[str, str], Obj]:
        return self.kube.appwrappers()


@pytest.fixture(scope="module")
def redirect_policies(tmp_path_factory: pytest.TempPathFactory) -> PolicySet:
    """The shipped policies, every one in Redirect mode (loaded once: a policy set is frozen)."""
    return policyfiles.load(in_mode(REPO / "policies", tmp_path_factory.mktemp("policies"),
                                    "Redirect"))  # fmt: skip


@pytest.fixture
async def redirect(
    fake_kube: FakeCluster, fake_kubeconfig: Path, redirect_policies: PolicySet
) -> AsyncIterator[Redirect]:
    fake_kube.add_namespace(NAMESPACE)
    fake_kube.add_local_queue(NAMESPACE, QUEUE)
    fake_kube.allow(ALICE.username, verb="create", group=names.APPWRAPPER_GROUP,
                    resource=names.APPWRAPPER_PLURAL, namespace=NAMESPACE)  # fmt: skip
    client = await KubeClient.connect(str(fake_kubeconfig))
    try:
        yield Redirect(
            fake_kube, admission.Deps(policies=lambda: redirect_policies, cluster=client)
        )
    finally:
        await client.close()


async def test_a_wrap_is_a_403_naming_the_appwrapper_it_created(redirect: Redirect) -> None:
    answer = await redirect.validate(vcjob())

    assert answer.redirect() == {
        "kind": "Job", "namespace": NAMESPACE, "name": "train", "aw_namespace": NAMESPACE,
        "appwrapper": "train", "dry_run": None, "queue": QUEUE, "created": "Job",
        "follow": "train", "follow_ns": NAMESPACE,
    }  # fmt: skip
    assert answer.status["details"] == {
        "group": names.APPWRAPPER_GROUP, "kind": names.APPWRAPPER_PLURAL, "name": "train"
    }  # fmt: skip
    assert list(redirect.appwrappers()) == [(NAMESPACE, "train")]
    assert (answer.record.decision, answer.record.appwrapper) == ("wrapped", "train")


def audited_job(name: str = "train") -> Obj:
    """A Job Enforce would refuse (MASTER_ADDR points elsewhere); Audit wraps it with a warning."""
    job = vcjob(name, workers=1)
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "MASTER_ADDR", "value": "elsewhere"}]
    return job


def audit_warnings(answer: Answer) -> list[str]:
    return [w for w in answer.warnings if w.startswith("(audit) ")]


# --- the wrap itself ------------------------------------------------------------------------------


async def test_a_dry_run_says_so_creates_nothing_and_is_recorded_as_one(redirect: Redirect) -> None:
    answer = await redirect.validate(vcjob(), dry_run=True)

    parts = answer.redirect()
    assert parts["dry_run"] == " (dry run: nothing was created)"
    assert (parts["name"], parts["appwrapper"], parts["queue"]) == ("train", "train", QUEUE)
    assert redirect.appwrappers() == {}
    assert answer.record.decision == "wrapped-dry-run"


async def test_the_same_create_again_gets_the_same_answer_recorded_as_a_rewrap(
    redirect: Redirect,
) -> None:
    first = await redirect.validate(vcjob())
    again = await redirect.validate(vcjob())

    assert again.redirect() == first.redirect()
    assert again.status["details"] == first.status["details"]
    assert again.warnings == [], "nothing differs, so there is no note about other settings"
    assert (first.record.decision, again.record.decision) == ("wrapped", "rewrapped")
    assert list(redirect.appwrappers()) == [(NAMESPACE, "train")]


async def test_a_request_without_a_name_names_the_object_by_the_name_it_will_have(
    redirect: Redirect,
) -> None:
    # admission/v1 AdmissionRequest.name: "On a CREATE operation, the client may omit name and
    # rely on the server to generate the name. If that is the case, this field will contain an
    # empty string." The wrapped object carries the name it will be created with.
    answer = await redirect.validate(pod("notebook.v2"), name="")

    parts = answer.redirect()
    appwrapper = answer.status["details"]["name"]
    assert appwrapper != "notebook.v2", "the AppWrapper's name is a DNS label"
    assert (parts["kind"], parts["name"], parts["appwrapper"]) == ("Pod", "notebook.v2", appwrapper)
    assert (parts["follow"], parts["follow_ns"]) == (appwrapper, NAMESPACE)


async def test_other_settings_of_the_stored_appwrapper_are_named_in_a_warning(
    redirect: Redirect,
) -> None:
    await redirect.validate(vcjob())
    stored = redirect.appwrappers()[(NAMESPACE, "train")]
    # A setting only the stored AppWrapper has (a priority class an earlier policy gave it).
    stored["metadata"]["labels"][names.PRIORITY_LABEL] = "high"
    redirect.kube.store.update(APPWRAPPERS, stored)

    again = await redirect.validate(vcjob())

    assert again.redirect()["appwrapper"] == "train"
    assert again.record.decision == "rewrapped"
    [note] = again.warnings
    found = re.match(r"AppWrapper (\S+) already stands for this job with other settings \((.*)\)",
                     note)  # fmt: skip
    assert found is not None, note
    assert found.groups() == (f"{NAMESPACE}/train", names.PRIORITY_LABEL)
    assert "delete" not in note


async def test_without_api_access_the_wrap_is_refused_with_503(redirect: Redirect) -> None:
    no_api = dataclasses.replace(redirect.deps, cluster=None)

    answer = await redirect.validate(vcjob(), deps=no_api)

    assert answer.code_and_reason == (503, "ServiceUnavailable")
    assert (answer.record.decision, answer.record.appwrapper) == ("rejected", "train")
    assert redirect.appwrappers() == {}


async def test_audited_findings_become_events_on_the_appwrapper_created_never_on_a_dry_run(
    redirect: Redirect,
) -> None:
    redirect.research()
    raised: list[tuple[Obj, list[audit.Finding]]] = []
    deps = dataclasses.replace(redirect.deps, audit_events=lambda obj, found: raised.append(
        (dict(obj), found)))  # fmt: skip

    dry = await redirect.validate(audited_job(), dry_run=True, deps=deps)
    assert dry.redirect()["dry_run"] and audit_warnings(dry)
    assert raised == []

    answer = await redirect.validate(audited_job(), deps=deps)
    assert answer.redirect()["appwrapper"] == "train" and audit_warnings(answer)
    [(obj, found)] = raised
    stored = redirect.appwrappers()[(NAMESPACE, "train")]
    assert obj["metadata"]["uid"] == stored["metadata"]["uid"]
    assert [(f.rule, f.enforcement) for f in found] == [("env", "Audit")]


# --- refusals -------------------------------------------------------------------------------------


async def _unauthorized(redirect: Redirect) -> tuple[Obj, UserInfo]:
    return audited_job(), MALLORY


async def _no_such_queue(redirect: Redirect) -> tuple[Obj, UserInfo]:
    job = audited_job()
    job["metadata"]["labels"][names.QUEUE_LABEL] = "no-such-queue"
    return job, ALICE


async def _refused_by_the_cluster(redirect: Redirect) -> tuple[Obj, UserInfo]:
    redirect.kube.add_validating_webhook(
        "validatejob.volcano.sh",
        lambda request: "queue closed" if request["kind"]["kind"] == "Job" else None,
    )
    return audited_job(), ALICE


async def _another_spec_under_the_name(redirect: Redirect) -> tuple[Obj, UserInfo]:
    await redirect.validate(vcjob())
    return audited_job(), ALICE


@pytest.mark.parametrize(
    ("setup", "code", "reason"),
    [
        pytest.param(_unauthorized, 403, "Forbidden", id="no right"),
        pytest.param(_no_such_queue, 422, "Invalid", id="no such queue"),
        pytest.param(_refused_by_the_cluster, 422, "Invalid", id="refused by the cluster"),
        pytest.param(_another_spec_under_the_name, 409, "AlreadyExists", id="another spec"),
    ],
)
async def test_a_refusal_keeps_the_warnings_audit_gave(
    redirect: Redirect,
    setup: Callable[[Redirect], Awaitable[tuple[Obj, UserInfo]]],
    code: int,
    reason: str,
) -> None:
    redirect.research()
    obj, user = await setup(redirect)
    before = redirect.appwrappers()

    answer = await redirect.validate(obj, user=user)

    assert answer.code_and_reason == (code, reason), answer.message
    assert "details" not in answer.status, "a refusal names no AppWrapper made"
    assert audit_warnings(answer), answer.warnings
    assert answer.record.decision == "rejected"
    assert redirect.appwrappers() == before


@pytest.mark.parametrize("why", ["no RoleBinding grants it", ""])
async def test_a_refusal_for_rights_says_who_where_and_the_authorizers_reason(
    redirect: Redirect, why: str
) -> None:
    redirect.kube.deny(MALLORY.username, verb="create", group=names.APPWRAPPER_GROUP,
                       resource=names.APPWRAPPER_PLURAL, namespace=NAMESPACE, reason=why)  # fmt: skip

    answer = await redirect.validate(vcjob(), user=MALLORY)

    assert answer.code_and_reason == (403, "Forbidden")
    found = re.match(r"user '(\w+)' may not create appwrappers \([\w.]+\) in namespace '([\w-]+)'"
                     r"(?: \(([^)]+)\))?; ", answer.message)  # fmt: skip
    assert found is not None, answer.message
    assert found.groups() == ("mallory", NAMESPACE, why or None)


async def test_a_queue_of_the_same_name_in_another_namespace_does_not_count(
    redirect: Redirect,
) -> None:
    redirect.kube.add_namespace("other")
    redirect.kube.add_local_queue("other", "their-queue")

    answer = await redirect.validate(vcjob(labels={names.QUEUE_LABEL: "their-queue"}))

    assert answer.code_and_reason == (422, "Invalid")
    assert answer.message.startswith(f"metadata.labels[{names.QUEUE_LABEL}]: "), answer.message
    assert redirect.appwrappers() == {}


# Audit everywhere and no default queue: a missing queue is only a warning.
QUEUELESS_AUDIT = f"""
apiVersion: autowrap.io/v1alpha1
kind: Policy
metadata:
  name: queueless-audit
spec:
  namespaces:
    names: [{NAMESPACE}]
  enforcement: Audit
  mode: Redirect
"""


async def test_under_audit_a_job_without_any_queue_is_wrapped_and_told_it_has_none(
    redirect: Redirect,
) -> None:
    queueless = policy.build([("queueless-audit.yaml", QUEUELESS_AUDIT)])
    deps = dataclasses.replace(redirect.deps, policies=lambda: queueless)
    job = vcjob(labels={names.WRAP_LABEL: "true"})

    answer = await redirect.validate(job, deps=deps)

    assert answer.redirect()["queue"] == ""
    assert any(names.QUEUE_LABEL in w for w in audit_warnings(answer)), answer.warnings
    stored = redirect.appwrappers()[(NAMESPACE, "train")]
    assert names.QUEUE_LABEL not in stored["metadata"].get("labels", {})


async def test_under_audit_an_appwrapper_without_a_queue_is_not_looked_up_as_one(
    redirect: Redirect,
) -> None:
    queueless = policy.build([("queueless-audit.yaml", QUEUELESS_AUDIT)])
    deps = dataclasses.replace(redirect.deps, policies=lambda: queueless)
    appwrapper = {
        "apiVersion": names.APPWRAPPER_API_VERSION, "kind": "AppWrapper",
        "metadata": {"name": "byhand", "namespace": NAMESPACE},
        "spec": {"components": [{"template": vcjob("byhand", labels={})}]},
    }  # fmt: skip

    answer = await redirect.validate(appwrapper, deps=deps)

    assert answer.allowed, answer.message
    assert answer.record.decision == "valid"
    assert any(names.QUEUE_LABEL in w for w in audit_warnings(answer)), answer.warnings


async def test_a_name_taken_by_other_work_is_refused_naming_the_object_to_rename(
    redirect: Redirect,
) -> None:
    first = await redirect.validate(pod("notebook.v2"))
    appwrapper = first.status["details"]["name"]
    changed = pod("notebook.v2")
    changed["spec"]["containers"][0]["image"] = "torch:2.5"

    answer = await redirect.validate(changed)

    assert answer.code_and_reason == (409, "AlreadyExists")
    found = re.match(r"AppWrapper (\S+) already exists with a different spec; .* rename (\w+) (\S+)$",
                     answer.message)  # fmt: skip
    assert found is not None, answer.message
    assert found.groups() == (f"{NAMESPACE}/{appwrapper}", "Pod", f"{NAMESPACE}/notebook.v2")


# --- the API failing --------------------------------------------------------------------------------

API_SAYS = "etcdserver: request timed out"


@pytest.mark.parametrize(
    ("fault", "nothing_created"),
    [
        pytest.param({"status": 400}, True, id="400"),
        pytest.param({"status": 422}, True, id="422"),
        pytest.param({"status": 500}, False, id="500"),
        pytest.param({"status": None, "drop_connection": True}, False, id="no answer"),
    ],
)
async def test_a_failed_create_says_whether_the_appwrapper_may_exist(
    redirect: Redirect, fault: dict[str, Any], nothing_created: bool
) -> None:
    redirect.kube.inject("POST", r"/appwrappers$", times=None, message=API_SAYS, **fault)

    answer = await redirect.validate(vcjob())

    assert answer.record.decision == "api-error"
    assert not answer.allowed and "details" not in answer.status
    if fault["status"]:
        assert API_SAYS in answer.message, "the API's own words are kept"
    if nothing_created:
        assert answer.message.endswith("; nothing was created"), answer.message
    else:
        found = re.search(r"; AppWrapper (\S+) may or may not have been created: .*"
                          r"kubectl get appwrapper (\S+) -n (\S+)$", answer.message)  # fmt: skip
        assert found is not None, answer.message
        assert found.groups() == (f"{NAMESPACE}/train", "train", NAMESPACE)


async def test_a_failed_read_of_the_appwrapper_already_there_says_it_exists(
    redirect: Redirect,
) -> None:
    await redirect.validate(vcjob())
    redirect.kube.inject("GET", r"/appwrappers/train$", status=500, times=None, message=API_SAYS)

    answer = await redirect.validate(vcjob())

    assert answer.code_and_reason == (503, "ServiceUnavailable")
    assert "'get appwrapper'" in answer.message and API_SAYS in answer.message
    found = re.search(r"; AppWrapper (\S+) already exists: .* kubectl get appwrapper (\S+) -n (\S+)$",
                      answer.message)  # fmt: skip
    assert found is not None, answer.message
    assert found.groups() == (f"{NAMESPACE}/train", "train", NAMESPACE)
