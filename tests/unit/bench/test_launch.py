"""The one worker command line: the Procfile's, which bench and the test harness extend."""

from __future__ import annotations

import sys

from tests.factories import procfile_worker
from worker.bench.launch import worker_command


def test_default_command_is_the_procfiles() -> None:
    """With no arguments, worker_command() is the Procfile's line, run by this interpreter."""
    assert worker_command() == [sys.executable, "-m", *procfile_worker()]


def test_callers_add_hostname_pool_concurrency_and_options() -> None:
    """A caller's choices come after the Procfile's arguments, which stay as they are."""
    command = worker_command(
        "q", hostname="w@h", pool="prefork", concurrency=3, heartbeat=False, options=["-Ofair"]
    )

    assert command[3:] == [
        "-A", "worker.app", "--quiet", "worker", "--queues", "q", "--loglevel", "INFO",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--hostname", "w@h",
        "--pool", "prefork", "--concurrency", "3", "-Ofair",
    ]  # fmt: skip


def test_solo_pool_takes_no_concurrency() -> None:
    """`--pool solo` runs tasks in the main process: a concurrency would be meaningless."""
    assert worker_command("q", pool="solo", concurrency=4)[-2:] == ["--pool", "solo"]
