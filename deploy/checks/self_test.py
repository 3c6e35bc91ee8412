"""The self-test: breaks one rule at a time in a rendering and makes sure the check catches
each, so that a checker passing everything cannot look like a good manifest."""

import re

from .auth import shares_database
from .manifest import check
from .objects import env_of
from .rules import (
    CONFIG_VAR,
    CRD_ROLE,
    CRDS_NEEDED,
    DATABASE_FILE_VAR,
    DATABASE_VAR,
    DEV_MARKER,
    LEASES_NEEDED,
    LEASE_NAMESPACE_VAR,
    LEASE_ROLE,
    MANAGED_BY,
    POSTGRES_PORT,
    REPLICA_ID_VAR,
)
from .settings import file_source


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

    def crd_objects(d):
        return [o for o in d if o["kind"] in ("ClusterRole", "ClusterRoleBinding") and o["metadata"]["name"] == CRD_ROLE]

    def crd_role(d):
        return next(o for o in crd_objects(d) if o["kind"] == "ClusterRole")

    def grant_crds(d):  # the CRD ClusterRole and its binding, as deploy/overlays/workload-kinds has them
        verbs = sorted(v for _, _, v in CRDS_NEEDED)
        rules = [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": verbs}]
        subjects = [{"kind": "ServiceAccount", "name": pod(d)["serviceAccountName"], "namespace": home}]
        ref = {"kind": "ClusterRole", "name": CRD_ROLE}
        d.append({"kind": "ClusterRole", "metadata": {"name": CRD_ROLE}, "rules": rules})
        d.append({"kind": "ClusterRoleBinding", "metadata": {"name": CRD_ROLE}, "roleRef": ref, "subjects": subjects})

    if crd_objects(docs):
        breakages |= {
            "no CustomResourceDefinitions ClusterRole with the workload kinds": lambda d: [
                d.remove(o) for o in crd_objects(d)
            ],
            "a CustomResourceDefinitions ClusterRole granting get": lambda d: crd_role(d)["rules"][0]["verbs"].append(
                "get"
            ),
            "a CustomResourceDefinitions ClusterRole granting Secrets": lambda d: crd_role(d)["rules"].append(
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}
            ),
            "a CustomResourceDefinitions ClusterRoleBinding to another subject": lambda d: next(
                o for o in crd_objects(d) if o["kind"] == "ClusterRoleBinding"
            )["subjects"].append({"kind": "Group", "name": "system:authenticated"}),
        }
    else:
        breakages["a CustomResourceDefinitions ClusterRole without the workload kinds"] = grant_crds

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
