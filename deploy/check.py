#!/usr/bin/env python3
"""Checks what a schema cannot: that rendered jobgate manifests are least-privilege, hardened
and consistent with each other and with jobgate's configuration.

    python3 deploy/check.py RENDERED.yaml...   # one file per kustomization, as rendered
    python3 deploy/check.py --self-test RENDERED.yaml

kubernetes-validate (run by deploy/validate) proves every object is well formed for the API;
this proves the objects make sense together: the Role grants exactly what jobgate uses in
every namespace it may run jobs in and nothing anywhere else, the pod runs locked down, the
Service and NetworkPolicy select the pod, and every JOBGATE_* variable is one jobgate reads.
It needs PyYAML (installed with kubernetes-validate) and reads src/config.rs; it changes
nothing. Every problem is reported, then it exits 1.
"""

import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# (apiGroup, resource, verb) jobgate needs in each namespace it runs jobs in (see
# deploy/base/role.yaml for why each is there). A Role granting anything else, or less, fails.
NEEDED = {
    *(("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")),
    *(("", "pods", v) for v in ("get", "list", "watch")),
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


def config_env_names():
    """The JOBGATE_* variables jobgate reads: the `env = "…"` of its clap arguments."""
    text = (REPO / "src" / "config.rs").read_text()
    return set(re.findall(r'env\s*=\s*"(JOBGATE_[A-Z0-9_]+)"', text))


def name(obj):
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def check(docs, env_names):
    """Every problem found in one rendered kustomization, as sentences."""
    errors = []
    by_kind = {}
    for obj in docs:
        by_kind.setdefault(obj.get("kind"), []).append(obj)
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

    if spec.get("replicas") != 1:
        errors.append(f"{where}: replicas must be 1 (SQLite has a single writer)")
    if (spec.get("strategy") or {}).get("type") != "Recreate":
        errors.append(f"{where}: strategy must be Recreate (the old pod holds the data volume and lock)")
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
        for var in sorted(set(env) - env_names):
            if var.startswith("JOBGATE_"):
                errors.append(f"{cw}: {var} is not a variable jobgate reads (src/config.rs)")
        for var in ("JOBGATE_LISTEN", "JOBGATE_DATA_DIR", "JOBGATE_EXECUTOR"):
            if var not in env:
                errors.append(f"{cw}: {var} must be set")
        data_dir = env.get("JOBGATE_DATA_DIR")
        data = volumes.get(mounts.get(data_dir), {})
        claim = (data.get("persistentVolumeClaim") or {}).get("claimName")
        if data_dir and (home, claim) not in claims:
            errors.append(f"{cw}: JOBGATE_DATA_DIR {data_dir} must be a mounted PersistentVolumeClaim defined alongside")
        if "emptyDir" not in volumes.get(mounts.get("/tmp"), {}):
            errors.append(f"{cw}: /tmp must be an emptyDir (the root filesystem is read-only)")
        listen = env.get("JOBGATE_LISTEN") or ""
        port = listen.rpartition(":")[2]
        if not listen.startswith("0.0.0.0:") or not port.isdigit() or int(port) not in ports.values():
            errors.append(f"{cw}: JOBGATE_LISTEN {listen!r} must be 0.0.0.0:<a container port>")

    if env.get("JOBGATE_EXECUTOR") == "kubernetes":
        errors += check_rbac(by_kind, env, home, account)

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


def check_rbac(by_kind, env, home, account):
    """Roles grant exactly NEEDED, to jobgate's account, in exactly the allowed namespaces."""
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
        needed = workloads if role["metadata"]["name"] == WORKLOAD_ROLE else NEEDED
        extra = sorted(granted - needed)
        lacking = sorted(needed - granted)
        if extra:
            errors.append(f"{name(role)}: grants more than jobgate needs: {extra}")
        if lacking:
            errors.append(f"{name(role)}: lacks what jobgate needs: {lacking}")
        roles[(role["metadata"].get("namespace"), role["metadata"]["name"])] = role

    granted_in = set()
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
        granted_in.add(ns)
    for ns in sorted(allowed - granted_in):
        errors.append(f"namespace {ns} is allowed, but no RoleBinding lets jobgate work there")
    for ns in sorted(granted_in - allowed):
        errors.append(f"jobgate is granted rights in {ns}, which is not in JOBGATE_ALLOWED_NAMESPACES")
    return errors


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def self_test(docs, env_names):
    """Breaks one rule at a time and makes sure each is caught; a checker that passes
    everything would otherwise look exactly like a good manifest."""
    import copy

    def pod(d):
        return next(o for o in d if o["kind"] == "Deployment")["spec"]["template"]["spec"]

    def role(d):
        return next(o for o in d if o["kind"] == "Role")

    breakages = {
        "a Role granting secrets": lambda d: role(d)["rules"].append(
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        ),
        "a Role missing pods/log": lambda d: role(d).update(
            rules=[r for r in role(d)["rules"] if "pods/log" not in r["resources"]]
        ),
        "two replicas": lambda d: next(o for o in d if o["kind"] == "Deployment")["spec"].update(replicas=2),
        "a writable root filesystem": lambda d: pod(d)["containers"][0]["securityContext"].pop(
            "readOnlyRootFilesystem"
        ),
        "root": lambda d: pod(d)["securityContext"].update(runAsUser=0),
        "an unknown JOBGATE_ variable": lambda d: pod(d)["containers"][0]["env"].append(
            {"name": "JOBGATE_NO_SUCH_FLAG", "value": "1"}
        ),
        "a ClusterRole": lambda d: d.append({"kind": "ClusterRole", "metadata": {"name": "x"}}),
        "the managed-by=jobgate label": lambda d: next(o for o in d if o["kind"] == "Service")["metadata"][
            "labels"
        ].update({MANAGED_BY[0]: MANAGED_BY[1]}),
        "a Service selecting nothing": lambda d: next(o for o in d if o["kind"] == "Service")["spec"].update(
            selector={"app": "other"}
        ),
    }
    failures = []
    if check(docs, env_names):
        failures.append("the unbroken manifests already fail")
    for what, breaking in breakages.items():
        broken = copy.deepcopy(docs)
        breaking(broken)
        if not check(broken, env_names):
            failures.append(f"{what} was not caught")
    return failures


def main(argv):
    test = argv[:1] == ["--self-test"]
    paths = argv[1:] if test else argv
    if not paths:
        sys.exit(__doc__)
    env_names = config_env_names()
    status = 0
    for path in paths:
        docs = load(path)
        errors = self_test(docs, env_names) if test else check(docs, env_names)
        for e in errors:
            print(f"ERROR {path}: {e}", file=sys.stderr)
        status |= bool(errors)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
