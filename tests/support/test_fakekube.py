"""The fake Kubernetes API answers the official client like kube-apiserver would."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from aiohttp import web
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.support.apiserver import ApiserverEmulator
from tests.support.fakekube import FakeKube, parse_label_selector
from tests.support.fixtures import TlsServerFactory
from tests.support.pki import ServingPki
from webhook.names import APPWRAPPER_GROUP, APPWRAPPER_PLURAL, APPWRAPPER_VERSION

JsonDict = dict[str, Any]


def appwrapper(name: str | None = "aw", namespace: str = "team-a") -> JsonDict:
    meta: JsonDict = {"name": name} if name else {"generateName": "aw-"}
    return {
        "apiVersion": f"{APPWRAPPER_GROUP}/{APPWRAPPER_VERSION}",
        "kind": "AppWrapper",
        "metadata": meta,
        "spec": {"components": []},
    }


@pytest.fixture
def api_client(fake_kubeconfig: Path) -> Iterator[client.ApiClient]:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(fake_kubeconfig)
    )
    api.configuration.retries = False  # a dropped connection must surface, not be retried
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The official client is blocking; run it off the loop that serves the fake."""
    return await asyncio.to_thread(fn, *args, **kwargs)


async def create_aw(
    api: client.ApiClient, body: JsonDict, namespace: str = "team-a", **kwargs: Any
) -> JsonDict:
    result: JsonDict = await call(
        client.CustomObjectsApi(api).create_namespaced_custom_object,
        APPWRAPPER_GROUP,
        APPWRAPPER_VERSION,
        namespace,
        APPWRAPPER_PLURAL,
        body,
        **kwargs,
    )
    return result


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> JsonDict:
    body: JsonDict = json.loads(exc.value.body or "null")
    return body


# --- AppWrappers --------------------------------------------------------------------------------


async def test_dry_run_create_returns_the_object_and_stores_nothing(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    created = await create_aw(api_client, appwrapper(), dry_run="All")
    assert created["metadata"]["uid"] and created["metadata"]["namespace"] == "team-a"
    assert fake_kube.appwrappers == {}
    assert fake_kube.requests[-1].query == {"dryRun": "All"}


async def test_create_then_duplicate_is_already_exists_like_kube_apiserver(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    created = await create_aw(api_client, appwrapper())
    assert created["metadata"]["generation"] == 1 and created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, appwrapper())
    assert exc.value.status == 409
    assert status_of(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'appwrappers.workload.codeflare.dev "aw" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "aw", "group": "workload.codeflare.dev", "kind": "appwrappers"},
        "code": 409,
    }


async def test_get_list_and_delete_appwrappers(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    objects = client.CustomObjectsApi(api_client)
    await create_aw(api_client, appwrapper("one"))
    await create_aw(api_client, appwrapper("two", namespace="team-b"), namespace="team-b")
    got = await call(
        objects.get_namespaced_custom_object,
        APPWRAPPER_GROUP,
        APPWRAPPER_VERSION,
        "team-a",
        APPWRAPPER_PLURAL,
        "one",
    )
    assert got["metadata"]["name"] == "one"
    listed = await call(
        objects.list_namespaced_custom_object,
        APPWRAPPER_GROUP,
        APPWRAPPER_VERSION,
        "team-a",
        APPWRAPPER_PLURAL,
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["one"]
    everywhere = await call(
        objects.list_cluster_custom_object, APPWRAPPER_GROUP, APPWRAPPER_VERSION, APPWRAPPER_PLURAL
    )
    assert len(everywhere["items"]) == 2
    await call(
        objects.delete_namespaced_custom_object,
        APPWRAPPER_GROUP,
        APPWRAPPER_VERSION,
        "team-a",
        APPWRAPPER_PLURAL,
        "one",
    )
    with pytest.raises(ApiException) as exc:
        await call(
            objects.get_namespaced_custom_object,
            APPWRAPPER_GROUP,
            APPWRAPPER_VERSION,
            "team-a",
            APPWRAPPER_PLURAL,
            "one",
        )
    assert exc.value.status == 404 and status_of(exc)["reason"] == "NotFound"
    assert status_of(exc)["message"] == 'appwrappers.workload.codeflare.dev "one" not found'


async def test_generate_name_gets_a_random_suffix(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    created = await create_aw(api_client, appwrapper(None))
    name = created["metadata"]["name"]
    assert name.startswith("aw-") and len(name) == len("aw-") + 5
    assert ("team-a", name) in fake_kube.appwrappers


@pytest.mark.parametrize(
    ("body", "code", "reason"),
    [
        (appwrapper("Not_A_Name"), 422, "Invalid"),
        ({**appwrapper(), "metadata": {}}, 422, "Invalid"),
        ({**appwrapper(), "kind": "Job"}, 400, "BadRequest"),
        ({**appwrapper(), "metadata": {"name": "aw", "namespace": "other"}}, 400, "BadRequest"),
    ],
    ids=["bad-name", "no-name", "wrong-kind", "namespace-mismatch"],
)
async def test_invalid_creates_are_refused_with_a_status(
    fake_kube: FakeKube, api_client: client.ApiClient, body: JsonDict, code: int, reason: str
) -> None:
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, body)
    assert exc.value.status == code and status_of(exc)["reason"] == reason
    assert fake_kube.appwrappers == {}


async def test_a_body_over_3_mib_is_request_entity_too_large(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    # k8s.io/apiserver pkg/endpoints/handlers/rest.go:372-389, pkg/server/config.go:474.
    big = appwrapper()
    big["metadata"]["annotations"] = {"pad": "x" * (3 * 1024 * 1024)}
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, big)
    assert exc.value.status == 413
    assert status_of(exc) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    }
    assert fake_kube.appwrappers == {}


async def test_a_missing_namespace_is_not_found_when_namespaces_are_required(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.require_namespaces = True
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, appwrapper())
    assert status_of(exc)["message"] == 'namespaces "team-a" not found'
    fake_kube.add_namespace("team-a")
    assert await create_aw(api_client, appwrapper())


# --- SubjectAccessReview ------------------------------------------------------------------------


def sar(
    user: str, groups: list[str] | None = None, namespace: str = "team-a"
) -> client.V1SubjectAccessReview:
    return client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=groups,
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace,
                verb="create",
                group=APPWRAPPER_GROUP,
                resource=APPWRAPPER_PLURAL,
            ),
        )
    )


async def test_subject_access_reviews_follow_the_configured_rules(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.allow(
        user="alice",
        verb="create",
        group=APPWRAPPER_GROUP,
        resource=APPWRAPPER_PLURAL,
        namespace="team-a",
    )
    fake_kube.allow(in_group="ml-team", verb="create", resource=APPWRAPPER_PLURAL)
    authz = client.AuthorizationV1Api(api_client)

    alice = await call(authz.create_subject_access_review, sar("alice"))
    elsewhere = await call(authz.create_subject_access_review, sar("alice", namespace="b"))
    member = await call(authz.create_subject_access_review, sar("carol", ["ml-team"], "b"))
    stranger = await call(authz.create_subject_access_review, sar("bob"))

    assert alice.status.allowed and member.status.allowed
    assert not elsewhere.status.allowed and not stranger.status.allowed
    assert "bob" in stranger.status.reason
    assert [s["spec"]["user"] for s in fake_kube.sars] == ["alice", "alice", "carol", "bob"]


async def test_an_explicit_deny_wins_over_later_allows(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.deny(user="mallory", reason="banned")
    fake_kube.allow(user="mallory")
    review = await call(
        client.AuthorizationV1Api(api_client).create_subject_access_review, sar("mallory")
    )
    assert (review.status.allowed, review.status.denied, review.status.reason) == (
        False,
        True,
        "banned",
    )


# --- namespaces, Kueue and discovery ----------------------------------------------------------


async def test_namespaces_are_listed_with_the_automatic_name_label(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.add_namespace("team-a", {"team": "ml"})
    fake_kube.add_namespace("kube-system")
    core = client.CoreV1Api(api_client)
    everything = await call(core.list_namespace)
    ml = await call(core.list_namespace, label_selector="team=ml")
    one = await call(core.read_namespace, "team-a")
    assert sorted(n.metadata.name for n in everything.items) == ["kube-system", "team-a"]
    assert [n.metadata.name for n in ml.items] == ["team-a"]
    assert one.metadata.labels == {"team": "ml", "kubernetes.io/metadata.name": "team-a"}


async def test_local_queues_and_discovery_exist_only_while_kueue_is_installed(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.add_local_queue("team-a", "default")
    objects = client.CustomObjectsApi(api_client)
    groups = await call(client.ApisApi(api_client).get_api_versions)
    assert "kueue.x-k8s.io" in [g.name for g in groups.groups]
    resources = await call(
        client.CustomObjectsApi(api_client).get_api_resources, "kueue.x-k8s.io", "v1beta1"
    )
    assert [r.name for r in resources.resources] == ["localqueues"]
    queue = await call(
        objects.get_namespaced_custom_object,
        "kueue.x-k8s.io",
        "v1beta1",
        "team-a",
        "localqueues",
        "default",
    )
    assert queue["spec"]["clusterQueue"] == "cluster-queue"
    listed = await call(
        objects.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta1", "localqueues"
    )
    assert [q["metadata"]["name"] for q in listed["items"]] == ["default"]

    fake_kube.kueue_installed = False
    groups = await call(client.ApisApi(api_client).get_api_versions)
    assert "kueue.x-k8s.io" not in [g.name for g in groups.groups]
    with pytest.raises(ApiException) as exc:
        await call(
            objects.list_namespaced_custom_object,
            "kueue.x-k8s.io",
            "v1beta1",
            "team-a",
            "localqueues",
        )
    assert exc.value.status == 404
    assert status_of(exc)["message"] == "the server could not find the requested resource"


# --- faults and lifecycle -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (500, "InternalError"),
        (403, "Forbidden"),
        (409, "Conflict"),
        (429, "TooManyRequests"),
        (503, "ServiceUnavailable"),
    ],
)
async def test_injected_statuses_come_with_a_status_body(
    fake_kube: FakeKube, api_client: client.ApiClient, status: int, reason: str
) -> None:
    fault = fake_kube.inject("POST", r"/appwrappers$", status=status)
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, appwrapper())
    assert exc.value.status == status and status_of(exc)["reason"] == reason
    if status == 429:
        assert (exc.value.headers or {})["Retry-After"] == "1"
    assert fault.hits == 1 and fake_kube.appwrappers == {}
    assert await create_aw(api_client, appwrapper())  # times=1: the next call succeeds


async def test_an_after_effect_fault_stores_then_fails(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.inject("POST", r"/appwrappers$", status=500, after_effect=True)
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, appwrapper())
    assert exc.value.status == 500
    assert ("team-a", "aw") in fake_kube.appwrappers


async def test_a_dropped_connection_gets_no_response(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fake_kube.inject("POST", r"/appwrappers$", drop_connection=True, after_effect=True)
    with pytest.raises(urllib3.exceptions.HTTPError):
        await create_aw(api_client, appwrapper())
    assert ("team-a", "aw") in fake_kube.appwrappers


async def test_a_fault_without_status_only_delays_and_times_none_repeats(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    fault = fake_kube.inject("GET", r"/namespaces$", status=None, delay=0.3, times=None)
    core = client.CoreV1Api(api_client)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await call(core.list_namespace)
    await call(core.list_namespace)
    assert loop.time() - started >= 0.6 and fault.hits == 2


async def test_a_stopped_fake_refuses_connections_and_keeps_its_state(
    fake_kube: FakeKube, api_client: client.ApiClient
) -> None:
    await create_aw(api_client, appwrapper())
    await fake_kube.refuse()
    with pytest.raises(urllib3.exceptions.HTTPError):
        await call(client.CoreV1Api(api_client).list_namespace)
    await fake_kube.start()
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, appwrapper())
    assert exc.value.status == 409


async def test_a_wrong_token_is_unauthorized(fake_kube: FakeKube, tmp_path: Path) -> None:
    fake_kube.token = "rotated"
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "k")
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    fake_kube.token = "other"
    try:
        with pytest.raises(ApiException) as exc:
            await call(client.CoreV1Api(api).list_namespace)
    finally:
        api.close()
    assert exc.value.status == 401


async def test_load_kube_config_accepts_the_written_file(
    fake_kube: FakeKube, fake_kubeconfig: Path
) -> None:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(fake_kubeconfig), client_configuration=configuration
    )
    assert configuration.host == fake_kube.url
    with client.ApiClient(configuration) as api:
        await call(client.CoreV1Api(api).list_namespace)
    (logged,) = fake_kube.requests
    assert (logged.method, logged.path, logged.user) == (
        "GET",
        "/api/v1/namespaces",
        "system:serviceaccount:autowrap-system:autowrap",
    )


def test_label_selectors_parse_into_match_expressions() -> None:
    assert parse_label_selector("a=b, c!=d,e,!f,g in (x, y),h notin (z)") == {
        "matchLabels": {"a": "b"},
        "matchExpressions": [
            {"key": "c", "operator": "NotIn", "values": ["d"]},
            {"key": "e", "operator": "Exists"},
            {"key": "f", "operator": "DoesNotExist"},
            {"key": "g", "operator": "In", "values": ["x", "y"]},
            {"key": "h", "operator": "NotIn", "values": ["z"]},
        ],
    }


# --- routing creates through the emulator -----------------------------------------------------


async def test_appwrapper_creates_can_go_through_the_admission_chain(
    fake_kube: FakeKube,
    api_client: client.ApiClient,
    webhook_pki: ServingPki,
    tls_server: TlsServerFactory,
) -> None:
    seen_users: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        review = await request.json()
        req = review["request"]
        seen_users.append(req["userInfo"]["username"])
        response: JsonDict = {"uid": req["uid"], "allowed": True}
        if request.path == "/mutate":
            patch = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
            response.update(
                patch=base64.b64encode(json.dumps(patch).encode()).decode(), patchType="JSONPatch"
            )
        elif req["object"]["metadata"]["name"] == "forbidden":
            response.update(allowed=False, status={"code": 403, "message": "not this one"})
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    app = web.Application()
    app.router.add_post("/{path:.*}", handle)
    where = await tls_server(app)
    rules = [
        {
            "apiGroups": [APPWRAPPER_GROUP],
            "apiVersions": [APPWRAPPER_VERSION],
            "operations": ["CREATE"],
            "resources": [APPWRAPPER_PLURAL],
        }
    ]

    def configuration(kind: str, path: str) -> JsonDict:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "autowrap"},
            "webhooks": [
                {
                    "name": f"{path[1:]}.autowrap.io",
                    "rules": rules,
                    "clientConfig": {
                        "service": {
                            "name": "autowrap",
                            "namespace": "autowrap-system",
                            "path": path,
                        },
                        "caBundle": webhook_pki.ca_bundle,
                    },
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        }

    emulator = ApiserverEmulator(
        where.host,
        where.port,
        [
            configuration("MutatingWebhookConfiguration", "/mutate"),
            configuration("ValidatingWebhookConfiguration", "/validate"),
        ],
    )
    fake_kube.admit_appwrappers_with(emulator)

    created = await create_aw(api_client, appwrapper(), _request_timeout=10)
    assert created["metadata"]["labels"] == {"mutated": "yes"}
    assert fake_kube.appwrappers[("team-a", "aw")]["metadata"]["labels"] == {"mutated": "yes"}
    with pytest.raises(ApiException) as exc:
        await create_aw(api_client, appwrapper("forbidden"))
    assert exc.value.status == 403
    assert status_of(exc)["message"] == (
        'admission webhook "validate.autowrap.io" denied the request: not this one'
    )
    api_client.set_default_header("Impersonate-User", "alice")  # type: ignore[no-untyped-call]
    await create_aw(api_client, appwrapper("as-alice"))
    assert seen_users[-1] == "alice"
    assert seen_users[0] == "system:serviceaccount:autowrap-system:autowrap"
    assert emulator.contract_violations == []
