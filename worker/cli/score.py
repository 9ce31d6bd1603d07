"""`evidence-worker score PATH`: the worker's whole pipeline in one process, on a file."""

from __future__ import annotations

import argparse
import signal
import sys
import uuid
from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import add_path, add_store_option, describe
from worker.cli.exit_codes import INTERRUPTED
from worker.cli.inputs import JsonLines, source_name
from worker.cli.output import (
    JSONL,
    SCORE_COLUMNS,
    TABLE,
    Discard,
    Table,
    add_format_options,
    chosen_format,
)
from worker.cli.policy_options import add_policy_options, resolve_policy
from worker.cli.progress import Progress, over_input, process_elapsed
from worker.cli.run_summary import Tally
from worker.cli.store_access import store_errors, store_url
from worker.errors import InputError
from worker.human_counts import counted
from worker.pipeline.scoring import Delivery
from worker.runtime import gc_tuning
from worker.settings import Settings, masked_url
from worker.stores import describe as describe_store

if TYPE_CHECKING:
    from worker.pipeline.service import Service

CHUNK = 500  # lines recorded per store call: one transaction (SQLite) or round trip (Redis)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "score",
        **describe(
            "score a JSON-lines file of AttributionResults in one process",
            example="score contracts/examples/attribution-results.jsonl --policy policy.toml",
            details="Score AttributionResult JSON lines with an embedded store: one JSON "
            "record per line on stdout, a summary on stderr naming the store. Re-running a "
            "file gives cache hits; a different outcome for the same inputs raises a "
            "nondeterminism alert (exit 3), once per distinct conflict; another required "
            "claim set for a contract version and case ID already seen is contract drift "
            "(exit 2 at least, one contract_drift alert per distinct set).",
        ),
    )
    add_path(parser)
    add_store_option(parser)
    add_policy_options(parser)
    add_format_options(parser, what=": the record lines as the worker logs them")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.pipeline.service import Service

    policy = resolve_policy(args, settings, required=False)
    url = store_url(args, settings)
    source = JsonLines(args.path)
    progress = over_input("score", source)
    tally = Tally()
    table = records_to_screen(chosen_format(args), settings)
    with store_errors(url):
        service = Service.open(settings, store_url=url, policy=policy)
        store_name = describe_store(service.store, url)
        # The start-up heap frozen, as the worker's pool freezes it, and young collections
        # rare (worker/runtime/gc_tuning.py). Undone after, for a caller in-process.
        thresholds = gc_tuning.settle()
        try:
            with HeldInterrupt() as held:
                score_lines(
                    source,
                    service=service,
                    tally=tally,
                    progress=progress,
                    table=table,
                    between_chunks=held.check,
                )
        except KeyboardInterrupt:
            progress.finish()
            print(
                f"score: interrupted; {counted(tally.total, 'row')} recorded in {masked_url(url)} "
                "(run the file again: recorded rows come back as cache hits)",
                file=sys.stderr,
            )
            return INTERRUPTED
        finally:
            gc_tuning.restore(thresholds)
            service.close()
    progress.finish()
    if tally.total == 0:
        raise InputError(f"{source_name(args.path)} contains no messages")
    if table is not None:
        table.print()
    print(
        f"{tally.summary('score', policy)} ({process_elapsed():.2f}s, store {store_name})",
        file=sys.stderr,
    )
    return tally.exit_code


class HeldInterrupt:
    """Ctrl-C while a chunk is being recorded is held until the chunk is recorded and
    counted, then raised between chunks: the interrupted summary's count is then exactly what
    the store holds (raised at once, mid-chunk, it was off by up to CHUNK rows the store had
    recorded and the tally not yet counted). A second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.pending = False
        self._previous: Any = None

    def __enter__(self) -> HeldInterrupt:
        try:
            self._previous = signal.signal(signal.SIGINT, self._hold)
        except ValueError:  # not the main thread: Ctrl-C does not reach this run
            self._previous = None
        return self

    def _hold(self, _signum: int, _frame: object) -> None:
        if self.pending:
            raise KeyboardInterrupt
        self.pending = True

    def check(self) -> None:
        if self.pending:
            raise KeyboardInterrupt

    def __exit__(self, *_: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _nothing() -> None:
    return None


def records_to_screen(chosen: str, settings: Settings) -> Table | None:
    """The table a terminal gets instead of the record lines (None: the lines, as the worker
    logs them). With a table or --quiet, the lines are rendered to nowhere: the records and
    alerts stay in the store, and `records` and `alerts` list them."""
    if chosen == JSONL:
        return None
    from worker.observability.logging import configure_logging

    configure_logging(settings.log_format, stream=Discard(), schema=settings.log_schema)
    return Table(SCORE_COLUMNS) if chosen == TABLE else None


def score_lines(
    lines: Iterable[tuple[int, bytes]],
    *,
    service: Service,
    tally: Tally,
    progress: Progress,
    table: Table | None = None,
    between_chunks: Callable[[], None] = _nothing,
) -> None:
    """Score numbered lines through the service, CHUNK at a time; one record per line (and
    a table row, when a terminal gets a table). `between_chunks` runs after each chunk is
    recorded and counted (where a held Ctrl-C is raised)."""
    from worker.pipeline.service import is_rejection

    run_id = uuid.uuid4().hex[:12]
    iterator = iter(lines)
    while chunk := list(islice(iterator, CHUNK)):
        results = service.handle(
            [
                (body, Delivery(task_id=f"score-{run_id}-{number}", line=number))
                for number, body in chunk
            ]
        )
        for result in results:
            record = result.record
            if is_rejection(result):
                tally.add(record.status, blocking=None)
                tally.rejected += 1
            else:
                tally.add(record.status, blocking=record.blocking, cache=record.cache)
            tally.alerts += result.alert is not None
            tally.drift_alerts += result.drift is not None
            tally.drifted += record.contract_drift
            if record.previous_status is not None:  # an open observation window (SPEC §12)
                tally.previous_version = record.previous_policy_version
                tally.previous_changed += record.previous_status != record.status
            if table is not None:
                table.add(
                    record.case_id,
                    record.status,
                    record.value,
                    record.owner,
                    record.missing_claim_ids,
                    record.cache,
                )
        progress.tick(len(chunk))
        between_chunks()
