"""The one place that decides whether a Python client test may skip, with the policy of the
Rust tests: a test that cannot run here (a tool missing) prints and records one line,
``JOBGATE-TEST-SKIPPED: <test>: <why>``, appended to the file named by ``JOBGATE_TEST_SKIPS``
(scripts/test lists it and fails a CI run that recorded any), and under ``CI=true`` or
``CI=1`` fails instead: CI runs every test."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(why: str) -> NoReturn:
    test = os.environ.get("PYTEST_CURRENT_TEST", "python client test").split(" ")[0]
    line = f"JOBGATE-TEST-SKIPPED: {test}: {why}"
    ci = os.environ.get("CI", "").strip()
    if ci in ("true", "1"):
        pytest.fail(f"{line} (CI={ci}: CI runs every test, so this is a failure)")
    record = os.environ.get("JOBGATE_TEST_SKIPS")
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    print(line)
    pytest.skip(line)
