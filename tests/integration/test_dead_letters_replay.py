"""`dead-letters replay` of a worker's letter through a real Redis broker and a real worker:
the letter stays until the worker has recorded the replay, and a replay sent again (after a
run that stopped waiting, or died, before the record) is the same write, never a second
attempt."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conftest import BASE_MESSAGE
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    BROKER_URL,
    STORE_URL,
    Worker,
    hash_of,
    queue_length,
)
from worker.cli import main
from worker.cli.exit_codes import OK, UNRECORDED
from worker.stores import DeadLetter
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
store = harness.store

REASON = "schema: supported_claim_ids: Field required"
RECORD_WAIT_SECONDS = "120"  # a generous bound on the worker's record, never a timing check


def replay(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    key_prefix: str,
    queue: str,
    *args: str,
) -> tuple[int, list[dict[str, Any]], str]:
    """`evidence-worker dead-letters replay ARGS` in this process on the harness's store."""
    for name, value in {
        "EVIDENCE_BROKER_URL": BROKER_URL,
        "EVIDENCE_STORE_URL": STORE_URL,
        "EVIDENCE_KEY_PREFIX": key_prefix,
        "EVIDENCE_QUEUE": queue,
    }.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main(["dead-letters", "replay", *args])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in io.StringIO(out)], err


def test_a_worker_letter_is_removed_only_once_the_worker_has_recorded_its_replay(
    store: RedisStore,
    key_prefix: str,
    start_worker: Callable[..., Worker],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With no worker up, replay sends the message through the ledger and keeps the letter
    (exit 3, its entry open); replayed again with a worker up, the same write is recorded
    once, and only then is the letter removed."""
    queue = f"test-queue-{uuid.uuid4().hex[:10]}"
    body = json.dumps(BASE_MESSAGE)
    letter = DeadLetter(
        received_at=datetime.now(UTC), error=REASON, body=body, task_id="task-old", position=0
    )
    store.dead_letter(letter)
    ((letter_id, kept),) = list(store.letters_newest_first())

    code, lines, err = replay(monkeypatch, capsys, key_prefix, queue, letter_id, "--wait", "0")

    (line,) = lines
    task_id = line["replayed_as"]
    assert (code, err) == (
        UNRECORDED,
        "dead-letters replay: 1 letter: 1 sent and not recorded yet (kept: replay them again)"
        f" (store {STORE_URL}, broker {BROKER_URL})\n",
    )
    assert line == {
        "id": letter_id,
        "replayed_as": task_id,
        "case_id": "refund-001",
        "input_hash": hash_of(BASE_MESSAGE),
        "recorded": False,
    }
    assert task_id.startswith("replay-")
    assert store.letter(letter_id) == kept
    assert store.still_open([f"{task_id}:0"]) == {f"{task_id}:0"}
    assert queue_length(BROKER_URL, queue) == 1

    start_worker(queue).wait_ready()
    code, lines, err = replay(
        monkeypatch, capsys, key_prefix, queue, letter_id, "--wait", RECORD_WAIT_SECONDS
    )

    assert (code, err) == (
        OK,
        f"dead-letters replay: 1 letter: 1 recorded (store {STORE_URL}, broker {BROKER_URL})\n",
    )
    assert lines == [{**line, "recorded": True}]
    assert store.letter(letter_id) is None
    assert store.still_open([f"{task_id}:0"]) == set()
    history = store.history(hash_of(BASE_MESSAGE))
    assert history is not None
    assert (history.total_attempts, [each.task_id for each in history.attempts]) == (
        1,
        [task_id],
    )


def test_a_letter_whose_message_is_recorded_under_its_write_id_is_removed_and_never_sent(
    store: RedisStore,
    key_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A letter written at the delivery limit for a message whose write had landed (only the
    replicas' wait failed): replay finds the write under the letter's task ID and position,
    removes the letter, sends nothing and adds no attempt."""
    from worker.pipeline.scoring import Delivery
    from worker.pipeline.service import Service
    from worker.settings import Settings

    queue = f"test-queue-{uuid.uuid4().hex[:10]}"
    settings = Settings(key_prefix=key_prefix)
    service = Service.open(settings, store_url=STORE_URL, policy=None)
    try:
        service.handle([(dict(BASE_MESSAGE), Delivery(task_id="task-landed", position=0))])
    finally:
        service.close()
    reason = "delivered 4 times without completing (limit EVIDENCE_MAX_DELIVERIES=3)"
    store.dead_letter(
        DeadLetter(
            received_at=datetime.now(UTC),
            error=reason,
            body=json.dumps(BASE_MESSAGE),
            task_id="task-landed",
            position=0,
        )
    )
    ((letter_id, _),) = list(store.letters_newest_first())

    code, lines, err = replay(monkeypatch, capsys, key_prefix, queue, "--all")

    assert (code, err) == (
        OK,
        "dead-letters replay: 1 letter: 1 recorded before under their write id (removed, "
        f"nothing sent) (store {STORE_URL})\n",
    )
    assert lines == [
        {"id": letter_id, "case_id": "refund-001", "recorded": True, "already_recorded": True}
    ]
    assert list(store.letters_newest_first()) == []
    assert queue_length(BROKER_URL, queue) == 0
    history = store.history(hash_of(BASE_MESSAGE))
    assert history is not None
    assert (history.total_attempts, [each.task_id for each in history.attempts]) == (
        1,
        ["task-landed"],
    )
