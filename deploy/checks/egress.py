"""NetworkPolicy egress to the database: a pod on PostgreSQL may reach it over TCP."""

from .objects import matches, name
from .rules import DATABASE_FILE_VAR, POSTGRES_PORT


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
