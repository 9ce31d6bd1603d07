"""Under pytest-xdist each worker process has a Redis of its own (tests/servers.py)."""

from __future__ import annotations

import os

import pytest

from tests.integration import worker_harness
from tests.servers import MACHINE_REDIS_PORT, REDIS_PORT_VARIABLE

pytestmark = pytest.mark.integration


def test_the_harness_uses_this_processes_redis() -> None:
    """An xdist worker's tests use the redis-server it started, never the machine's 6379; a
    plain run uses the machine's (the conftest that imports the harness must not run first)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert int(os.environ[REDIS_PORT_VARIABLE]) == worker_harness.REDIS_PORT
        assert worker_harness.REDIS_PORT != MACHINE_REDIS_PORT
    else:
        assert worker_harness.REDIS_PORT == MACHINE_REDIS_PORT
