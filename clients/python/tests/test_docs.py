"""docs/PYTHON.md's examples, run against a real jobgate so that the page cannot drift from
the client.

Every ```python block preceded by ``<!-- tested -->`` runs, in the page's order, in one Python
process (the examples go on from one another, as in a reader's session), and prints what the
block preceded by ``<!-- prints -->`` right after it says, line for line (``...`` in an
expected line stands for any text). Every other ```python block must at least compile.

The examples run against a jobgate of their own: they list and count jobs, which other tests'
jobs on the shared server would change.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from server import REPO, Server

DOC = REPO / "docs" / "PYTHON.md"
SRC = Path(__file__).resolve().parents[1] / "src"

TESTED = "<!-- tested -->"
PRINTS = "<!-- prints -->"
#: What the runner prints after each block's own output, to tell them apart.
END = "--- end of a docs/PYTHON.md block ---"

#: Runs the blocks of the JSON file it is given, in order, in one namespace; a block's
#: traceback names its lines in docs/PYTHON.md.
RUNNER = f"""
import json, sys
namespace = {{"__name__": "__main__"}}
for block in json.load(open(sys.argv[1])):
    code = compile("\\n" * (block["line"] - 1) + block["code"], "docs/PYTHON.md", "exec")
    exec(code, namespace)
    print({END!r}, flush=True)
"""


@dataclass
class Block:
    """One fenced block: its info string, its first line's number in the page, its text and
    the HTML comment on the last non-blank line before it, if any."""

    info: str
    line: int
    code: str
    marker: Optional[str]


def fenced_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    previous: Optional[str] = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            info = line[3:].strip()
            end = i + 1
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            assert end < len(lines), f"docs/PYTHON.md:{i + 1}: a fenced block that never ends"
            marker = previous if previous is not None and previous.startswith("<!--") else None
            blocks.append(Block(info, i + 2, "\n".join(lines[i + 1 : end]) + "\n", marker))
            previous = None
            i = end + 1
            continue
        if line.strip():
            previous = line.strip()
        i += 1
    return blocks


@dataclass
class Example:
    block: Block
    expected: list[str]


def examples_in(blocks: list[Block]) -> list[Example]:
    examples: list[Example] = []
    for i, block in enumerate(blocks):
        if block.marker == PRINTS:
            assert examples and blocks[i - 1].marker == TESTED, (
                f"docs/PYTHON.md:{block.line}: {PRINTS} must follow a {TESTED} block"
            )
            examples[-1].expected = block.code.splitlines()
        elif block.marker == TESTED:
            assert block.info == "python", f"docs/PYTHON.md:{block.line}: {TESTED} marks a python block"
            examples.append(Example(block, []))
        else:
            assert block.marker is None, f"docs/PYTHON.md:{block.line}: unknown marker {block.marker}"
    return examples


def matches(expected: str) -> Callable[[str], bool]:
    pattern = re.compile(".*".join(re.escape(part) for part in expected.split("...")))
    return lambda actual: pattern.fullmatch(actual) is not None


def test_every_python_block_of_the_page_compiles() -> None:
    blocks = [b for b in fenced_blocks(DOC.read_text()) if b.info == "python"]
    assert len(blocks) >= 10
    for block in blocks:
        compile("\n" * (block.line - 1) + block.code, str(DOC), "exec")


def test_the_pages_examples_print_what_the_page_says(start_server: Callable[..., Server], tmp_path: Path) -> None:
    examples = examples_in(fenced_blocks(DOC.read_text()))
    # The markers are found: the quick start comes first, and every section's example runs.
    assert "client = jobgate.Client()" in examples[0].block.code
    assert len(examples) >= 12
    server = start_server()
    plan = tmp_path / "blocks.json"
    plan.write_text(json.dumps([{"line": e.block.line, "code": e.block.code} for e in examples]))
    env = {k: v for k, v in os.environ.items() if k not in ("JOBGATE_TOKEN", "PYTHONPATH")}
    env["JOBGATE_SERVER"] = server.url
    env["PYTHONPATH"] = str(SRC)
    # The examples write files of their own (a cursor): they run in a directory of the test's.
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run(
        [sys.executable, "-c", RUNNER, str(plan)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = ran.stdout.split(END + "\n")
    assert ran.returncode == 0, f"an example failed:\n{ran.stderr}\nit printed:\n{ran.stdout}"
    assert len(outputs) == len(examples) + 1 and outputs[-1] == "", ran.stdout
    for example, output in zip(examples, outputs):
        printed = output.splitlines()
        where = f"docs/PYTHON.md:{example.block.line}"
        assert len(printed) == len(example.expected) and all(
            matches(want)(got) for want, got in zip(example.expected, printed)
        ), f"{where} printed\n{output}\nwhere the page says\n" + "\n".join(example.expected)
