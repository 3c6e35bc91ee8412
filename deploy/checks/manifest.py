"""The check of one rendered kustomization: every rule in turn (hardening, selectors,
settings, storage and replicas, authentication, the disruption budget, egress, RBAC,
ServiceMonitors), every problem as a sentence."""

import re

from .auth import check_auth, shares_database
from .budget import check_disruption_budget
from .egress import check_database_egress
from .monitors import check_service_monitors
from .objects import env_of, is_dev, matches, name, value_from
from .rbac import check_cluster_rbac, check_rbac
from .rules import (
    DATABASE_FILE_VAR,
    DATABASE_VAR,
    FORBIDDEN_KINDS,
    LEASE_NAMESPACE_VAR,
    MANAGED_BY,
    REPLICA_ID_VAR,
)
from .settings import effective


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
    errors += check_cluster_rbac(by_kind, home, account)
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
