"""jobgate's settings as src/config/ declares them (variables, configuration-file keys and
their types), and the settings a container ends up with from its variables and a mounted
jobgate.toml. It reads the source; it checks no manifest by itself."""

import re
import tomllib

from .rules import ANNOUNCED, CONFIG_VAR, REPO


def rust_type(text):
    """The TOML type of a clap field's Rust type."""
    text = text.strip()
    inner = re.fullmatch(r"Option<(.+)>", text)
    if inner:
        text = inner.group(1)
    if text == "bool":
        return bool
    if text.startswith("Vec<"):
        return list
    if re.fullmatch(r"[ui](8|16|32|64|128|size)", text):
        return int
    return str  # String, PathBuf, SocketAddr, and the value enums (written as their names)


def settings():
    """{variable: (key, TOML type)} of every setting jobgate reads: each `env = "JOBGATE_…"` of
    src/config/ with the field it belongs to, plus ANNOUNCED."""
    found = {}
    # Each file on its own: a declaration never spans two files.
    for path in sorted((REPO / "src" / "config").glob("*.rs")):
        text = path.read_text()
        for env, field, typ in re.findall(
            r'env\s*=\s*"(JOBGATE_[A-Z0-9_]+)".*?\bpub\s+(\w+)\s*:\s*([^,\n]+),', text, re.S
        ):
            found[env] = (field, rust_type(typ))
    for key, typ in ANNOUNCED.items():
        found.setdefault(f"JOBGATE_{key.upper()}", (key, typ))
    found.setdefault(CONFIG_VAR, ("config", str))
    return found


def settings_errors(known):
    """Announced settings that src/config/ declares with another type."""
    return [
        f"src/config/ declares {key} as a {known[f'JOBGATE_{key.upper()}'][1].__name__}, "
        f"deploy/checks/rules.py's ANNOUNCED as a {typ.__name__}: make them agree"
        for key, typ in ANNOUNCED.items()
        if known[f"JOBGATE_{key.upper()}"][1] is not typ
    ]


def file_source(path, container, volumes):
    """Where the file `path`, as the container sees it, comes from: {kind: secret|configMap, name,
    key, optional, read_only}, or None when no mounted Secret or ConfigMap provides it."""
    for mount in container.get("volumeMounts") or []:
        root = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(root) or mount.get("subPath"):
            continue
        rel = path[len(root):]
        vol = volumes.get(mount["name"]) or {}
        if "secret" in vol:
            sources = [{"secret": {**vol["secret"], "name": vol["secret"].get("secretName")}}]
        elif "configMap" in vol:
            sources = [{"configMap": vol["configMap"]}]
        else:
            sources = (vol.get("projected") or {}).get("sources") or []
        for source in sources:
            for kind in ("secret", "configMap"):
                ref = source.get(kind)
                if ref is None:
                    continue
                if ref.get("items") is None:
                    key = rel if "/" not in rel else None  # every key, as a file of its name
                else:
                    key = next((i["key"] for i in ref["items"] if i.get("path") == rel), None)
                if key is not None:
                    return {
                        "kind": kind,
                        "name": ref.get("name"),
                        "key": key,
                        "optional": ref.get("optional") is True,
                        "read_only": mount.get("readOnly") is True,
                    }
    return None


def toml_text(value):
    """A configuration file's value as the variable would spell it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def effective(env, container, volumes, by_kind, home, known, cw):
    """(problems, settings) of one container: its JOBGATE_* variables, completed with the keys of
    the configuration file JOBGATE_CONFIG names (read from its ConfigMap, rendered alongside),
    as {variable: value as text}. A key also set as a variable is a problem: the variable wins."""
    errors, merged = [], dict(env)
    path = env.get(CONFIG_VAR)
    if not path:
        return errors, merged
    source = file_source(path, container, volumes)
    if not source or source["kind"] != "configMap" or source["optional"]:
        return errors + [f"{cw}: {CONFIG_VAR} {path} must be a file of a mounted, required ConfigMap"], merged
    if not source["read_only"]:
        errors.append(f"{cw}: the configuration file's volume must be mounted readOnly")
    maps = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in by_kind.get("ConfigMap", [])}
    data = (maps.get((home, source["name"])) or {}).get("data") or {}
    if source["key"] not in data:
        return errors + [f"{cw}: {CONFIG_VAR}: no ConfigMap {home}/{source['name']} with key {source['key']} here"], merged
    try:
        config = tomllib.loads(data[source["key"]])
    except tomllib.TOMLDecodeError as e:
        return errors + [f"{cw}: {path} is not valid TOML: {e}"], merged
    var_of = {key: var for var, (key, _) in known.items()}
    for key, value in config.items():
        var = var_of.get(key)
        if var is None or var == CONFIG_VAR:
            errors.append(f"{cw}: {path}: {key} is not a setting jobgate reads")
            continue
        typ = known[var][1]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            errors.append(f"{cw}: {path}: {key} must be of TOML type {typ.__name__}, not {value!r}")
        if var in env:
            errors.append(f"{cw}: {key} is set in {path} and as {var}; the variable wins, the file's line is dead")
            continue
        merged[var] = toml_text(value)
    return errors, merged
