"""`evidence-worker publish PATH`: validate AttributionResults and send them to the broker."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from typing import Any

from worker.cli.common import (
    PROG,
    add_broker_option,
    add_path,
    add_worker_store_option,
    describe,
    opened_store,
    positive_int,
    rate,
    source_name,
    with_broker,
)
from worker.cli.exit_codes import INVALID, OK
from worker.cli.inputs import JsonLines
from worker.cli.output import located
from worker.cli.progress import over_input
from worker.errors import ConfigurationError, InputError
from worker.settings import REDIS_URL_HINT, Settings, masked_url
from worker.wording import counted

# The worker waits for its broker for ever; a command gives up within seconds, in one line.
BROKER_TIMEOUT_SECONDS = 5.0
PUBLISH_RETRIES = 2


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "publish",
        **describe(
            "validate AttributionResults and send them to the broker",
            example="publish contracts/examples/attribution-results.jsonl --batch 100",
            details="Validate each JSON line, then send it to the queue as an "
            "evidence_coverage.score task (or score_batch with --batch N). Invalid lines are "
            "reported on stderr and not sent (exit 2). Broker: $EVIDENCE_BROKER_URL "
            "(default redis://localhost:6379/0); queue: $EVIDENCE_QUEUE "
            "(default attribution-results). Each message is first noted in the publish ledger "
            "of the workers' store, which the worker's record closes, so that `reconcile` finds "
            "any message a broker loses (EVIDENCE_LEDGER_TTL_SECONDS=0 turns it off). "
            "--sample-rate R sends only the messages whose case ID is in the deterministic "
            "sample at R (the first 8 bytes of its SHA-256, over 2^64, below R): every "
            "publisher picks the same cases, and the summary counts the ones left out.",
        ),
    )
    add_path(parser)
    add_worker_store_option(parser, "where messages are noted in the publish ledger")
    add_broker_option(parser, "where the messages are sent")
    parser.add_argument(
        "--batch",
        type=positive_int,
        default=1,
        metavar="N",
        help="send lists of N messages to evidence_coverage.score_batch (default 1: one task each)",
    )
    parser.add_argument(
        "--sample-rate",
        type=rate,
        metavar="R",
        help="send only the messages whose case ID is in the deterministic sample at rate R, "
        "0.0..1.0 (default: all of them); the 0.1 sample lies inside the 0.25 one, and the "
        "rest leave no ledger entry",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from kombu.exceptions import OperationalError

    from worker.runtime.celery_app import create_app
    from worker.upstream.publishing import publish_lines

    settings = with_broker(args, settings)
    source = JsonLines(args.path)
    progress = over_input("publish", source)
    app = create_app(settings)
    url = None
    bound_broker_waits(app.conf)
    try:
        with ExitStack() as stack:
            ledger = None
            if settings.ledger_ttl_seconds > 0:
                url = args.store or settings.result_store_url
                ledger = stack.enter_context(opened_store(url, settings))
            result = publish_lines(
                source,
                app=app,
                queue=settings.queue,
                batch_size=args.batch,
                max_message_bytes=settings.max_message_bytes,
                max_batch_bytes=settings.max_batch_bytes,
                ledger=ledger,
                sample_rate=args.sample_rate,
                on_progress=lambda sent: progress.tick(sent - progress.count),
            )
    except OperationalError as error:
        if "DB index is out of range" not in str(error):
            if progress.count:  # what did go, before main() says why the rest did not
                print(
                    f"publish: sent {counted(progress.count, 'message')} to queue "
                    f"{settings.queue} before the broker failed; the rest were not sent, and "
                    "the ledger keeps no entry for them",
                    file=sys.stderr,
                )
            raise  # the broker is down or refuses us: main() says so in one line
        raise ConfigurationError(
            f"EVIDENCE_BROKER_URL: {masked_url(settings.broker_url)}: the Redis server has no "
            f"such database: {REDIS_URL_HINT}"
        ) from None
    finally:
        app.close()  # its broker connection pool
        progress.finish()
    for number, reason in result.rejected:
        print(f"{PROG} publish: line {number} not sent: {reason}", file=sys.stderr)
    if result.messages == 0 and result.sampled_out == 0 and not result.rejected:
        raise InputError(f"{source_name(args.path)} contains no messages")
    sampling = (
        ""
        if args.sample_rate is None
        else f"; {counted(result.sampled_out, 'message')} sampled out (--sample-rate "
        f"{args.sample_rate})"
    )
    summary = (
        f"publish: sent {counted(result.messages, 'message')} in {counted(result.tasks, 'task')} "
        f"to queue {settings.queue}; {counted(len(result.rejected), 'line')} rejected{sampling}"
    )
    print(located(summary, store=url, broker=settings.broker_url), file=sys.stderr)
    return INVALID if result.rejected else OK


def bound_broker_waits(conf: Any) -> None:
    """Connect, read and retry timeouts for a one-shot publisher (the app's are a worker's:
    retry for ever). A Redis server that accepts but never answers would otherwise hang."""
    conf.broker_connection_timeout = BROKER_TIMEOUT_SECONDS
    conf.broker_connection_max_retries = PUBLISH_RETRIES
    conf.broker_transport_options = {
        **conf.broker_transport_options,
        "socket_timeout": BROKER_TIMEOUT_SECONDS,
        "socket_connect_timeout": BROKER_TIMEOUT_SECONDS,
    }
    conf.task_publish_retry_policy = {
        "max_retries": PUBLISH_RETRIES,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.2,
    }
