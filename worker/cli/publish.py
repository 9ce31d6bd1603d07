"""`evidence-worker publish PATH`: validate AttributionResults and send them to the broker."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import (
    PROG,
    add_broker_option,
    add_path,
    add_worker_store_option,
    describe,
    positive_int,
    rate,
    with_broker,
)
from worker.cli.exit_codes import INVALID, OK
from worker.cli.inputs import JsonLines, source_name
from worker.cli.output import located
from worker.cli.progress import over_input
from worker.cli.store_access import opened_store
from worker.errors import ConfigurationError, InputError, TransientError
from worker.human_counts import counted
from worker.settings import REDIS_URL_HINT, Settings, masked_url

if TYPE_CHECKING:
    from worker.upstream.publishing import Published

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
            "publisher picks the same cases, and the summary counts the ones left out. "
            "When the broker or the store fails, publish names the first line not sent (every "
            "line before it was sent, rejected or sampled out; no line from it on was sent, "
            "and nothing will send them: their ledger notes stay unconfirmed) and "
            "--from-line N resumes there.",
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
    parser.add_argument(
        "--from-line",
        type=positive_int,
        metavar="N",
        help="skip the lines before line N (counted in the summary), to resume at the first "
        "line a failed publish says was not sent (default: from line 1)",
    )
    parser.set_defaults(handler=run)


@dataclass
class FromLine:
    """The input's lines from line `first` on (every line when None); counts those skipped."""

    lines: Iterable[tuple[int, bytes]]
    first: int | None
    skipped: int = 0
    last: int = 0  # the last line number read

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        for number, body in self.lines:
            self.last = number
            if self.first is not None and number < self.first:
                self.skipped += 1
                continue
            yield number, body


def run(args: argparse.Namespace, settings: Settings) -> int:
    from kombu.exceptions import OperationalError

    from worker.runtime.celery_app import create_app
    from worker.upstream.publishing import Published, publish_lines

    settings = with_broker(args, settings)
    source = JsonLines(args.path)
    lines = FromLine(source, args.from_line)
    progress = over_input("publish", source)
    app = create_app(settings)
    url = None
    bound_broker_waits(app.conf)
    result = Published()
    try:
        with ExitStack() as stack:
            ledger = None
            if settings.ledger_ttl_seconds > 0:
                url = args.store or settings.result_store_url
                ledger = stack.enter_context(opened_store(url, settings))
            publish_lines(
                lines,
                into=result,
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
            _say_unsent(args, settings, result, "the broker failed")
            raise  # the broker is down or refuses us: main() says so in one line
        raise ConfigurationError(
            f"EVIDENCE_BROKER_URL: {masked_url(settings.broker_url)}: the Redis server has no "
            f"such database: {REDIS_URL_HINT}"
        ) from None
    except TransientError:
        _say_unsent(args, settings, result, "the store failed")
        raise  # main() says what the store answered, in one line
    finally:
        app.close()  # its broker connection pool
        progress.finish()
    if args.from_line is not None and args.from_line > lines.last:
        raise InputError(
            f"--from-line {args.from_line}: {source_name(args.path)} has no line "
            f"{args.from_line} (its last line is {lines.last})"
        )
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
    skipped = (
        ""
        if args.from_line is None
        else f"; {counted(lines.skipped, 'line')} skipped (--from-line {args.from_line})"
    )
    summary = (
        f"publish: sent {counted(result.messages, 'message')} in {counted(result.tasks, 'task')} "
        f"to queue {settings.queue}; {counted(len(result.rejected), 'line')} rejected"
        f"{sampling}{skipped}"
    )
    print(located(summary, store=url, broker=settings.broker_url), file=sys.stderr)
    return INVALID if result.rejected else OK


def _say_unsent(args: argparse.Namespace, settings: Settings, result: Published, what: str) -> None:
    """Before main() says why: what was sent, and the first line not sent (where to resume).
    Nothing when nothing was sent: main()'s one line says it all (run it again)."""
    if not result.messages:
        return
    for number, reason in result.rejected:
        print(f"{PROG} publish: line {number} not sent: {reason}", file=sys.stderr)
    sent = f"sent {counted(result.messages, 'message')} to queue {settings.queue}"
    if result.first_unsent is None:
        print(f"publish: {what} after every line was sent; {sent}", file=sys.stderr)
        return
    print(
        f"publish: {what}: line {result.first_unsent} and every line after it were not sent, "
        f"and nothing will send them; {sent} before it; resume with `{PROG} publish "
        f"{args.path} --from-line {result.first_unsent}`",
        file=sys.stderr,
    )


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
