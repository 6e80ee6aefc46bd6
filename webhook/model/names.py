"""Every name autowrap shares with the cluster: labels, annotations, routes, ports.

They live in one module because the server, the CLI, the deployment manifests and the tests
must agree on them; ``tests/deploy`` checks ``deploy/`` against this file.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "autowrap.io/"

# --- labels and annotations autowrap reads on submitted objects -------------------------------
WRAP_LABEL: Final = "autowrap.io/wrap"
MASTER_TASK_ANNOTATION: Final = "autowrap.io/master-task"
MASTER_PORT_ANNOTATION: Final = "autowrap.io/master-port"
NPROC_ANNOTATION: Final = "autowrap.io/nproc-per-node"
# Comma-separated task names left out of the world (NNODES, WORLD_SIZE, ranks): helper tasks.
EXCLUDE_TASKS_ANNOTATION: Final = "autowrap.io/exclude-tasks"

# --- annotations autowrap writes on the AppWrapper --------------------------------------------
ORIGIN_KIND_ANNOTATION: Final = "autowrap.io/origin-kind"
ORIGIN_NAME_ANNOTATION: Final = "autowrap.io/origin-name"
REQUESTED_BY_ANNOTATION: Final = "autowrap.io/requested-by"
SPEC_HASH_ANNOTATION: Final = "autowrap.io/spec-hash"
# Adopt mode: the uid of the user's object the AppWrapper stands for.
ORIGIN_UID_ANNOTATION: Final = "autowrap.io/origin-uid"
# Adopt mode: marks AppWrappers the controller created, so it can watch exactly those.
ADOPTED_LABEL: Final = "autowrap.io/adopted"

# --- adopt mode: what admission writes on the user's object -----------------------------------
# Label on the object: "pending" until the controller has created its AppWrapper, then "adopted".
ADOPTION_LABEL: Final = "autowrap.io/adoption"
ADOPTION_PENDING: Final = "pending"
ADOPTION_ADOPTED: Final = "adopted"
# Finalizer on the object until its AppWrapper first runs: tells a user's delete from the
# AppWrapper controller's own (adopt-mode.md step 6b).
ADOPTION_FINALIZER: Final = "autowrap.io/adoption"
# Scheduling gate on every pod template: no pod is scheduled before Kueue admits.
ADMISSION_GATE: Final = "autowrap.io/admission"
# Label the release writes with the gate's removal: a released pod leaves the controller's
# pod watch (selector ``!autowrap.io/released``), so the scheduler's binding and the kubelet's
# status writes for it never reach the controller.
RELEASED_LABEL: Final = "autowrap.io/released"
# The queue chosen at admission (a Pod's queue label must go: Kueue's pod webhook would act on it).
QUEUE_ANNOTATION: Final = "autowrap.io/queue"
# The controller's one-line summary of where the object stands (queued, admitted, ...).
STATUS_ANNOTATION: Final = "autowrap.io/status"
# On the AppWrapper: the Audit-enforcement findings it was created with, JSON (``webhook.core.audit``).
AUDIT_FINDINGS_ANNOTATION: Final = "autowrap.io/audit-findings"
# Kueue's hold: a Workload carrying it is queued but never admitted (Kueue >= 0.19).
ADMISSION_GATED_BY_ANNOTATION: Final = "kueue.x-k8s.io/admission-gated-by"
CONTROLLER_LEASE: Final = "autowrap-controller"

# --- what a wrapped pod template carries for the pod-level mutation ---------------------------
# Label (not annotation) so that the pod webhook's objectSelector can match exactly these pods.
NODE_RANK_OFFSET_LABEL: Final = "autowrap.io/node-rank-offset"
# Which pod annotation holds the pod's index within its group (set by the workload's controller).
POD_INDEX_KEY_ANNOTATION: Final = "autowrap.io/pod-index-key"
# Written on the pod by the mutation; the template's env reads it through the downward API.
NODE_RANK_ANNOTATION: Final = "autowrap.io/node-rank"

# --- Kueue, AppWrapper, Volcano ---------------------------------------------------------------
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
KUEUE_MANAGED_LABEL: Final = "kueue.x-k8s.io/managed"
# On every Workload Kueue makes: the uid of the job it stands for (pkg/controller/constants,
# JobUIDLabel), so the Workload of an AppWrapper is found with a label selector.
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
KUEUE_FINALIZER: Final = "kueue.x-k8s.io/managed"
KUEUE_GATES: Final = ("kueue.x-k8s.io/admission", "kueue.x-k8s.io/topology")
KUEUE_POD_ANNOTATIONS: Final = ("kueue.x-k8s.io/role-hash",)
APPWRAPPER_LABEL: Final = "workload.codeflare.dev/appwrapper"
# Written by the AppWrapper operator's mutating webhook on every AppWrapper create, from the
# requester's authenticated name and uid (whatever the object said), and frozen on update
# (internal/webhook/appwrapper_webhook.go:95-98, :270-275).
APPWRAPPER_USER_LABEL: Final = "workload.codeflare.dev/user"
APPWRAPPER_USERID_LABEL: Final = "workload.codeflare.dev/userid"
# The AppWrapper controller's user (its ServiceAccount as deploy/ of project-codeflare/appwrapper
# installs it): the requester whose APPWRAPPER_LABEL exempts an object in an Always namespace
# when the engine judges it. In a cluster the *-always webhook entries send autowrap no request
# of any controller listed in deploy/base/controller-identities.yaml (where a controller running
# under another name is configured), so this name decides only for `autowrap check`.
APPWRAPPER_CONTROLLER_USER: Final = (
    "system:serviceaccount:appwrapper-system:appwrapper-controller-manager"
)
FAULT_TOLERANCE_PREFIX: Final = "workload.codeflare.dev.appwrapper/"
LAST_APPLIED_ANNOTATION: Final = "kubectl.kubernetes.io/last-applied-configuration"
VOLCANO_TASK_INDEX: Final = "volcano.sh/task-index"
VOLCANO_TASK_SPEC: Final = "volcano.sh/task-spec"
VOLCANO_JOB_NAME: Final = "volcano.sh/job-name"

APPWRAPPER_API_VERSION: Final = "workload.codeflare.dev/v1beta2"
APPWRAPPER_GROUP: Final = "workload.codeflare.dev"
APPWRAPPER_VERSION: Final = "v1beta2"
APPWRAPPER_PLURAL: Final = "appwrappers"
APPWRAPPER_MAX_NAME: Final = 61
APPWRAPPER_MAX_PODSETS: Final = 8

# --- the service ------------------------------------------------------------------------------
SERVICE_NAME: Final = "autowrap"
SERVICE_NAMESPACE: Final = "autowrap-system"
SERVING_PORT: Final = 9443
METRICS_PORT: Final = 8080
MUTATE_PATH: Final = "/mutate"
VALIDATE_PATH: Final = "/validate"
HEALTHZ_PATH: Final = "/healthz"
READYZ_PATH: Final = "/readyz"
METRICS_PATH: Final = "/metrics"
MAX_BODY_BYTES: Final = 7 * 1024 * 1024
# The field manager of every write autowrap makes: metadata.managedFields names it.
FIELD_MANAGER: Final = "autowrap"
