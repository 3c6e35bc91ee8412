"""ServiceMonitors (a kind kubernetes-validate has no schema for): well formed, field by
field, and scraping jobgate's /metrics."""

import re

from .objects import matches, name


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
