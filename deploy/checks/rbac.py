"""RBAC: Roles grant exactly what jobgate uses, to its own account, in exactly the namespaces
it may run jobs in, and Leases only in its own namespace with a shared database."""

from .objects import name
from .rules import (
    DATABASE_FILE_VAR,
    KUEUE_NEEDED,
    KUEUE_ROLE,
    LEASES_NEEDED,
    LEASE_ROLE,
    NEEDED,
    WORKLOAD_ROLE,
    workload_needed,
)


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
