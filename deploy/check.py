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

import sys
from pathlib import Path

import yaml

# The checks live in deploy/checks/ (found next to this script, whatever the working
# directory); importing them writes no __pycache__ there: this program changes nothing.
sys.dont_write_bytecode = True
from checks.manifest import check
from checks.self_test import self_test
from checks.settings import settings, settings_errors


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


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
