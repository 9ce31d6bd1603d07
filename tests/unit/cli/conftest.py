"""Fixtures of the command-line tests: a store of their own, `score` on it, one message."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """An empty SQLite store of the test's own."""
    return f"sqlite:///{tmp_path}/s.sqlite3"


@pytest.fixture
def score(cli: Callable[..., Run], store_url: str) -> Callable[..., Run]:
    """Run `score PATH --store <tmp sqlite> ARGS`."""

    def run(path: str | Path, *argv: str | Path) -> Run:
        return cli("score", path, "--store", store_url, *argv)

    return run


@pytest.fixture
def one_message_file(
    write_jsonl: Callable[..., Path], message_dict: Callable[..., dict[str, Any]]
) -> Path:
    """A file holding one valid AttributionResult."""
    return write_jsonl([message_dict()], name="one.jsonl")
