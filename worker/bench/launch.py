"""The worker's command line, as the Procfile runs it, for everything that starts a worker."""

from __future__ import annotations

import sys
from collections.abc import Sequence

PROCFILE_QUEUE = "attribution-results"


def worker_command(
    queue: str = PROCFILE_QUEUE,
    *,
    hostname: str | None = None,
    pool: str | None = None,
    concurrency: int | None = None,
    loglevel: str = "INFO",
    heartbeat: bool = True,
    options: Sequence[str] = (),
) -> list[str]:
    """`celery -A worker.app --quiet worker ...` as argv, run by this interpreter.

    With no arguments it is the Procfile's line; callers add a hostname (for remote control),
    a pool, a concurrency or extra options.
    """
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker.app",
        "--quiet",
        "worker",
        "--queues",
        queue,
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
    ]
    if not heartbeat:
        command.append("--without-heartbeat")
    if hostname is not None:
        command += ["--hostname", hostname]
    if pool is not None:
        command += ["--pool", pool]
    if concurrency is not None and pool != "solo":
        command += ["--concurrency", str(concurrency)]
    return [*command, *options]
