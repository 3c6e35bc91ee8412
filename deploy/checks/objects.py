"""Small readers of rendered Kubernetes objects: a name to report, selector matching, a
container's variables, the dev marker. They judge nothing."""

from .rules import DEV_MARKER


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
