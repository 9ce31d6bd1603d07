"""`evidence-worker health`: whether this container's worker is consuming, from the age of the
heartbeat file its consumer touches. The console script runs it without importing this module
(worker/entrypoint.py); here it is listed and documented with every other command."""

from __future__ import annotations

import argparse
from typing import Any

from worker.cli.arguments import describe
from worker.runtime import health
from worker.settings import Settings


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "health", **describe(health.SUMMARY, example=health.EXAMPLE, details=health.DETAILS)
    )
    health.add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return health.report(args.file or settings.heartbeat_file, args.max_age)
