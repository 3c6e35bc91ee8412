"""The PodDisruptionBudget: it lets a pod be evicted, but never all of several replicas."""

from .objects import matches, name


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
