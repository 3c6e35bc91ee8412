"""Authentication: jobgate starts and checks callers (credentials it can read, or anonymous
access said explicitly, in the dev overlay only), and whether it keeps its jobs in a shared
PostgreSQL database."""

import re

from .rules import CREDENTIALS, CREDENTIAL_FILES, DATABASE_FILE_VAR, DATABASE_VAR, DEV_MARKER
from .settings import file_source


def shares_database(settings):
    """Whether jobgate keeps its jobs in a PostgreSQL database (which replicas may share)."""
    return bool(settings.get(DATABASE_FILE_VAR) or settings.get(DATABASE_VAR))


def check_auth(settings, container, volumes, known, cw, dev):
    """jobgate starts and checks callers: credentials it can read (files from a mounted Secret,
    required outside the dev overlay), or anonymous access said explicitly, in dev only."""
    errors = []
    var_of = {key: var for var, (key, _) in known.items()}
    anonymous = settings.get(var_of["anonymous"])
    if anonymous not in (None, "true", "false"):
        errors.append(f"{cw}: {var_of['anonymous']} must be true or false, not {anonymous!r}")
    credentials = sorted(k for k in CREDENTIALS if settings.get(var_of[k]) not in (None, ""))
    host = (settings.get("JOBGATE_LISTEN") or "").rpartition(":")[0].strip("[]")
    loopback = host.startswith("127.") or host in ("::1", "localhost")
    if not loopback and not credentials and anonymous != "true":
        errors.append(
            f"{cw}: no credentials (API tokens, JWT keys) and anonymous access not allowed: jobgate "
            "refuses to start on a non-loopback address like this"
        )
    if anonymous == "false" and not credentials:
        errors.append(f"{cw}: anonymous access off and no credentials: nobody could call; jobgate refuses to start")
    if anonymous == "true" and not dev:
        errors.append(
            f"{cw}: anonymous callers are allowed outside the dev overlay (a Deployment without "
            f"the annotation {DEV_MARKER[0]}: {DEV_MARKER[1]})"
        )
    for origin in (settings.get(var_of["allowed_origins"]) or "").split(","):
        if origin and origin != "*" and not re.fullmatch(r"https?://[^/]+", origin):
            errors.append(f"{cw}: allowed_origins: {origin!r} is not an origin like https://example.com (no path)")
    frame, message = (settings.get(var_of[k]) for k in ("ws_max_frame_bytes", "ws_max_message_bytes"))
    if frame and message and frame.isdigit() and message.isdigit() and int(frame) > int(message):
        errors.append(f"{cw}: ws_max_frame_bytes {frame} exceeds ws_max_message_bytes {message}")
    for key, from_secret in CREDENTIAL_FILES.items():
        path = settings.get(var_of[key])
        if not path:
            continue
        source = file_source(path, container, volumes)
        if source is None:
            errors.append(f"{cw}: {key} {path} is not a file of a mounted Secret")
            continue
        if from_secret and source["kind"] != "secret":
            errors.append(f"{cw}: {key} {path} must come from a Secret, not a {source['kind']}")
        if from_secret and source["optional"] and not dev:
            errors.append(f"{cw}: {key} comes from an optional source: outside dev the pod must not start without it")
        if not source["read_only"]:
            errors.append(f"{cw}: the volume of {key} must be mounted readOnly")
    return errors
