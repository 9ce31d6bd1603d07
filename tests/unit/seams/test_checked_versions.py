"""Each fast path names the library versions its contract test last passed with, and they are
the installed (locked) ones: an upgrade fails here until the contract tests have run with it
and CHECKED_AGAINST says so (docs/development.md, "Upgrading kombu, Celery or structlog")."""

from __future__ import annotations

from importlib.metadata import version
from types import ModuleType

import pytest

from worker.observability import structlog_lines
from worker.runtime import kombu_json, kombu_qos


@pytest.mark.parametrize(
    "module", [kombu_json, kombu_qos, structlog_lines], ids=lambda module: module.__name__
)
def test_the_fast_path_was_checked_against_the_installed_libraries(module: ModuleType) -> None:
    """CHECKED_AGAINST names each library the fast path stands in for at its installed version."""
    installed = {name: version(name) for name in module.CHECKED_AGAINST}

    assert installed == module.CHECKED_AGAINST
