"""Fixtures of the report tests: the `report` command run in-process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Run


@pytest.fixture
def report_cli(cli: Callable[..., Run]) -> Callable[..., Run]:
    """Run `evidence-worker report ARGS` in-process and capture what it printed."""

    def run(*argv: str | Path) -> Run:
        return cli("report", *argv)

    return run
