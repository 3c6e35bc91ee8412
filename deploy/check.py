#!/usr/bin/env python3
"""Checks what a schema cannot: that rendered jobgate manifests are least-privilege, hardened
and consistent with each other and with jobgate's configuration.

    python3 deploy/check.py RENDERED.yaml...   # one file per kustomization, as rendered
    python3 deploy/check.py --self-test RENDERED.yaml...
    python3 deploy/check.py --without-unschemaed IN.yaml OUT.yaml

kubernetes-validate (run by deploy/validate) proves every object is well formed for the API;
this proves the objects make sense together: the Role grants exactly what jobgate uses in
every namespace it may run jobs in and nothing anywhere else (Leases only in its own namespace,
and only with a shared PostgreSQL database), the pod runs locked down, the Service and
NetworkPolicy select the pod, every JOBGATE_* variable and every key of a mounted jobgate.toml
is a setting jobgate reads (with the right type, and never set twice), jobgate will start
(credentials it can read, or anonymous access said explicitly, and only in the dev overlay),
one replica on SQLite and its claim, or several on PostgreSQL each with its own identity and
data directory, the PodDisruptionBudget lets a pod be evicted but never all of several, and a
ServiceMonitor (a kind kubernetes-validate has no schema for: `--without-unschemaed` writes a
copy without them for it) is well formed and scrapes jobgate's /metrics.
It needs PyYAML (installed with kubernetes-validate), Python 3.11's tomllib, and reads
src/config/; it changes nothing. Every problem is reported, then it exits 1.
"""

import re
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

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
# deploy/overlays/kueue/role.yaml): read, list and watch its Workloads. Granted by a Role of
# this name, held to exactly this, only with Kueue on, and required then.
KUEUE_ROLE = "jobgate-kueue"
KUEUE_NEEDED = {("kueue.x-k8s.io", "workloads", v) for v in ("get", "list", "watch")}
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


# Objects that would widen jobgate's reach beyond the namespaces it was given, or ship a
# credential in a manifest.
FORBIDDEN_KINDS = {"ClusterRole", "ClusterRoleBinding", "Secret"}
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


def rust_type(text):
    """The TOML type of a clap field's Rust type."""
    text = text.strip()
    inner = re.fullmatch(r"Option<(.+)>", text)
    if inner:
        text = inner.group(1)
    if text == "bool":
        return bool
    if text.startswith("Vec<"):
        return list
    if re.fullmatch(r"[ui](8|16|32|64|128|size)", text):
        return int
    return str  # String, PathBuf, SocketAddr, and the value enums (written as their names)


def settings():
    """{variable: (key, TOML type)} of every setting jobgate reads: each `env = "JOBGATE_…"` of
    src/config/ with the field it belongs to, plus ANNOUNCED."""
    text = "\n".join(p.read_text() for p in sorted((REPO / "src" / "config").glob("*.rs")))
    found = {}
    for env, field, typ in re.findall(
        r'env\s*=\s*"(JOBGATE_[A-Z0-9_]+)".*?\bpub\s+(\w+)\s*:\s*([^,\n]+),', text, re.S
    ):
        found[env] = (field, rust_type(typ))
    for key, typ in ANNOUNCED.items():
        found.setdefault(f"JOBGATE_{key.upper()}", (key, typ))
    found.setdefault(CONFIG_VAR, ("config", str))
    return found


def settings_errors(known):
    """Announced settings that src/config/ declares with another type."""
    return [
        f"src/config/ declares {key} as a {known[f'JOBGATE_{key.upper()}'][1].__name__}, "
        f"deploy/check.py's ANNOUNCED as a {typ.__name__}: make them agree"
        for key, typ in ANNOUNCED.items()
        if known[f"JOBGATE_{key.upper()}"][1] is not typ
    ]


def name(obj):
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_of(container):
    """{variable: value}; a variable taken from a Secret or ConfigMap (valueFrom) is FROM_REF."""
    return {e["name"]: FROM_REF if "valueFrom" in e else e.get("value") for e in container.get("env") or []}


# The value of a variable set by reference (valueFrom), unknown until the pod starts.
FROM_REF = "<from a reference>"


def value_from(container, var):
    """The valueFrom of the variable `var` ({} when it is unset or a literal value)."""
    return next((e.get("valueFrom") or {} for e in container.get("env") or [] if e["name"] == var), {})


def is_dev(dep):
    return ((dep.get("metadata") or {}).get("annotations") or {}).get(DEV_MARKER[0]) == DEV_MARKER[1]


def file_source(path, container, volumes):
    """Where the file `path`, as the container sees it, comes from: {kind: secret|configMap, name,
    key, optional, read_only}, or None when no mounted Secret or ConfigMap provides it."""
    for mount in container.get("volumeMounts") or []:
        root = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(root) or mount.get("subPath"):
            continue
        rel = path[len(root):]
        vol = volumes.get(mount["name"]) or {}
        if "secret" in vol:
            sources = [{"secret": {**vol["secret"], "name": vol["secret"].get("secretName")}}]
        elif "configMap" in vol:
            sources = [{"configMap": vol["configMap"]}]
        else:
            sources = (vol.get("projected") or {}).get("sources") or []
        for source in sources:
            for kind in ("secret", "configMap"):
                ref = source.get(kind)
                if ref is None:
                    continue
                if ref.get("items") is None:
                    key = rel if "/" not in rel else None  # every key, as a file of its name
                else:
                    key = next((i["key"] for i in ref["items"] if i.get("path") == rel), None)
                if key is not None:
                    return {
                        "kind": kind,
                        "name": ref.get("name"),
                        "key": key,
                        "optional": ref.get("optional") is True,
                        "read_only": mount.get("readOnly") is True,
                    }
    return None


def toml_text(value):
    """A configuration file's value as the variable would spell it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def effective(env, container, volumes, by_kind, home, known, cw):
    """(problems, settings) of one container: its JOBGATE_* variables, completed with the keys of
    the configuration file JOBGATE_CONFIG names (read from its ConfigMap, rendered alongside),
    as {variable: value as text}. A key also set as a variable is a problem: the variable wins."""
    errors, merged = [], dict(env)
    path = env.get(CONFIG_VAR)
    if not path:
        return errors, merged
    source = file_source(path, container, volumes)
    if not source or source["kind"] != "configMap" or source["optional"]:
        return errors + [f"{cw}: {CONFIG_VAR} {path} must be a file of a mounted, required ConfigMap"], merged
    if not source["read_only"]:
        errors.append(f"{cw}: the configuration file's volume must be mounted readOnly")
    maps = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in by_kind.get("ConfigMap", [])}
    data = (maps.get((home, source["name"])) or {}).get("data") or {}
    if source["key"] not in data:
        return errors + [f"{cw}: {CONFIG_VAR}: no ConfigMap {home}/{source['name']} with key {source['key']} here"], merged
    try:
        config = tomllib.loads(data[source["key"]])
    except tomllib.TOMLDecodeError as e:
        return errors + [f"{cw}: {path} is not valid TOML: {e}"], merged
    var_of = {key: var for var, (key, _) in known.items()}
    for key, value in config.items():
        var = var_of.get(key)
        if var is None or var == CONFIG_VAR:
            errors.append(f"{cw}: {path}: {key} is not a setting jobgate reads")
            continue
        typ = known[var][1]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            errors.append(f"{cw}: {path}: {key} must be of TOML type {typ.__name__}, not {value!r}")
        if var in env:
            errors.append(f"{cw}: {key} is set in {path} and as {var}; the variable wins, the file's line is dead")
            continue
        merged[var] = toml_text(value)
    return errors, merged


def shares_database(settings):
    """Whether jobgate keeps its jobs in a PostgreSQL database (which replicas may share)."""
    return bool(settings.get(DATABASE_FILE_VAR) or settings.get(DATABASE_VAR))


def check_auth(settings, container, volumes, known, cw, dev):
    """jobgate starts and checks callers: credentials it can read (files from a mounted Secret,
    required outside the dev overlay), or anonymous access said explicitly, in dev only."""
    errors = []
    var_of = {key: var for var, (key, _) in known.items()}
    anonymous = settings.get(var_of["anonymous"])
    if anonymous not in (None, "true", "false"):
        errors.append(f"{cw}: {var_of['anonymous']} must be true or false, not {anonymous!r}")
    credentials = sorted(k for k in CREDENTIALS if settings.get(var_of[k]) not in (None, ""))
    host = (settings.get("JOBGATE_LISTEN") or "").rpartition(":")[0].strip("[]")
    loopback = host.startswith("127.") or host in ("::1", "localhost")
    if not loopback and not credentials and anonymous != "true":
        errors.append(
            f"{cw}: no credentials (API tokens, JWT keys) and anonymous access not allowed: jobgate "
            "refuses to start on a non-loopback address like this"
        )
    if anonymous == "false" and not credentials:
        errors.append(f"{cw}: anonymous access off and no credentials: nobody could call; jobgate refuses to start")
    if anonymous == "true" and not dev:
        errors.append(
            f"{cw}: anonymous callers are allowed outside the dev overlay (a Deployment without "
            f"the annotation {DEV_MARKER[0]}: {DEV_MARKER[1]})"
        )
    for origin in (settings.get(var_of["allowed_origins"]) or "").split(","):
        if origin and origin != "*" and not re.fullmatch(r"https?://[^/]+", origin):
            errors.append(f"{cw}: allowed_origins: {origin!r} is not an origin like https://example.com (no path)")
    frame, message = (settings.get(var_of[k]) for k in ("ws_max_frame_bytes", "ws_max_message_bytes"))
    if frame and message and frame.isdigit() and message.isdigit() and int(frame) > int(message):
        errors.append(f"{cw}: ws_max_frame_bytes {frame} exceeds ws_max_message_bytes {message}")
    for key, from_secret in CREDENTIAL_FILES.items():
        path = settings.get(var_of[key])
        if not path:
            continue
        source = file_source(path, container, volumes)
        if source is None:
            errors.append(f"{cw}: {key} {path} is not a file of a mounted Secret")
            continue
        if from_secret and source["kind"] != "secret":
            errors.append(f"{cw}: {key} {path} must come from a Secret, not a {source['kind']}")
        if from_secret and source["optional"] and not dev:
            errors.append(f"{cw}: {key} comes from an optional source: outside dev the pod must not start without it")
        if not source["read_only"]:
            errors.append(f"{cw}: the volume of {key} must be mounted readOnly")
    return errors


def check_disruption_budget(by_kind, home, replicas, pod_labels):
    """One PodDisruptionBudget for jobgate's pods, which lets a drain evict one of them (see
    deploy/base/pdb.yaml) and, when there are several, never all of them at once."""
    errors = []
    ours = []
    for pdb in by_kind.get("PodDisruptionBudget", []):
        s = pdb.get("spec") or {}
        if pdb["metadata"].get("namespace") != home or not matches((s.get("selector") or {}).get("matchLabels"), pod_labels):
            errors.append(f"{name(pdb)}: does not select jobgate's pod")
            continue
        ours.append(pdb)

        def pods(v):  # the number of pods an int-or-percent means, rounded up, as Kubernetes does
            if isinstance(v, str) and v.endswith("%"):
                return -(-int(v[:-1]) * replicas // 100)
            return v

        if ("minAvailable" in s) == ("maxUnavailable" in s):
            errors.append(f"{name(pdb)}: must set exactly one of minAvailable and maxUnavailable")
            continue
        # How many of the replicas a drain may evict at once.
        evictable = replicas - pods(s["minAvailable"]) if "minAvailable" in s else pods(s["maxUnavailable"])
        if evictable < 1:
            errors.append(
                f"{name(pdb)}: allows no eviction of jobgate's {replicas} pod(s): every node drain would "
                "block on it; use maxUnavailable: 1 (jobgate is restart-safe)"
            )
        elif replicas > 1 and evictable >= replicas:
            errors.append(
                f"{name(pdb)}: lets a drain evict all {replicas} of jobgate's pods at once, which the "
                "replicas exist to prevent; keep at least one running (maxUnavailable: 1)"
            )
    if len(ours) != 1:
        errors.append(f"expected one PodDisruptionBudget for jobgate's pod, found {len(ours)}")
    return errors


def allows_tcp(rule, port):
    """Whether the egress rule `rule` lets TCP to `port` out (to its peers, if it names any)."""
    if not rule.get("ports"):
        return True  # no ports: every port
    for p in rule["ports"]:
        if p.get("protocol", "TCP") != "TCP":
            continue
        if "port" not in p:
            return True
        if isinstance(p["port"], int) and p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False


def check_database_egress(by_kind, home, pod_labels):
    """Where a NetworkPolicy restricts the pod's egress, one of its rules lets PostgreSQL out."""
    restricting = [
        pol
        for pol in by_kind.get("NetworkPolicy", [])
        if pol["metadata"].get("namespace") == home
        and "Egress" in ((pol.get("spec") or {}).get("policyTypes") or [])
        and matches(((pol.get("spec") or {}).get("podSelector") or {}).get("matchLabels"), pod_labels)
    ]
    rules = [rule for pol in restricting for rule in pol["spec"].get("egress") or []]
    if restricting and not any(allows_tcp(rule, POSTGRES_PORT) for rule in rules):
        return [
            f"{DATABASE_FILE_VAR} is set, but {', '.join(name(p) for p in restricting)} let no TCP to port "
            f"{POSTGRES_PORT} out: jobgate could not reach PostgreSQL"
        ]
    return []


# What a ServiceMonitor (monitoring.coreos.com/v1) may contain here, field by field: the part of
# prometheus-operator's CRD schema jobgate's manifests could use. Anything else fails, as an
# unknown field fails kubernetes-validate --strict for the kinds it has schemas of.
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")
SERVICE_MONITOR_FIELDS = {
    "": {"apiVersion": str, "kind": str, "metadata": dict, "spec": dict},
    "metadata": {"name": str, "namespace": str, "labels": dict, "annotations": dict},
    "spec": {
        "selector": dict,
        "namespaceSelector": dict,
        "endpoints": list,
        "jobLabel": str,
        "targetLabels": list,
        "podTargetLabels": list,
        "sampleLimit": int,
        "targetLimit": int,
    },
    "spec.selector": {"matchLabels": dict},
    "spec.namespaceSelector": {"any": bool, "matchNames": list},
    "spec.endpoints[]": {
        "port": str,
        "path": str,
        "scheme": str,
        "interval": str,
        "scrapeTimeout": str,
        "honorLabels": bool,
        "honorTimestamps": bool,
        "relabelings": list,
        "metricRelabelings": list,
        "followRedirects": bool,
        "enableHttp2": bool,
        "filterRunning": bool,
    },
}


def duration_seconds(text):
    units = {"y": 31536000, "w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)(ms|y|w|d|h|m|s)", text))


def check_service_monitors(by_kind, home):
    """A ServiceMonitor has only known fields of the right types, and makes Prometheus scrape
    /metrics over plain HTTP from a named port of jobgate's Service."""
    errors = []
    services = [s for s in by_kind.get("Service", []) if s["metadata"].get("namespace") == home]
    for sm in by_kind.get("ServiceMonitor", []):
        w = name(sm)

        def fields(obj, where):
            if not isinstance(obj, dict):
                errors.append(f"{w}: {where or 'the object'} must be a mapping")
                return
            allowed = SERVICE_MONITOR_FIELDS[where]
            for key, value in obj.items():
                if key not in allowed:
                    errors.append(f"{w}: unknown field {where + '.' if where else ''}{key}")
                elif not isinstance(value, allowed[key]) or (allowed[key] is int and isinstance(value, bool)):
                    errors.append(f"{w}: {where + '.' if where else ''}{key} must be of type {allowed[key].__name__}")

        fields(sm, "")
        fields(sm.get("metadata") or {}, "metadata")
        spec = sm.get("spec") or {}
        fields(spec, "spec")
        if sm.get("apiVersion") != "monitoring.coreos.com/v1":
            errors.append(f"{w}: apiVersion must be monitoring.coreos.com/v1")
        if (sm.get("metadata") or {}).get("namespace") != home:
            errors.append(f"{w}: must be in jobgate's namespace {home}")
        selector = spec.get("selector")
        if not isinstance(selector, dict) or not selector.get("matchLabels"):
            errors.append(f"{w}: spec.selector.matchLabels is required")
            selector = {}
        fields(selector, "spec.selector")
        ns_selector = spec.get("namespaceSelector") or {}
        fields(ns_selector, "spec.namespaceSelector")
        if ns_selector and not ns_selector.get("any") and home not in (ns_selector.get("matchNames") or []):
            errors.append(f"{w}: spec.namespaceSelector does not include {home}")
        selected = [s for s in services if matches(selector.get("matchLabels"), s["metadata"].get("labels") or {})]
        if not selected:
            errors.append(f"{w}: spec.selector.matchLabels selects no Service of jobgate")
        port_names = {p.get("name") for s in selected for p in (s["spec"].get("ports") or [])}
        endpoints = spec.get("endpoints")
        if not isinstance(endpoints, list) or not endpoints:
            errors.append(f"{w}: spec.endpoints must list at least one endpoint")
            endpoints = []
        for i, ep in enumerate(endpoints):
            fields(ep, "spec.endpoints[]")
            if not isinstance(ep, dict):
                continue
            ew = f"{w}: spec.endpoints[{i}]"
            if ep.get("port") not in port_names:
                errors.append(f"{ew}.port {ep.get('port')!r} is not a port name of the selected Service")
            if ep.get("path") != "/metrics":
                errors.append(f"{ew}.path must be /metrics (where jobgate serves its metrics)")
            if ep.get("scheme", "http") != "http":
                errors.append(f"{ew}.scheme must be http (jobgate serves plain HTTP)")
            for key in ("interval", "scrapeTimeout"):
                if key in ep and not (isinstance(ep[key], str) and DURATION.match(ep[key])):
                    errors.append(f"{ew}.{key} {ep[key]!r} is not a Prometheus duration")
            if (
                isinstance(ep.get("interval"), str)
                and isinstance(ep.get("scrapeTimeout"), str)
                and duration_seconds(ep["scrapeTimeout"]) > duration_seconds(ep["interval"])
            ):
                errors.append(f"{ew}: scrapeTimeout must not exceed interval")
    return errors


def check(docs, known):
    """Every problem found in one rendered kustomization, as sentences."""
    errors = []
    by_kind = {}
    for obj in docs:
        by_kind.setdefault(obj.get("kind"), []).append(obj)
        # A checkov check skipped for one object says why, as deploy/.checkov.yaml's entries must.
        for key, value in ((obj.get("metadata") or {}).get("annotations") or {}).items():
            if key.startswith("checkov.io/skip") and not re.fullmatch(r"CKV2?_[A-Z0-9_]+=\s*\S.*", str(value), re.S):
                errors.append(f"{name(obj)}: annotation {key} skips a checkov check without a reason (CKV_…=<why>)")
        if obj.get("kind") in FORBIDDEN_KINDS:
            errors.append(f"{name(obj)}: jobgate's manifests must not contain a {obj['kind']}")
        for where, labels in [("labels", (obj.get("metadata") or {}).get("labels") or {})] + [
            ("pod template labels", ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {})
        ]:
            if labels.get(MANAGED_BY[0]) == MANAGED_BY[1]:
                errors.append(
                    f"{name(obj)}: {where} carry {MANAGED_BY[0]}={MANAGED_BY[1]}, the label of the "
                    "Jobs jobgate creates; its watchers would take this for one of them"
                )

    deployments = by_kind.get("Deployment", [])
    if len(deployments) != 1:
        return errors + [f"expected exactly one Deployment, found {len(deployments)}"]
    dep = deployments[0]
    home = dep["metadata"].get("namespace")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"].get("labels") or {}
    where = name(dep)
    dev = is_dev(dep)
    replicas = spec.get("replicas", 1)

    if not matches(spec["selector"].get("matchLabels"), pod_labels):
        errors.append(f"{where}: selector does not match the pod template's labels")

    psc = pod.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True:
        errors.append(f"{where}: pod securityContext.runAsNonRoot must be true")
    if not isinstance(psc.get("runAsUser"), int) or psc["runAsUser"] == 0:
        errors.append(f"{where}: pod securityContext.runAsUser must be a numeric non-root UID")
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        errors.append(f"{where}: pod seccompProfile must be RuntimeDefault")
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        errors.append(f"{where}: the pod must not share the host's namespaces")

    account = pod.get("serviceAccountName")
    accounts = {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in by_kind.get("ServiceAccount", [])
    }
    if not account or account == "default" or (home, account) not in accounts:
        errors.append(f"{where}: must run as its own ServiceAccount, defined alongside it")
    elif accounts[(home, account)].get("automountServiceAccountToken") is not False:
        errors.append(f"ServiceAccount {home}/{account}: automountServiceAccountToken must be false")
    if pod.get("automountServiceAccountToken") is not True:
        errors.append(f"{where}: the pod must ask for its token (automountServiceAccountToken: true)")

    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    claims = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in by_kind.get("PersistentVolumeClaim", [])}
    containers = pod.get("containers") or []
    if len(containers) != 1:
        errors.append(f"{where}: expected one container, found {len(containers)}")
    env = {}
    ports = {}
    for c in containers:
        cw = f"{where} container {c.get('name')}"
        csc = c.get("securityContext") or {}
        if csc.get("allowPrivilegeEscalation") is not False:
            errors.append(f"{cw}: allowPrivilegeEscalation must be false")
        if csc.get("readOnlyRootFilesystem") is not True:
            errors.append(f"{cw}: readOnlyRootFilesystem must be true")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or caps.get("add"):
            errors.append(f"{cw}: capabilities must drop ALL and add none")
        if csc.get("privileged") or csc.get("runAsUser") == 0:
            errors.append(f"{cw}: must not be privileged or root")
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            missing = {"cpu", "memory"} - set(res.get(kind) or {})
            if missing:
                errors.append(f"{cw}: resources.{kind} lacks {', '.join(sorted(missing))}")
        ports.update({p.get("name"): p["containerPort"] for p in c.get("ports") or []})
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (c.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != path:
                errors.append(f"{cw}: {probe} must GET {path}")
            elif get.get("port") not in ports and get.get("port") not in ports.values():
                errors.append(f"{cw}: {probe} port {get.get('port')!r} is not a container port")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        env = env_of(c)
        for var in sorted(set(env) - set(known)):
            if var.startswith("JOBGATE_"):
                errors.append(f"{cw}: {var} is not a variable jobgate reads (src/config/)")
        variables = env
        # From here on, `env` is every setting: the variables and the configuration file's keys.
        config_errors, env = effective(env, c, volumes, by_kind, home, known, cw)
        errors += config_errors
        errors += check_auth(env, c, volumes, known, cw, dev)
        if c.get("imagePullPolicy") != "Always" and not dev:
            errors.append(
                f"{cw}: imagePullPolicy must be Always (a node's cached image is taken only in the dev overlay)"
            )
        for var in ("JOBGATE_LISTEN", "JOBGATE_DATA_DIR", "JOBGATE_EXECUTOR"):
            if var not in env:
                errors.append(f"{cw}: {var} must be set")
        # Credentials are files from Secrets (checkov's CKV_K8S_35), the database URL's included.
        for e in c.get("env") or []:
            if "secretKeyRef" in (e.get("valueFrom") or {}):
                errors.append(f"{cw}: {e['name']} comes from a Secret as a variable; credentials are files")
        if any("secretRef" in source for source in c.get("envFrom") or []):
            errors.append(f"{cw}: envFrom a Secret: credentials are files")
        shared = shares_database(env)
        if DATABASE_VAR in env:
            where = "as a variable" if DATABASE_VAR in variables else "in the configuration file, a ConfigMap"
            errors.append(
                f"{cw}: the database URL is set {where}; it holds the password: mount it as a file of a "
                f"Secret and name that file with {DATABASE_FILE_VAR}"
            )
        data_dir = env.get("JOBGATE_DATA_DIR")
        data = volumes.get(mounts.get(data_dir), {})
        claim = (data.get("persistentVolumeClaim") or {}).get("claimName")
        if not data_dir:
            pass
        elif replicas > 1 and shared:  # (several on SQLite fail anyway, below)
            if "emptyDir" not in data:
                errors.append(
                    f"{cw}: JOBGATE_DATA_DIR {data_dir} must be an emptyDir with {replicas} replicas: they "
                    "cannot share a ReadWriteOnce claim, and with PostgreSQL nothing in it must persist"
                )
        elif not (shared and "emptyDir" in data) and (home, claim) not in claims:
            errors.append(
                f"{cw}: JOBGATE_DATA_DIR {data_dir} must be a mounted PersistentVolumeClaim defined alongside "
                f"(or, with {DATABASE_FILE_VAR}, an emptyDir)"
            )
        if shared and env.get("JOBGATE_EXECUTOR") == "kubernetes":
            # Replicas sharing the database tell each other apart by their ids in the Leases.
            id_ref = (value_from(c, REPLICA_ID_VAR).get("fieldRef") or {}).get("fieldPath")
            if replicas > 1 and id_ref not in ("metadata.name", "metadata.uid"):
                errors.append(
                    f"{cw}: {REPLICA_ID_VAR} must be each pod's own name (valueFrom.fieldRef metadata.name): "
                    f"the {replicas} replicas need ids of their own in the Leases"
                )
            ns_ref = (value_from(c, LEASE_NAMESPACE_VAR).get("fieldRef") or {}).get("fieldPath")
            if LEASE_NAMESPACE_VAR in env and ns_ref != "metadata.namespace" and env[LEASE_NAMESPACE_VAR] != home:
                errors.append(
                    f"{cw}: {LEASE_NAMESPACE_VAR} must be jobgate's own namespace {home} (valueFrom.fieldRef "
                    "metadata.namespace): Leases are granted nowhere else"
                )
        if "emptyDir" not in volumes.get(mounts.get("/tmp"), {}):
            errors.append(f"{cw}: /tmp must be an emptyDir (the root filesystem is read-only)")
        listen = env.get("JOBGATE_LISTEN") or ""
        port = listen.rpartition(":")[2]
        if not listen.startswith("0.0.0.0:") or not port.isdigit() or int(port) not in ports.values():
            errors.append(f"{cw}: JOBGATE_LISTEN {listen!r} must be 0.0.0.0:<a container port>")

    # How many replicas may run, and how they are replaced, depends on the store.
    shared = shares_database(env)
    strategy = spec.get("strategy") or {}
    if not shared:
        if replicas != 1:
            errors.append(
                f"{where}: replicas must be 1 on SQLite, which has a single writer (several replicas need "
                f"{DATABASE_FILE_VAR}, a shared PostgreSQL database)"
            )
        if strategy.get("type") != "Recreate":
            errors.append(f"{where}: strategy must be Recreate (the old pod holds the data volume and lock)")
    elif replicas > 1:
        if env.get("JOBGATE_EXECUTOR") != "kubernetes":
            errors.append(
                f"{where}: {replicas} replicas need the Kubernetes executor: the local one runs on one replica only"
            )
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            errors.append(
                f"{where}: strategy must be RollingUpdate with {replicas} replicas: Recreate stops them all at once"
            )
        else:
            most = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")
            # Kubernetes rounds a percentage of maxUnavailable down.
            down = int(most[:-1]) * replicas // 100 if isinstance(most, str) and most.endswith("%") else most
            if down >= replicas:
                errors.append(f"{where}: maxUnavailable {most!r} lets a rollout stop all {replicas} replicas at once")
    mounted = {(home, (v.get("persistentVolumeClaim") or {}).get("claimName")) for v in volumes.values()}
    for pvc in by_kind.get("PersistentVolumeClaim", []):
        if (pvc["metadata"].get("namespace"), pvc["metadata"]["name"]) not in mounted:
            errors.append(f"{name(pvc)}: no pod mounts it; it would provision a volume for nothing")

    if env.get("JOBGATE_EXECUTOR") == "kubernetes":
        errors += check_rbac(by_kind, env, home, account, shared)
    if shared:
        errors += check_database_egress(by_kind, home, pod_labels)
    errors += check_disruption_budget(by_kind, home, replicas, pod_labels)
    errors += check_service_monitors(by_kind, home)

    services = by_kind.get("Service", [])
    if not services:
        errors.append("no Service for jobgate")
    for svc in services:
        s = svc["spec"]
        if svc["metadata"].get("namespace") != home or not matches(s.get("selector"), pod_labels):
            errors.append(f"{name(svc)}: selector does not select jobgate's pod")
        for p in s.get("ports") or []:
            target = p.get("targetPort", p.get("port"))
            if target not in ports and target not in ports.values():
                errors.append(f"{name(svc)}: targetPort {target!r} is not a container port")
    for pol in by_kind.get("NetworkPolicy", []):
        s = pol["spec"]
        if not matches((s.get("podSelector") or {}).get("matchLabels"), pod_labels):
            errors.append(f"{name(pol)}: podSelector does not select jobgate's pod")
        for rule in s.get("ingress") or []:
            for p in rule.get("ports") or [{}]:
                if p.get("port") not in ports and p.get("port") not in ports.values():
                    errors.append(f"{name(pol)}: ingress must be limited to jobgate's container port")
    return errors


def check_rbac(by_kind, env, home, account, shared):
    """Roles grant exactly NEEDED, to jobgate's account, in exactly the allowed namespaces; and,
    with a shared database (`shared`), LEASES_NEEDED in jobgate's own namespace, and only then."""
    errors = []
    allowed = {n.strip() for n in (env.get("JOBGATE_ALLOWED_NAMESPACES") or "").split(",") if n.strip()}
    default = env.get("JOBGATE_NAMESPACE") or env.get("JOBGATE_DEFAULT_NAMESPACE")
    if not allowed:
        errors.append(
            "JOBGATE_ALLOWED_NAMESPACES must be set: without it jobgate watches the whole cluster, "
            "which these namespaced Roles do not allow"
        )
    if default not in allowed:
        errors.append(f"the default namespace {default!r} must be one of the allowed {sorted(allowed)}")

    kueue = (env.get("JOBGATE_KUEUE") or "").strip().lower() in ("true", "1", "yes", "on") or bool(
        (env.get("JOBGATE_DEFAULT_QUEUE") or "").strip()
    )
    roles = {}
    workloads, errors_of_templates = workload_needed()
    errors.extend(errors_of_templates)
    for role in by_kind.get("Role", []):
        granted = set()
        for rule in role.get("rules") or []:
            if rule.get("resourceNames") or rule.get("nonResourceURLs"):
                errors.append(f"{name(role)}: unexpected resourceNames/nonResourceURLs")
            for g in rule.get("apiGroups") or []:
                for r in rule.get("resources") or []:
                    for v in rule.get("verbs") or []:
                        granted.add((g, r, v))
        needed = {WORKLOAD_ROLE: workloads, LEASE_ROLE: LEASES_NEEDED, KUEUE_ROLE: KUEUE_NEEDED}.get(
            role["metadata"]["name"], NEEDED
        )
        if role["metadata"]["name"] == KUEUE_ROLE and not kueue:
            errors.append(f"{name(role)}: grants Kueue's Workloads, which jobgate reads only with JOBGATE_KUEUE")
        if role["metadata"]["name"] == LEASE_ROLE:
            if role["metadata"].get("namespace") != home:
                errors.append(f"{name(role)}: Leases are jobgate's only in its own namespace {home}")
            if not shared:
                errors.append(f"{name(role)}: grants Leases, which jobgate uses only with {DATABASE_FILE_VAR}")
        extra = sorted(granted - needed)
        lacking = sorted(needed - granted)
        if extra:
            errors.append(f"{name(role)}: grants more than jobgate needs: {extra}")
        if lacking:
            errors.append(f"{name(role)}: lacks what jobgate needs: {lacking}")
        roles[(role["metadata"].get("namespace"), role["metadata"]["name"])] = role

    granted_in = set()
    leases_bound_in = set()
    kueue_bound_in = set()
    for rb in by_kind.get("RoleBinding", []):
        ns = rb["metadata"].get("namespace")
        ref = rb.get("roleRef") or {}
        if ref.get("kind") != "Role" or (ns, ref.get("name")) not in roles:
            errors.append(f"{name(rb)}: must refer to a Role defined here in {ns}")
        for subject in rb.get("subjects") or []:
            if (subject.get("kind"), subject.get("name"), subject.get("namespace")) != (
                "ServiceAccount",
                account,
                home,
            ):
                errors.append(f"{name(rb)}: binds {subject}, not jobgate's ServiceAccount {home}/{account}")
        # The Lease Role is no right to run jobs: it does not make a namespace one jobgate works in.
        if ref.get("name") == LEASE_ROLE:
            leases_bound_in.add(ns)
        elif ref.get("name") == KUEUE_ROLE:
            kueue_bound_in.add(ns)
        else:
            granted_in.add(ns)
    if shared and home not in leases_bound_in:
        errors.append(
            f"{DATABASE_FILE_VAR} is set: replicas coordinate through Leases, so a RoleBinding in {home} must "
            f"grant jobgate the Role {LEASE_ROLE} ({', '.join(sorted(v for _, _, v in LEASES_NEEDED))} on leases)"
        )
    if kueue:
        for ns in sorted(allowed - kueue_bound_in):
            errors.append(
                f"JOBGATE_KUEUE is on: jobgate watches Kueue's Workloads in {ns}, so a RoleBinding there must "
                f"grant it the Role {KUEUE_ROLE} (get, list, watch on workloads.kueue.x-k8s.io)"
            )
    for ns in sorted(allowed - granted_in):
        errors.append(f"namespace {ns} is allowed, but no RoleBinding lets jobgate work there")
    for ns in sorted(granted_in - allowed):
        errors.append(f"jobgate is granted rights in {ns}, which is not in JOBGATE_ALLOWED_NAMESPACES")
    return errors


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def self_test(docs, known):
    """Breaks one rule at a time and makes sure each is caught; a checker that passes
    everything would otherwise look exactly like a good manifest. Breakages that need an object
    the rendering does not have (a ServiceMonitor, a configuration file) apply where it does."""
    import copy

    def dep(d):
        return next(o for o in d if o["kind"] == "Deployment")

    def pod(d):
        return dep(d)["spec"]["template"]["spec"]

    def container(d):
        return pod(d)["containers"][0]

    def role(d):
        return next(o for o in d if o["kind"] == "Role")

    def of_kind(d, kind):
        return next(o for o in d if o["kind"] == kind)

    def set_env(d, var, value):
        env = container(d).setdefault("env", [])
        env[:] = [e for e in env if e["name"] != var] + [{"name": var, "value": value}]

    def drop_env(d, *names):
        container(d)["env"] = [e for e in container(d).get("env") or [] if e["name"] not in names]

    def not_dev(d):
        (dep(d)["metadata"].get("annotations") or {}).pop(DEV_MARKER[0], None)

    def config_map(d):  # the data of the ConfigMap JOBGATE_CONFIG's file comes from
        c = container(d)
        source = file_source(env_of(c)[CONFIG_VAR], c, {v["name"]: v for v in pod(d).get("volumes") or []})
        cm = next(o for o in d if o["kind"] == "ConfigMap" and o["metadata"]["name"] == source["name"])
        return cm["data"], source["key"]

    def edit_config(d, edit):
        data, key = config_map(d)
        data[key] = edit(data[key])

    def monitor(d):
        return of_kind(d, "ServiceMonitor")

    breakages = {
        "a Role granting secrets": lambda d: role(d)["rules"].append(
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        ),
        "a Role missing pods/log": lambda d: role(d).update(
            rules=[r for r in role(d)["rules"] if "pods/log" not in r["resources"]]
        ),
        "a writable root filesystem": lambda d: container(d)["securityContext"].pop("readOnlyRootFilesystem"),
        "root": lambda d: pod(d)["securityContext"].update(runAsUser=0),
        "an unknown JOBGATE_ variable": lambda d: set_env(d, "JOBGATE_NO_SUCH_FLAG", "1"),
        "a ClusterRole": lambda d: d.append({"kind": "ClusterRole", "metadata": {"name": "x"}}),
        "a Secret": lambda d: d.append({"kind": "Secret", "metadata": {"name": "jobgate-auth"}}),
        "the managed-by=jobgate label": lambda d: of_kind(d, "Service")["metadata"]["labels"].update(
            {MANAGED_BY[0]: MANAGED_BY[1]}
        ),
        "a Service selecting nothing": lambda d: of_kind(d, "Service")["spec"].update(selector={"app": "other"}),
        "no credentials and anonymous access unsaid": lambda d: drop_env(
            d, CONFIG_VAR, "JOBGATE_ANONYMOUS", "JOBGATE_API_TOKEN", "JOBGATE_API_TOKENS_FILE"
        ),
        "anonymous access outside dev": lambda d: (set_env(d, "JOBGATE_ANONYMOUS", "true"), not_dev(d)),
        "a tokens file on no mount": lambda d: (
            drop_env(d, CONFIG_VAR),
            set_env(d, "JOBGATE_API_TOKENS_FILE", "/etc/elsewhere/tokens.toml"),
        ),
        "an optional tokens Secret outside dev": lambda d: (
            not_dev(d),
            drop_env(d, CONFIG_VAR, "JOBGATE_ANONYMOUS"),
            set_env(d, "JOBGATE_API_TOKENS_FILE", "/etc/jobgate/auth/tokens.toml"),
            [
                src["secret"].update(optional=True)
                for v in pod(d)["volumes"]
                for src in (v.get("projected") or {}).get("sources") or []
                if "secret" in src
            ],
        ),
        "a node-cached image outside dev": lambda d: (
            container(d).update(imagePullPolicy="IfNotPresent"),
            not_dev(d),
        ),
        "a disruption budget with minAvailable equal to replicas": lambda d: (
            of_kind(d, "PodDisruptionBudget")["spec"].pop("maxUnavailable", None),
            of_kind(d, "PodDisruptionBudget")["spec"].update(minAvailable=dep(d)["spec"].get("replicas", 1)),
        ),
        "a disruption budget with both minAvailable and maxUnavailable": lambda d: of_kind(
            d, "PodDisruptionBudget"
        )["spec"].update(minAvailable=0, maxUnavailable=1),
        "no disruption budget": lambda d: d.remove(of_kind(d, "PodDisruptionBudget")),
        "a token from a Secret as a variable": lambda d: (
            drop_env(d, "JOBGATE_API_TOKEN"),
            container(d)["env"].append(
                {"name": "JOBGATE_API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "jobgate-auth", "key": "token"}}}
            ),
        ),
        "a checkov skip without a reason": lambda d: of_kind(d, "Service")["metadata"].setdefault(
            "annotations", {}
        ).update({"checkov.io/skip1": "CKV_K8S_21"}),
        "a claim no pod mounts": lambda d: d.append(
            {
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "jobgate-spare", "namespace": dep(d)["metadata"].get("namespace")},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
        ),
    }
    kinds = {o.get("kind") for o in docs}
    home = dep(docs)["metadata"].get("namespace")
    replicas = dep(docs)["spec"].get("replicas", 1)
    shared = shares_database(env_of(container(docs)))

    def lease_objects(d):
        return [o for o in d if o["kind"] in ("Role", "RoleBinding") and o["metadata"]["name"] == LEASE_ROLE]

    def lease_role(d):
        return next(o for o in lease_objects(d) if o["kind"] == "Role")

    def egress_policies(d):
        return [pol for pol in d if pol["kind"] == "NetworkPolicy" and "Egress" in pol["spec"].get("policyTypes", [])]

    def without_postgres(pol):  # the policy's egress rules but those naming PostgreSQL's port
        pol["spec"]["egress"] = [
            rule
            for rule in pol["spec"].get("egress") or []
            if not any(p.get("port") == POSTGRES_PORT for p in rule.get("ports") or [])
        ]

    def grant_leases(d):  # a Lease Role and its binding, as deploy/overlays/ha has them
        meta = {"name": LEASE_ROLE, "namespace": home}
        verbs = sorted(v for _, _, v in LEASES_NEEDED)
        rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs}]
        subjects = [{"kind": "ServiceAccount", "name": pod(d)["serviceAccountName"], "namespace": home}]
        ref = {"kind": "Role", "name": LEASE_ROLE}
        d.append({"kind": "Role", "metadata": dict(meta), "rules": rules})
        d.append({"kind": "RoleBinding", "metadata": dict(meta), "roleRef": ref, "subjects": subjects})

    def data_on_claim(d):  # the data directory back on a claim of its own, defined alongside
        pod(d)["volumes"] = [v for v in pod(d)["volumes"] if v["name"] != "data"] + [
            {"name": "data", "persistentVolumeClaim": {"claimName": "jobgate-data"}}
        ]
        d.append(
            {
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": "jobgate-data", "namespace": home},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
        )

    if not shared:
        breakages |= {
            "two replicas on SQLite": lambda d: dep(d)["spec"].update(replicas=2),
            "a Lease grant without a shared database": grant_leases,
        }
    if replicas > 1:
        breakages |= {
            "a disruption budget letting every pod go": lambda d: (
                of_kind(d, "PodDisruptionBudget")["spec"].pop("minAvailable", None),
                of_kind(d, "PodDisruptionBudget")["spec"].update(maxUnavailable=replicas),
            ),
            "several replicas replaced by Recreate": lambda d: dep(d)["spec"].update(strategy={"type": "Recreate"}),
            "a rollout that may stop every replica": lambda d: dep(d)["spec"].update(
                strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "100%"}}
            ),
            "several replicas on the local executor": lambda d: set_env(d, "JOBGATE_EXECUTOR", "local"),
            "several replicas sharing a claim": data_on_claim,
            "one replica id for every replica": lambda d: set_env(d, REPLICA_ID_VAR, "jobgate"),
        }
    if shared:
        breakages |= {
            "the database URL as a literal value": lambda d: (
                drop_env(d, DATABASE_FILE_VAR),
                set_env(d, DATABASE_VAR, "postgres://jobgate:pw@db/jobgate"),
            ),
            "the database URL from a Secret as a variable": lambda d: (
                drop_env(d, DATABASE_FILE_VAR),
                container(d)["env"].append(
                    {"name": DATABASE_VAR, "valueFrom": {"secretKeyRef": {"name": "jobgate-database", "key": "url"}}}
                ),
            ),
            "the database URL file outside a Secret": lambda d: set_env(
                d, DATABASE_FILE_VAR, env_of(container(d)).get(CONFIG_VAR) or "/etc/hostname"
            ),
            "Leases in another namespace": lambda d: set_env(d, LEASE_NAMESPACE_VAR, "kube-system"),
            "no Lease Role": lambda d: [d.remove(o) for o in lease_objects(d)],
            "a Lease grant in another namespace": lambda d: [
                o["metadata"].update(namespace="batch-jobs") for o in lease_objects(d)
            ],
            "a Lease Role granting patch": lambda d: lease_role(d)["rules"][0]["verbs"].append("patch"),
            "a Lease Role granting ConfigMaps": lambda d: lease_role(d)["rules"].append(
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
            ),
            "Leases granted by the Role for jobs": lambda d: role(d)["rules"].append(
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}
            ),
        }
        if egress_policies(docs):
            breakages["egress without PostgreSQL"] = lambda d: [without_postgres(pol) for pol in egress_policies(d)]
    if CONFIG_VAR in env_of(container(docs)):
        breakages |= {
            "an unknown key in the configuration file": lambda d: edit_config(d, lambda t: t + "\nno_such_key = 1\n"),
            "a wrongly typed key in the configuration file": lambda d: edit_config(
                d, lambda t: t + "\nmax_batch = \"ten\"\n"
            ),
            "a WebSocket frame larger than a message": lambda d: edit_config(
                d, lambda t: re.sub(r"(?m)^ws_max_frame_bytes = .*$", "ws_max_frame_bytes = 1048576", t)
            ),
            "an origin with a path": lambda d: edit_config(
                d, lambda t: re.sub(r"(?m)^allowed_origins = .*$", 'allowed_origins = ["https://x.example/app/"]', t)
            ),
            "a key set in the file and as a variable": lambda d: set_env(
                d, next(var for var, (key, _) in known.items() if key == "log_format"), "json"
            ),
            "a configuration file that is not valid TOML": lambda d: edit_config(d, lambda t: t + "\n= broken\n"),
        }
        if shared:
            breakages["the database URL in the configuration file"] = lambda d: (
                drop_env(d, DATABASE_FILE_VAR),
                edit_config(d, lambda t: t + '\ndatabase_url = "postgres://jobgate:pw@db/jobgate"\n'),
            )
    if "ServiceMonitor" in kinds:
        breakages |= {
            "a ServiceMonitor scraping an unknown port": lambda d: monitor(d)["spec"]["endpoints"][0].update(
                port="metrics"
            ),
            "a ServiceMonitor scraping another path": lambda d: monitor(d)["spec"]["endpoints"][0].update(
                path="/graphql"
            ),
            "a ServiceMonitor selecting no Service": lambda d: monitor(d)["spec"]["selector"].update(
                matchLabels={"app": "other"}
            ),
            "a ServiceMonitor with an unknown field": lambda d: monitor(d)["spec"]["endpoints"][0].update(
                bearerTokenFile="/var/run/secrets/token"
            ),
            "a ServiceMonitor with a bad duration": lambda d: monitor(d)["spec"]["endpoints"][0].update(
                interval="30 seconds"
            ),
        }
    failures = []
    for e in check(docs, known):
        failures.append(f"the unbroken manifests already fail: {e}")
    for what, breaking in breakages.items():
        broken = copy.deepcopy(docs)
        breaking(broken)
        if not check(broken, known):
            failures.append(f"{what} was not caught")
    return failures


# Kinds kubernetes-validate has no schema for, which check() validates instead.
UNSCHEMAED = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def without_unschemaed(src, dst):
    """Copies the rendering `src` to `dst` without the objects of UNSCHEMAED kinds (verbatim when
    it has none)."""
    docs = load(src)
    kept = [d for d in docs if (d.get("apiVersion"), d.get("kind")) not in UNSCHEMAED]
    with open(dst, "w") as f:
        if len(kept) == len(docs):
            f.write(Path(src).read_text())
        else:
            yaml.safe_dump_all(kept, f, sort_keys=False)


def main(argv):
    if argv[:1] == ["--without-unschemaed"] and len(argv) == 3:
        without_unschemaed(argv[1], argv[2])
        return 0
    test = argv[:1] == ["--self-test"]
    paths = argv[1:] if test else argv
    if not paths:
        sys.exit(__doc__)
    known = settings()
    status = 0
    for e in settings_errors(known):
        print(f"ERROR: {e}", file=sys.stderr)
        status = 1
    for path in paths:
        docs = load(path)
        errors = self_test(docs, known) if test else check(docs, known)
        for e in errors:
            print(f"ERROR {path}: {e}", file=sys.stderr)
        status |= bool(errors)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
