"""The resource types the fake cluster serves, as kube-apiserver's REST mapping knows them.

A :class:`Resource` is what discovery publishes (``/api/v1``, ``/apis/{group}/{version}``) and
what the store keys objects by. The custom resources carry the CRD file of ``../shared/crds``
they come from, when the repository has it, so objects can be checked against the real schema.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """One served resource: group/version/plural plus what the apiserver knows about it.

    ``status_subresource``: the main endpoint ignores ``status`` and ``/status`` changes only
    ``status`` (the CRD ``subresources.status`` behaviour, and the built-in pod strategy).
    ``custom``: served by apiextensions-apiserver, which refuses strategic merge patches and
    unconditional updates. ``field_labels``: the field selectors beyond ``metadata.name`` and
    ``metadata.namespace`` that the type's ``GetAttrs`` supports.
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    custom: bool = False
    singular: str = ""
    short_names: tuple[str, ...] = ()
    crd_file: str | None = None
    field_labels: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def qualified(self) -> str:
        """``plural.group`` as in error messages (``pods``, ``jobs.batch.volcano.sh``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def base_path(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        if self.namespaced and namespace:
            return f"{self.base_path}/namespaces/{namespace}/{self.plural}"
        return f"{self.base_path}/{self.plural}"


KUEUE = "kueue.x-k8s.io"
VOLCANO_BATCH = "batch.volcano.sh"
VOLCANO_SCHEDULING = "scheduling.volcano.sh"
CODEFLARE = "workload.codeflare.dev"

# Field labels: pkg/registry/core/pod/strategy.go ToSelectableFields, core/event strategy.
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

PODS = Resource(
    "", "v1", "pods", "Pod", status_subresource=True, singular="pod", short_names=("po",),
    field_labels=_POD_FIELDS,
)  # fmt: skip
SERVICES = Resource("", "v1", "services", "Service", status_subresource=True, singular="service",
                    short_names=("svc",))  # fmt: skip
EVENTS = Resource("", "v1", "events", "Event", singular="event", short_names=("ev",),
                  field_labels=_EVENT_FIELDS)  # fmt: skip
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False,
                      status_subresource=True, singular="namespace", short_names=("ns",),
                      field_labels=("status.phase",))  # fmt: skip
SECRETS = Resource("", "v1", "secrets", "Secret", singular="secret", field_labels=("type",))
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", singular="configmap",
                      short_names=("cm",))  # fmt: skip
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", singular="lease")
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event", singular="event",
                     short_names=("ev",))  # fmt: skip
VCJOBS = Resource(VOLCANO_BATCH, "v1alpha1", "jobs", "Job", status_subresource=True, custom=True,
                  singular="job", short_names=("vcjob", "vj"),
                  crd_file="batch.volcano.sh_jobs.yaml")  # fmt: skip
PODGROUPS = Resource(VOLCANO_SCHEDULING, "v1beta1", "podgroups", "PodGroup",
                     status_subresource=True, custom=True, singular="podgroup",
                     short_names=("pg", "podgroup-v1beta1"),
                     crd_file="scheduling.volcano.sh_podgroups.yaml")  # fmt: skip
APPWRAPPERS = Resource(CODEFLARE, "v1beta2", "appwrappers", "AppWrapper", status_subresource=True,
                       custom=True, singular="appwrapper", short_names=("aw",),
                       crd_file="workload.codeflare.dev_appwrappers.yaml")  # fmt: skip
LOCALQUEUES = Resource(KUEUE, "v1beta1", "localqueues", "LocalQueue", status_subresource=True,
                       custom=True, singular="localqueue",
                       short_names=("queue", "queues", "lq"))  # fmt: skip
CLUSTERQUEUES = Resource(KUEUE, "v1beta1", "clusterqueues", "ClusterQueue", namespaced=False,
                         status_subresource=True, custom=True, singular="clusterqueue",
                         short_names=("cq",))  # fmt: skip
WORKLOADS = Resource(KUEUE, "v1beta1", "workloads", "Workload", status_subresource=True,
                     custom=True, singular="workload", short_names=("wl",))  # fmt: skip
RESOURCEFLAVORS = Resource(KUEUE, "v1beta1", "resourceflavors", "ResourceFlavor",
                           namespaced=False, custom=True, singular="resourceflavor",
                           short_names=("flavor", "flavors", "rf"))  # fmt: skip
# Cluster-scoped, no status (k8s.io/api admissionregistration/v1 types.go).
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration", namespaced=False,
    singular="mutatingwebhookconfiguration",
)  # fmt: skip
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration", namespaced=False,
    singular="validatingwebhookconfiguration",
)  # fmt: skip
WEBHOOK_CONFIGURATIONS = (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS)

CORE: tuple[Resource, ...] = (PODS, SERVICES, EVENTS, NAMESPACES, SECRETS, CONFIGMAPS)
KUEUE_RESOURCES: tuple[Resource, ...] = (LOCALQUEUES, CLUSTERQUEUES, WORKLOADS, RESOURCEFLAVORS)
ALL: tuple[Resource, ...] = (
    *CORE,
    LEASES,
    EVENTS_V1,
    *WEBHOOK_CONFIGURATIONS,
    VCJOBS,
    PODGROUPS,
    APPWRAPPERS,
    *KUEUE_RESOURCES,
)
WITHOUT_KUEUE: tuple[Resource, ...] = tuple(r for r in ALL if r.group != KUEUE)


def find(
    resources: tuple[Resource, ...] | list[Resource], api_version: str, kind: str
) -> Resource | None:
    """The resource serving ``kind`` at ``apiVersion`` (the RESTMapper lookup of the GC)."""
    return next((r for r in resources if r.api_version == api_version and r.kind == kind), None)
