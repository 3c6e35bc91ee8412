"""The package as users get it: the sdist and the wheel ``python -m build`` makes, the wheel
installed into a fresh virtual environment, and that installed copy driving a real jobgate.

Nothing is fetched from the network. ``--no-isolation`` builds with the hatchling of this
environment. The fresh venv is made ``--without-pip``, and this environment's pip installs the
wheel into it (``pip --python``) with ``--no-index --no-deps``. Its dependencies (httpx,
websockets, pydantic, tqdm and theirs) cannot be downloaded, so a ``.pth`` file in the venv's
site-packages appends the directories this environment imports them from. A ``.pth``
directory comes after the venv's own site-packages, so the venv imports the wheel's
``jobgate`` even where this environment has one of its own (an editable install would not be
seen either: a ``.pth`` directory's own ``.pth`` files are not read), and the test checks
where ``jobgate`` was imported from. ``--system-site-packages`` would not do: the "system" of a
venv made from this one is the base interpreter this environment was itself made from, which
need not have the dependencies, and may have a ``jobgate``. ``PYTHONPATH`` (this checkout's
``src`` while the tests run) is removed from the venv's environment.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Optional

from server import Server

PACKAGE = Path(__file__).resolve().parents[1]
DEPENDENCIES = ("httpx", "websockets", "pydantic", "tqdm")

#: What the venv runs: the installed jobgate submits a job and waits for it.
SCRIPT = """
import sys
from importlib import resources
import jobgate
print(jobgate.__file__)
print(resources.files("jobgate").joinpath("py.typed").is_file())
with jobgate.Client(sys.argv[1]) as client:
    job = client.submit(name="from-the-wheel", command=["sh", "-c", "echo installed"])
    done = client.wait(job.id, timeout=60)
    print(done.phase.value, [line.text for line in client.logs(job.id)])
"""


def run(*args: str, cwd: Optional[Path] = None, env: Optional[dict[str, str]] = None) -> str:
    """What the command printed on standard output; it must succeed."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def dependency_dirs() -> list[str]:
    dirs: list[str] = []
    for name in DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, f"{name} is not installed here"
        where = str(Path(spec.origin).parent.parent)
        if where not in dirs:
            dirs.append(where)
    return dirs


def test_the_wheel_installs_in_a_fresh_venv_and_drives_jobgate(server: Server, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(PACKAGE))
    (wheel,) = dist.glob("jobgate-*.whl")
    (sdist,) = dist.glob("jobgate-*.tar.gz")

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = Parser().parsestr(
            archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        )
    assert "jobgate/py.typed" in names
    assert "jobgate/_generated/__init__.py" in names and "jobgate/_generated/client.py" in names
    assert not [n for n in names if "test" in n.split("/")[0] or "/tests/" in n or "conftest" in n]
    assert not [n for n in names if not n.startswith(("jobgate/", "jobgate-"))], names
    assert metadata["Name"] == "jobgate"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert "# jobgate for Python" in (metadata.get_payload() or "")
    required = {r.split(">")[0].split("<")[0].split("=")[0].strip() for r in metadata.get_all("Requires-Dist") or []}
    assert required == set(DEPENDENCIES)

    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"README.md", "pyproject.toml", "src/jobgate/py.typed"} <= members
    assert not [m for m in members if m.startswith("tests/")]

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JOBGATE_SERVER", "JOBGATE_TOKEN")}
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    run(*pip, "install", "--no-index", "--no-deps", "--no-cache-dir", str(wheel), env=env)
    purelib = run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", env=env)
    site = Path(purelib.strip())
    (site / "jobgate-test-dependencies.pth").write_text("\n".join(dependency_dirs()) + "\n")

    used = run(str(python), "-c", SCRIPT, server.url, cwd=tmp_path, env=env).splitlines()
    assert Path(used[0]).resolve().is_relative_to(site.resolve()), used
    assert used[1:] == ["True", "SUCCEEDED ['installed']"]
