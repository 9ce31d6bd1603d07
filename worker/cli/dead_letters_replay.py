"""`dead-letters replay`: each letter back the way it came, removed only once its replay is
recorded or dead-lettered anew (worker/upstream/replay.py says how the worker's are followed).

A letter `score` wrote is scored here through the service `score` uses: its record (or its
new dead letter) is written before the old letter goes. A worker's letter is checked here
first: still invalid, it is dead-lettered again with today's reason and never sent; valid,
it goes to the broker through the ledger, and its letter goes once the worker closes the
ledger entry. A new letter is always written before the old one is removed: a crash between
leaves both, never neither.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING

from worker.audit.letters import origin, replay_task_id
from worker.cli.exit_codes import INVALID, OK, UNRECORDED
from worker.cli.output import dumps_line, located
from worker.cli.policy_options import resolve_policy
from worker.cli.run_summary import Tally
from worker.cli.store_access import store_errors, store_url
from worker.errors import ConfigurationError, InputError
from worker.human_counts import counted
from worker.pipeline.scoring import Delivery
from worker.settings import Settings
from worker.stores import DeadLetter
from worker.stores import describe as describe_store

if TYPE_CHECKING:
    from celery import Celery

    from worker.pipeline.service import Service
    from worker.upstream.publishing import Outgoing

LABEL = "dead-letters replay"
CHUNK = 200  # letters read and replayed per step: one store call for score's, one send


@dataclass
class Replayed:
    """What a replay did, for the summary line and the exit code."""

    recorded: int = 0  # recorded (score's) or closed by the worker (a worker's): removed
    already: int = 0  # recorded under the letter's own write id before: removed, not sent
    invalid: int = 0  # still invalid: dead-lettered again, the old letter removed
    pending: int = 0  # sent, not recorded within --wait: kept
    cut: int = 0  # kept cut (over EVIDENCE_DEAD_LETTER_MAX_BYTES): kept, not replayable
    gone: int = 0  # removed by someone else since they were chosen
    tally: Tally = field(default_factory=Tally)  # score's letters' records
    first_invalid: tuple[str, str] | None = None  # (letter id, reason)

    @property
    def exit_code(self) -> int:
        code = self.tally.exit_code if self.tally.total else OK
        if self.invalid or self.cut:
            code = max(code, INVALID)
        return max(code, UNRECORDED) if self.pending else code

    def summary(self, total: int) -> str:
        """The one line on stderr; a single letter still invalid is named with its reason."""
        again = "dead-lettered again"
        if self.invalid == 1 and self.first_invalid is not None:
            again += f": letter {self.first_invalid[0]}: {self.first_invalid[1]}"
        parts = [
            (self.recorded, "recorded"),
            (self.already, "recorded before under their write id (removed, nothing sent)"),
            (self.invalid, f"still invalid ({again})"),
            (self.pending, "sent and not recorded yet (kept: replay them again)"),
            (self.cut, "kept cut, not replayable (EVIDENCE_DEAD_LETTER_MAX_BYTES)"),
            (self.gone, "removed meanwhile"),
        ]
        said = ", ".join(f"{count:,} {what}" for count, what in parts if count)
        return f"{LABEL}: {counted(total, 'letter')}: {said or 'none'}"

    def still_invalid(self, letter_id: str, reason: str) -> None:
        self.invalid += 1
        if self.first_invalid is None:
            self.first_invalid = (letter_id, reason)


def replay(letter_ids: Sequence[str], args: argparse.Namespace, settings: Settings) -> int:
    """Replay the letters of these ids (chosen by worker/cli/dead_letters.py), CHUNK at a time."""
    from worker.pipeline.service import Service

    policy = resolve_policy(args, settings, required=False)
    url = store_url(args, settings)
    with store_errors(url):
        run = Replay(Service.open(settings, store_url=url, policy=policy), settings, args.wait)
        named = describe_store(run.store, url)
        try:
            iterator = iter(letter_ids)
            while chunk := list(islice(iterator, CHUNK)):
                run.chunk(chunk)
        finally:
            run.close()
    broker = settings.broker_url if run.sent else None
    print(located(run.done.summary(len(letter_ids)), store=named, broker=broker), file=sys.stderr)
    return run.done.exit_code


class Replay:
    """One replay run: the service it records through, the publisher it makes for the first
    worker's letter it sends, and what it did so far."""

    def __init__(self, service: Service, settings: Settings, wait_seconds: float) -> None:
        self.service = service
        self.store = service.store
        self.settings = settings
        self.wait_seconds = wait_seconds
        self.done = Replayed()
        self._app: Celery | None = None
        self.sent = False  # a worker's letter went to the broker

    def chunk(self, letter_ids: Sequence[str]) -> None:
        scores: list[tuple[str, DeadLetter]] = []
        workers: list[tuple[str, DeadLetter]] = []
        found: list[tuple[str, DeadLetter]] = []
        for letter_id in letter_ids:
            letter = self.store.letter(letter_id)
            if letter is None:
                self.done.gone += 1
            elif letter.truncated:
                self.done.cut += 1
            else:
                found.append((letter_id, letter))
        for (letter_id, letter), recorded in zip(found, self._recorded(found), strict=True):
            if recorded:
                self._already(letter_id, letter)
            else:
                (scores if origin(letter) == "score" else workers).append((letter_id, letter))
        if scores:
            self.scores(scores)
        if workers:
            self.workers(workers)

    def _recorded(self, letters: Sequence[tuple[str, DeadLetter]]) -> list[bool]:
        """Per letter, whether its message is recorded under the letter's own write id (its
        task ID and position): the write landed and only its reply failed (a replica's wait,
        a lost connection) before the letter was written. Replaying it would add an attempt."""
        return self.service.recorded(
            [
                (letter.body, Delivery(task_id=letter.task_id, position=letter.position))
                for _, letter in letters
            ]
        )

    def _already(self, letter_id: str, letter: DeadLetter) -> None:
        """A letter whose message is recorded: removed, nothing sent or scored again."""
        from worker.pipeline.intake import case_id_of

        self.store.remove_letters([letter_id])
        self.done.already += 1
        line = {"id": letter_id, "case_id": case_id_of(letter.body), "recorded": True}
        print(dumps_line({**line, "already_recorded": True}))

    def scores(self, letters: Sequence[tuple[str, DeadLetter]]) -> None:
        """Through the embedded pipeline, as `score` ran them, each record printed; the old
        letters removed once the call that recorded (or dead-lettered) them returned."""
        from worker.pipeline.service import is_rejection

        results = self.service.handle(
            [
                (letter.body, Delivery(task_id=replay_task_id(letter_id, letter), line=letter.line))
                for letter_id, letter in letters
            ]
        )
        done = self.done
        for (letter_id, _), result in zip(letters, results, strict=True):
            record = result.record
            if is_rejection(result):  # its record (on stdout) says why
                done.still_invalid(letter_id, record.reason)
                continue
            done.recorded += 1
            done.tally.add(record.status, blocking=record.blocking, cache=record.cache)
            done.tally.alerts += result.alert is not None
            done.tally.drift_alerts += result.drift is not None
            done.tally.drifted += record.contract_drift
        self.store.remove_letters([letter_id for letter_id, _ in letters])

    def workers(self, letters: Sequence[tuple[str, DeadLetter]]) -> None:
        """Still invalid: dead-lettered again, never sent. Valid: to the broker through the
        ledger; each letter removed once the worker closed its entry."""
        from worker.pipeline.intake import admit, case_id_of
        from worker.upstream.replay import replay_task, wait_closed

        if self.settings.ledger_ttl_seconds <= 0:
            raise ConfigurationError(
                f"{LABEL} sends a worker's letters through the publish ledger, which "
                "EVIDENCE_LEDGER_TTL_SECONDS=0 turns off: set it above 0"
            )
        limit = self.settings.max_message_bytes
        now = datetime.now(UTC)
        sent = []
        tasks = []
        for letter_id, letter in letters:
            try:
                message = admit(letter.body, max_bytes=limit)
            except InputError as error:
                self.store.dead_letter(
                    letter.model_copy(update={"received_at": now, "error": str(error)})
                )
                self.store.remove_letters([letter_id])
                self.done.still_invalid(letter_id, str(error))
                said = {"id": letter_id, "case_id": case_id_of(letter.body), "invalid": str(error)}
                print(dumps_line(said))
                continue
            task_id = replay_task_id(letter_id, letter)
            task = replay_task(task_id, message, letter.body, max_message_bytes=limit, now=now)
            sent.append((letter_id, task.entries[0]))
            tasks.append(task)
        if not sent:
            return
        self._send(tasks)
        still = wait_closed(
            self.store, [entry.write_id for _, entry in sent], wait_seconds=self.wait_seconds
        )
        self.store.remove_letters(
            [letter_id for letter_id, entry in sent if entry.write_id not in still]
        )
        for letter_id, entry in sent:
            recorded = entry.write_id not in still
            self.done.recorded += recorded
            self.done.pending += not recorded
            line: dict[str, object] = {
                "id": letter_id,
                "replayed_as": entry.task_id,
                "case_id": entry.case_id,
                "input_hash": entry.input_hash,
                "recorded": recorded,
            }
            print(dumps_line(line))

    def _send(self, tasks: Sequence[Outgoing]) -> None:
        """Noted in the ledger, then sent (a publisher made for the first send)."""
        from worker.upstream.replay import send_replays

        if self._app is None:
            self._app = _publisher(self.settings)
        self.sent = True
        send_replays(self._app, tasks, queue=self.settings.queue, ledger=self.store)

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
        self.service.close()


def _publisher(settings: Settings) -> Celery:
    from worker.cli.publish import bound_broker_waits
    from worker.runtime.celery_app import create_app

    app = create_app(settings)
    bound_broker_waits(app.conf)
    return app
