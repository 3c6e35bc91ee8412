"""What jobgate needs and forbids in its manifests: the Role's grants (per namespace, for
Kueue and for Leases), the one ClusterRole's (CustomResourceDefinitions), the variables and
files that say how it runs, the kinds it must not ship, what marks the dev overlay, and the
grants jobgate's job templates need (read from templates/). It checks nothing."""

from pathlib import Path

import yaml


REPO = Path(__file__).resolve().parent.parent.parent

# (apiGroup, resource, verb) jobgate needs in each namespace it runs jobs in (see
# deploy/base/role.yaml for why each is there). A Role granting anything else, or less, fails.
NEEDED = {
    *(("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")),
    *(("", "pods", v) for v in ("get", "list", "watch", "patch")),
    ("", "pods/log", "get"),
    ("", "events", "create"),
    ("events.k8s.io", "events", "create"),
}
# The resource each built-in workload template's kind is served as, by (group, kind). Every
# template in templates/*.yaml must be here (checked), so a new template cannot ship without
# its RBAC.
WORKLOAD_RESOURCES = {
    ("kubeflow.org", "PyTorchJob"): "pytorchjobs",
    ("kubeflow.org", "TFJob"): "tfjobs",
    ("kubeflow.org", "MPIJob"): "mpijobs",
    ("trainer.kubeflow.org", "TrainJob"): "trainjobs",
    ("argoproj.io", "Workflow"): "workflows",
    ("tekton.dev", "PipelineRun"): "pipelineruns",
    ("ray.io", "RayJob"): "rayjobs",
    ("sparkoperator.k8s.io", "SparkApplication"): "sparkapplications",
}
# The Role for workload kinds (deploy/overlays/workload-kinds) is held to this instead.
WORKLOAD_ROLE = "jobgate-workloads"
# What jobgate does with Kueue (JOBGATE_KUEUE or JOBGATE_DEFAULT_QUEUE set; see
# deploy/overlays/kueue/role.yaml): read, list and watch its Workloads, and read its
# LocalQueues' pending workloads (the visibility API) for waiting jobs' places in line.
# Granted by a Role of this name, held to exactly this, only with Kueue on, and required then.
KUEUE_ROLE = "jobgate-kueue"
KUEUE_NEEDED = {("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "watch")} | {
    ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get")
}
# What replicas sharing a PostgreSQL database (JOBGATE_DATABASE_URL_FILE) do to the Leases they
# coordinate through, in jobgate's own namespace only (see deploy/overlays/ha/role-leases.yaml):
# each creates, renews (update), reads and deletes its own member Lease, follows the others'
# with list and watch, and deletes a dead replica's. Granted by a Role of this name, held to
# exactly this, allowed only in the namespace jobgate runs in and only with a database URL,
# and required there when one is set; any other Role granting Leases fails as granting more
# than NEEDED.
LEASE_ROLE = "jobgate-leases"
LEASES_NEEDED = {("coordination.k8s.io", "leases", v) for v in ("get", "list", "watch", "create", "update", "delete")}
# The shared database: with it set, several replicas may run (each needs its own identity in
# the Leases); without it jobgate keeps its jobs in SQLite on its data volume, one replica. Its
# URL holds the password, so it comes as a file of a mounted Secret (DATABASE_FILE_VAR, or
# database_url_file in the configuration file); the URL itself (DATABASE_VAR) is refused in a
# manifest, as a literal, from a Secret as a variable, or in the configuration file alike.
DATABASE_VAR = "JOBGATE_DATABASE_URL"
DATABASE_FILE_VAR = "JOBGATE_DATABASE_URL_FILE"
REPLICA_ID_VAR = "JOBGATE_REPLICA_ID"
LEASE_NAMESPACE_VAR = "JOBGATE_LEASE_NAMESPACE"
# The port egress to PostgreSQL must be allowed on when the pod's egress is restricted. The URL
# is in a Secret, so its port is unknown here; the overlays assume PostgreSQL's default.
POSTGRES_PORT = 5432


def workload_needed():
    """(apiGroup, resource, verb) for the workload templates: create/get/list/watch/delete, and
    patch where the template cancels by patch. Read from templates/*.yaml."""
    needed, errors = set(), []
    for path in sorted((REPO / "templates").glob("*.yaml")):
        template = yaml.safe_load(path.read_text())
        group = template["apiVersion"].rpartition("/")[0]
        resource = WORKLOAD_RESOURCES.get((group, template["kind"]))
        if resource is None:
            errors.append(f"{path.name}: {group} {template['kind']} has no entry in WORKLOAD_RESOURCES")
            continue
        verbs = ["create", "get", "list", "watch", "delete"]
        if (template.get("cancel") or {}).get("patch"):
            verbs.append("patch")
        needed.update((group, resource, v) for v in verbs)
    return needed, errors


# The one cluster-wide right jobgate may have (deploy/overlays/workload-kinds/
# clusterrole-crds.yaml): list and watch CustomResourceDefinitions, through which it finds a
# workload kind installed after it started. Granted by a ClusterRole of this name, bound by a
# ClusterRoleBinding of this name to jobgate's account, held to exactly this, allowed only
# with the workload kinds' Role (without it a kind found later could not be used), and
# required then. Any other ClusterRole or ClusterRoleBinding fails.
CRD_ROLE = "jobgate-crds"
CRDS_NEEDED = {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")}

# Objects that would ship a credential in a manifest.
FORBIDDEN_KINDS = {"Secret"}
# The label on the Jobs and Pods jobgate creates, which its watchers select on.
MANAGED_BY = ("app.kubernetes.io/managed-by", "jobgate")


# Settings announced for jobgate's authentication and limits, by the key they have in a
# configuration file, with that key's TOML type; each is also the flag --kebab-case
# and the variable JOBGATE_UPPER_SNAKE. They are accepted here ahead of src/config/, so the
# manifests need not wait for the binary; once src/config/ declares one, its declaration
# there is what counts (and must agree on the type), and the entry here is merely redundant.
ANNOUNCED = {
    "anonymous": bool,
    "anonymous_namespaces": list,
    "api_tokens_file": str,
    "jwt_hs256_secret_file": str,
    "jwt_jwks_file": str,
    "jwt_issuer": str,
    "jwt_audience": str,
    "jwt_namespaces_claim": str,
    "jwt_roles_claim": str,
    "allowed_origins": list,
    "allowed_hosts": list,
    "mutations_per_minute": int,
    "connections_per_minute": int,
    "subscriptions_per_minute": int,
    "max_active_jobs_per_namespace": int,
    "ws_max_message_bytes": int,
    "ws_max_frame_bytes": int,
    "ws_read_buffer_bytes": int,
    "ws_max_subscriptions": int,
    "ws_idle_timeout_secs": int,
    "disable_introspection": bool,
    "disable_suggestions": bool,
    "log_format": str,
    "log": str,
}
# The configuration file's own setting: a flag and a variable, never a key of the file.
CONFIG_VAR = "JOBGATE_CONFIG"
# Settings that name a file jobgate reads credentials or keys from, and whether that file must
# come from a Secret (a ConfigMap is readable by whoever may read the namespace's ConfigMaps).
CREDENTIAL_FILES = {
    "api_tokens_file": True,
    "jwt_hs256_secret_file": True,
    "jwt_jwks_file": False,
    "database_url_file": True,
}
# Any of these set means jobgate has credentials to check callers against.
CREDENTIALS = {"api_token", "api_tokens_file", "jwt_hs256_secret_file", "jwt_jwks_file"}
# The Deployment annotation that allows what only a development cluster may have: anonymous
# callers, a credentials Secret that may be missing, and an image taken from the node's cache.
DEV_MARKER = ("jobgate.io/environment", "dev")
