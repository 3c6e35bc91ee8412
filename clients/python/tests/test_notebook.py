"""examples/notebook.ipynb, run cell by cell in a real IPython kernel against a real jobgate.

The kernel is this interpreter (``sys.executable``), whatever kernels the machine has: the test
writes a kernelspec of its own, under a name no other has, into a directory of its own that
``JUPYTER_PATH`` puts first. The kernel imports the client from this checkout's ``src`` and
reads the server from ``JOBGATE_SERVER``, as a user's notebook would.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from server import REPO, Server

NOTEBOOK = REPO / "examples" / "notebook.ipynb"
SRC = Path(__file__).resolve().parents[1] / "src"
KERNEL = "jobgate-notebook-test"


def kernel_environment(tmp_path: Path, server: Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JOBGATE_TOKEN", "PYTHONPATH")}
    env["JOBGATE_SERVER"] = server.url
    env["PYTHONPATH"] = str(SRC)
    # No profile, startup file or history of the user's: the kernel starts as on a new machine.
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    return env


def markdown_table(text: str) -> list[dict[str, str]]:
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.strip().splitlines()]
    header, rule, *body = rows
    assert all(set(cell) <= set("-:") for cell in rule), text
    return [dict(zip(header, row)) for row in body]


def test_the_example_notebook_runs_and_tabulates_the_sweep(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs == [] and cell.execution_count is None for cell in code), (
        "examples/notebook.ipynb is committed with outputs: clear them"
    )

    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "jobgate's tests",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))

    work = tmp_path / "work"
    work.mkdir()
    runner = NotebookClient(
        notebook,
        kernel_name=KERNEL,
        timeout=300,
        resources={"metadata": {"path": str(work)}},
    )
    # A cell that raises fails the run here (CellExecutionError, with the cell and traceback).
    runner.execute(env=kernel_environment(tmp_path, server))

    streams: list[dict[str, Any]] = [o for cell in code for o in cell.outputs if o.output_type == "stream"]
    assert not [o["text"] for o in streams if o["name"] == "stderr"], "the notebook wrote to stderr"

    (submitted,) = next(c for c in code if c.id == "submit").outputs
    names = [name for name, _ in ast.literal_eval(submitted.data["text/plain"])]
    sweep = names[0].rsplit("-", 1)[0]
    assert names == [f"{sweep}-{x}" for x in range(1, 7)]

    followed = "".join(o["text"] for o in next(c for c in code if c.id == "follow").outputs)
    for name in names:
        assert f"{name}: PENDING -> RUNNING (Started)" in followed, followed
        assert f"{name}: RUNNING -> SUCCEEDED (CompletionsReached)" in followed, followed

    (results,) = [c for c in code if "results" in c.metadata.get("tags", [])]
    (table,) = [o for o in results.outputs if "text/markdown" in o.get("data", {})]
    assert markdown_table(table.data["text/markdown"]) == [
        {"x": str(x), "y": str(x * x + 1), "phase": "SUCCEEDED", "last line": f"result {x * x + 1}"}
        for x in range(1, 7)
    ]
