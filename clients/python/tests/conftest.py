"""Fixtures: ``server``, one real jobgate shared by the tests that need nothing special of it,
and ``start_server``, a jobgate of a test's own with its own flags (restarted, killed, or
configured with tokens and limits)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from server import Server


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = Server(tmp_path_factory.mktemp("jobgate"))
    started.start()
    yield started
    started.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(*args: str) -> Server:
        one = Server(tmp_path / f"jobgate-{len(started)}", args)
        one.start()
        started.append(one)
        return one

    yield start
    for one in started:
        one.stop()
