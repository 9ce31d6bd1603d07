"""A test that needs a server carries the `integration` mark, or it fails saying what to add:
`make check` runs the unmarked tests with no server up (tests/conftest.py, tests/servers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.factories import without_progress
from tests.servers import MARK_HINT, ServerUse

NODE = "tests/unit/x/test_y.py::test_z"


def test_a_connection_to_redis_is_refused_and_named() -> None:
    """Connecting to Redis's port is refused, and the complaint names the address and the fix."""
    use = ServerUse(NODE)
    with pytest.raises(ConnectionRefusedError, match="is not marked integration"):
        use.check_address(("127.0.0.1", 6379))
    assert use.complaint() == (
        f"{NODE} needs a server (connects to 127.0.0.1:6379) but is not marked integration: "
        f"{MARK_HINT}"
    )


def test_a_connection_to_rabbitmq_is_refused() -> None:
    """RabbitMQ's port counts as a server too."""
    use = ServerUse(NODE)
    with pytest.raises(ConnectionRefusedError):
        use.check_address(("localhost", 5672))
    assert use.used == ["connects to localhost:5672"]


def test_starting_a_server_program_is_refused() -> None:
    """Starting redis-server or a Celery worker is refused, whatever its path."""
    use = ServerUse(NODE)
    for argv in (["/usr/bin/redis-server", "--port", "0"], ["celery", "-A", "x", "worker"]):
        with pytest.raises(PermissionError):
            use.check_program(argv)
    assert use.used == ["runs redis-server", "runs celery"]


def test_other_addresses_and_programs_pass() -> None:
    """A local HTTP server of the test's own, a Unix socket or promtool is no server."""
    use = ServerUse(NODE)
    use.check_address(("127.0.0.1", 8080))
    use.check_address("/tmp/some.sock")
    use.check_program(["promtool", "check", "rules"])
    use.check_program("ls")
    assert use.complaint() is None


def test_the_hint_says_what_to_add() -> None:
    """The failure message gives the exact line to add."""
    assert "`pytestmark = pytest.mark.integration`" in MARK_HINT


UNMARKED = """
import socket

import pytest


def test_reads_redis():
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1)
    except OSError:
        pass  # as code under test that handles an unreachable store would


@pytest.mark.integration
def test_marked():
    pass
"""


def test_an_unmarked_test_that_connects_to_redis_fails_saying_what_to_add(tmp_path: Path) -> None:
    """Run by pytest with this suite's fixture, an unmarked test that reaches for Redis errors at
    teardown with the line to add, even when its code swallowed the refusal."""
    (tmp_path / "conftest.py").write_text("from tests.servers import servers_need_the_mark\n")
    (tmp_path / "test_uses_redis.py").write_text(UNMARKED)
    # Only pytest's own plugins and this fixture: the installed ones (xdist, cov, Hypothesis,
    # timeout) are not what is checked, and importing them was most of the run.
    quiet = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rE", "-W",
         "ignore::pytest.PytestUnknownMarkWarning", "test_uses_redis.py"],
        cwd=tmp_path, env=quiet,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "2 passed, 1 error" in ran.stdout
    assert (
        "test_uses_redis.py::test_reads_redis needs a server (connects to 127.0.0.1:6379) but is "
        f"not marked integration: {MARK_HINT}"
    ) in " ".join(ran.stdout.split())


def test_progress_lines_are_told_from_the_rest() -> None:
    """Only the progress printer's exact line shapes are dropped from a stderr."""
    stderr = (
        "publish: 9 lines (2/s), 100%, ETA 0:00\n"
        "score: 1,200 lines (598/s)\n"
        "publish: sent 9 messages in 9 tasks to queue q; 1 line rejected\n"
        "score: 1 line (1/s) and more\n"
    )
    assert without_progress(stderr) == [
        "publish: sent 9 messages in 9 tasks to queue q; 1 line rejected",
        "score: 1 line (1/s) and more",
    ]
