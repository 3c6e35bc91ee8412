"""The committed generated code is what ariadne-codegen makes of today's schema.graphql and
operations.graphql: a schema change the client has not been regenerated for fails here
(scripts/generate-python-client regenerates it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[1]
REPO = CLIENT.parents[1]
GENERATED = Path("src") / "jobgate" / "_generated"


def files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def test_the_generated_code_is_up_to_date_with_the_schema_and_the_operations(tmp_path: Path) -> None:
    # The generator runs on a copy laid out as the repository is (pyproject.toml's paths are
    # relative), so the committed files are only read.
    shutil.copy(REPO / "schema.graphql", tmp_path / "schema.graphql")
    copy = tmp_path / "clients" / "python"
    copy.mkdir(parents=True)
    for name in ("pyproject.toml", "operations.graphql"):
        shutil.copy(CLIENT / name, copy / name)
    shutil.copytree(CLIENT / "codegen", copy / "codegen")
    (copy / GENERATED).parent.mkdir(parents=True)
    run = subprocess.run(
        [sys.executable, "-m", "ariadne_codegen"], cwd=copy, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    fresh = files(copy / GENERATED)
    committed = files(CLIENT / GENERATED)
    stale = sorted(n for n in fresh.keys() | committed.keys() if fresh.get(n) != committed.get(n))
    assert not stale, (
        f"src/jobgate/_generated differs from what schema.graphql and operations.graphql make "
        f"({', '.join(stale)}): run scripts/generate-python-client"
    )
    assert "jobEvents" in committed["client.py"]
