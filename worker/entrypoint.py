"""The `evidence-worker` console script: `health`, which probes run every few seconds, without
importing the rest of the command line (worker/runtime/health.py); every other command through
worker.cli, whose import loads all of them and pydantic."""

from __future__ import annotations

import sys


def run() -> None:
    if sys.argv[1:2] == ["health"]:
        from worker.runtime.health import main

        sys.exit(main(sys.argv[2:]))
    from worker.cli import run as run_command_line

    run_command_line()


if __name__ == "__main__":
    run()
