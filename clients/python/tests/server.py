"""A real jobgate for the client's tests: the binary the Rust build made, started on a free
loopback port with a data directory of its own, stopped (or killed) and started again by the
tests. Nothing here imitates the server.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from skips import skip_or_fail

REPO = Path(__file__).resolve().parents[3]
_LISTENING = re.compile(r"listening on http://(127\.0\.0\.1:\d+)")


def binary() -> Path:
    """The jobgate binary: ``JOBGATE_BIN``, else the debug build of ``CARGO_TARGET_DIR`` (or
    the repository's ``target``). Missing: the test skips loudly, or fails in CI."""
    given = os.environ.get("JOBGATE_BIN")
    if given:
        path = Path(given)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
        path = (target if target.is_absolute() else REPO / target) / "debug" / "jobgate"
    if not path.is_file():
        skip_or_fail(f"no jobgate binary at {path} (run `cargo build` or set JOBGATE_BIN)")
    return path


class Server:
    """One jobgate process (and the ones that replace it after a restart) over one data
    directory. ``url`` is its base URL; a restart keeps the port, so clients reconnect."""

    def __init__(self, data_dir: Path, args: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.args = list(args)
        self.address: Optional[str] = None
        self.process: Optional[subprocess.Popen[str]] = None
        self.log: list[str] = []
        self._reader: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        assert self.address is not None, "the server has not started"
        return f"http://{self.address}"

    def start(self, timeout: float = 60.0) -> None:
        listen = self.address or "127.0.0.1:0"
        self.process = subprocess.Popen(
            [str(binary()), "--listen", listen, "--data-dir", str(self.data_dir), *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")},
        )
        found = threading.Event()
        process = self.process

        def read() -> None:
            assert process.stdout is not None
            with process.stdout:
                for line in process.stdout:
                    self.log.append(line.rstrip("\n"))
                    match = _LISTENING.search(line)
                    if match and not found.is_set():
                        self.address = match.group(1)
                        found.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self.log[-30:])
                self.stop()
                raise RuntimeError(f"jobgate did not start listening:\n{tail}")

    def stop(self, kill: bool = False) -> None:
        """Stops the process: SIGTERM and a wait for its clean exit, or SIGKILL."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Its output is read to the end (and the pipe closed) before it counts as stopped.
        if self._reader is not None:
            self._reader.join(timeout=30)
        self.process = None

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()
