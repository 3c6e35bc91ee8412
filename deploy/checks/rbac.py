"""RBAC: Roles grant exactly what jobgate uses, to its own account, in exactly the namespaces
it may run jobs in, and Leases only in its own namespace with a shared database; the one
ClusterRole grants exactly the watch of CustomResourceDefinitions, with the workload kinds."""

from .objects import name
from .rules import (
    CRD_ROLE,
    CRDS_NEEDED,
    DATABASE_FILE_VAR,
    KUEUE_NEEDED,
    KUEUE_ROLE,
    LEASES_NEEDED,
    LEASE_ROLE,
    NEEDED,
    WORKLOAD_ROLE,
    workload_needed,
)


def grants(role, errors):
    """The (apiGroup, resource, verb) a Role or ClusterRole grants; a rule narrowed to names or
    granting non-resource URLs is reported in `errors`."""
    granted = set()
    for rule in role.get("rules") or []:
        if rule.get("resourceNames") or rule.get("nonResourceURLs"):
            errors.append(f"{name(role)}: unexpected resourceNames/nonResourceURLs")
        for g in rule.get("apiGroups") or []:
            for r in rule.get("resources") or []:
                for v in rule.get("verbs") or []:
                    granted.add((g, r, v))
    return granted


def binds_only(binding, account, home, errors):
    """Whether `binding` names jobgate's ServiceAccount and no other subject (each other one is
    reported in `errors`)."""
    ok = bool(binding.get("subjects"))
    for subject in binding.get("subjects") or []:
        if (subject.get("kind"), subject.get("name"), subject.get("namespace")) != ("ServiceAccount", account, home):
            errors.append(f"{name(binding)}: binds {subject}, not jobgate's ServiceAccount {home}/{account}")
            ok = False
    return ok


def check_cluster_rbac(by_kind, home, account):
    """No ClusterRole or ClusterRoleBinding but CRD_ROLE, granting exactly CRDS_NEEDED to
    jobgate's account, and that one exactly when the workload kinds' Role is there."""
    errors = []
    roles = set()
    for role in by_kind.get("ClusterRole", []):
        if role["metadata"].get("name") != CRD_ROLE:
            errors.append(
                f"{name(role)}: jobgate's only cluster-wide right is the ClusterRole {CRD_ROLE} "
                "(watching CustomResourceDefinitions)"
            )
            continue
        granted = grants(role, errors)
        if extra := sorted(granted - CRDS_NEEDED):
            errors.append(f"{name(role)}: grants more than jobgate needs: {extra}")
        if lacking := sorted(CRDS_NEEDED - granted):
            errors.append(f"{name(role)}: lacks what jobgate needs: {lacking}")
        roles.add(CRD_ROLE)
    bound = False
    for binding in by_kind.get("ClusterRoleBinding", []):
        ref = binding.get("roleRef") or {}
        if binding["metadata"].get("name") != CRD_ROLE or ref.get("kind") != "ClusterRole" or ref.get("name") not in roles:
            errors.append(f"{name(binding)}: jobgate's only ClusterRoleBinding binds the ClusterRole {CRD_ROLE} defined here")
        elif binds_only(binding, account, home, errors):
            bound = True
    workloads = any(r["metadata"].get("name") == WORKLOAD_ROLE for r in by_kind.get("Role", []))
    if (roles or by_kind.get("ClusterRoleBinding")) and not workloads:
        errors.append(
            f"the ClusterRole {CRD_ROLE} is there without the Role {WORKLOAD_ROLE}: jobgate could not use a "
            "workload kind it found through CustomResourceDefinitions"
        )
    if workloads and not bound:
        errors.append(
            f"the Role {WORKLOAD_ROLE} is there, so the ClusterRole {CRD_ROLE}, bound to {home}/{account}, must "
            "let jobgate list and watch CustomResourceDefinitions (to find a kind installed after it started)"
        )
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
        granted = grants(role, errors)
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
        binds_only(rb, account, home, errors)
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
                f"grant it the Role {KUEUE_ROLE} (get, list, watch on workloads.kueue.x-k8s.io; get on localqueues/pendingworkloads)"
            )
    for ns in sorted(allowed - granted_in):
        errors.append(f"namespace {ns} is allowed, but no RoleBinding lets jobgate work there")
    for ns in sorted(granted_in - allowed):
        errors.append(f"jobgate is granted rights in {ns}, which is not in JOBGATE_ALLOWED_NAMESPACES")
    return errors
