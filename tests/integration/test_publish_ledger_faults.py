"""A store that fails mid-publish: exactly one of "sent" and "not sent" is true of every line,
and `publish` says which. The lines not sent have notes in the store (their write may have
landed: a Redis paused past the client's timeout runs it afterwards) that nothing lists nor
sends; `--from-line` sends them, once.

On SQLite (its note's transaction finds the file locked), a single Redis behind a proxy that
drops the note's reply (the note lands, the client times out after 10 s: a note "written to
the store whose write failed") and a Redis Cluster (CLIENT PAUSE WRITE on every master past
the client's timeout: the note never lands), the broker the shared Redis. Every message is
accounted for by case ID.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration import test_publish_cli as publish_cli
from tests.integration.fault_helpers import MessageFactory, distinct
from tests.integration.fault_proxy import FaultProxy
from tests.integration.test_publish_cli import PROG, Run, queued
from tests.integration.worker_harness import REDIS_PORT, STORE_URL
from worker.cli.exit_codes import INVALID, OK
from worker.settings import Settings
from worker.stores import ResultStore, open_store
from worker.stores.redis.redis_cluster import RedisClusterStore
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore
from worker.upstream.publishing import NOTE_CHUNK

pytestmark = pytest.mark.integration

queue = publish_cli.queue
publish = publish_cli.publish

LINES = 450
PAUSE_MS = 12_000  # past the Redis store client's socket timeout (10 s)
SOON = timedelta(days=1)


@pytest.fixture(params=["sqlite", "redis", "cluster"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    """A TCP proxy in front of the shared Redis, for the single Redis store."""
    relay = FaultProxy(target_port=REDIS_PORT).start()
    yield relay
    relay.stop()


@pytest.fixture
def store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    if kind == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    relay: FaultProxy = request.getfixturevalue("proxy")
    return relay.url(int(STORE_URL.rsplit("/", 1)[1]))


@pytest.fixture
def prefix(kind: str, request: pytest.FixtureRequest, key_prefix: str) -> str:
    return str(request.getfixturevalue("cluster_prefix")) if kind == "cluster" else key_prefix


@pytest.fixture
def fails_on_second_note(
    kind: str, store_url: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], None]]:
    """The store's second note of a publish meets a real fault; yields the wait for its end."""
    classes: dict[str, Any] = {
        "sqlite": SQLiteStore,
        "redis": RedisStore,
        "cluster": RedisClusterStore,
    }
    store_class = classes[kind]
    real = store_class.note_published
    calls: list[int] = []
    lock: list[sqlite3.Connection] = []
    paused_until: list[float] = []
    dropping: list[FaultProxy] = []

    def faulty(self: Any, entries: Any, **options: Any) -> None:
        calls.append(len(entries))
        if len(calls) == 2:
            if kind == "sqlite":  # another writer holds the file: the note's lock times out
                self._db.execute("PRAGMA busy_timeout = 300")
                holder = sqlite3.connect(store_url.removeprefix("sqlite:///"))
                holder.execute("BEGIN EXCLUSIVE")
                lock.append(holder)
            elif kind == "redis":  # the note runs, its reply is lost: the client gives up
                relay: FaultProxy = request.getfixturevalue("proxy")
                relay.drop_replies()
                dropping.append(relay)
            else:  # no master takes a write for 12 s: the client gives up at 10 s
                for node in request.getfixturevalue("redis_cluster").masters():
                    client = redis.Redis(port=node.port)
                    client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
                    client.close()
                paused_until.append(time.monotonic() + PAUSE_MS / 1000 + 0.5)
        real(self, entries, **options)

    monkeypatch.setattr(store_class, "note_published", faulty)

    def fault_over() -> None:
        while lock:
            holder = lock.pop()
            holder.rollback()
            holder.close()
        while dropping:
            dropping.pop().pass_traffic()
        while paused_until:
            time.sleep(max(0.0, paused_until.pop() - time.monotonic()))
        monkeypatch.setattr(store_class, "note_published", real)

    yield fault_over
    fault_over()


def open_case_ids(store: ResultStore) -> list[str]:
    """The case IDs the ledger lists as published and unrecorded (what reconcile lists and
    the self-heal would send), sorted."""
    now = store.ledger_now() + SOON
    return sorted(entry.case_id for entry in store.unrecorded(published_before=now))


@pytest.mark.timeout(240)
def test_a_store_failing_mid_publish_leaves_every_line_sent_or_not_sent_and_said(
    publish: Callable[..., Run],
    queue: str,
    store_url: str,
    prefix: str,
    kind: str,
    fails_on_second_note: Callable[[], None],
    message_dict: MessageFactory,
    tmp_path: Path,
) -> None:
    """The second chunk's note fails: lines 1-200 were sent and are listed by the ledger;
    publish names line 201 as the first not sent; no line from 201 on is on the broker or
    listed (their notes, landed or not, are unconfirmed). `--from-line 201` sends them:
    every case ID once on the broker and once in the ledger, none twice."""
    messages = distinct(message_dict, f"mid-{kind}", LINES)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(message) + "\n" for message in messages), "utf-8")
    env = {"EVIDENCE_STORE_URL": store_url, "EVIDENCE_KEY_PREFIX": prefix}
    first_unsent = NOTE_CHUNK + 1

    failed = publish(str(path), env=env)
    fails_on_second_note()

    assert failed.code == INVALID
    assert failed.stderr_lines[-2] == (  # after any progress line
        f"publish: the store failed: line {first_unsent} and every line after it were not "
        f"sent, and nothing will send them; sent {NOTE_CHUNK} messages to queue {queue} "
        f"before it; resume with `{PROG} publish {path} --from-line {first_unsent}`"
    )
    assert failed.stderr_lines[-1].startswith(f"{PROG}: store unavailable: ")
    sent_ids = [message["case_id"] for message in messages[:NOTE_CHUNK]]
    unsent_ids = [message["case_id"] for message in messages[NOTE_CHUNK:]]
    assert [task.args[0] for task in queued(queue)] == [
        json.dumps(message) for message in messages[:NOTE_CHUNK]
    ]
    store = open_store(store_url, Settings(key_prefix=prefix))
    try:
        assert open_case_ids(store) == sorted(sent_ids)
        if kind == "redis":  # the second note ran, its reply lost: 200 notes not listed
            assert isinstance(store, RedisStore)
            notes = list(store.client.scan_iter(match=f"{prefix}:ledger:task:*", count=1000))
            assert len(notes) == 2 * NOTE_CHUNK

        resumed = publish(str(path), "--from-line", str(first_unsent), env=env)

        assert (resumed.code, resumed.stderr_lines[-1]) == (
            OK,
            f"publish: sent {LINES - NOTE_CHUNK} messages in {LINES - NOTE_CHUNK} tasks to "
            f"queue {queue}; 0 lines rejected; {NOTE_CHUNK} lines skipped (--from-line "
            f"{first_unsent}) (store {store_url}, broker {publish_cli.BROKER_URL})",
        )
        on_broker = [json.loads(task.args[0])["case_id"] for task in queued(queue)]
        assert on_broker == sent_ids + unsent_ids
        assert open_case_ids(store) == sorted(sent_ids + unsent_ids)
    finally:
        store.close()
    print(
        f"{kind}: {LINES} lines; run 1 sent {NOTE_CHUNK}, not sent "
        f"{LINES - NOTE_CHUNK} (none on the broker, none listed; redis: 200 of their notes "
        f"landed, unlisted); run 2 (--from-line "
        f"{first_unsent}) sent {LINES - NOTE_CHUNK}; on the broker {len(on_broker)}, each once"
    )


def test_from_line_beyond_the_file_is_one_line_and_exit_2(
    publish: Callable[..., Run], queue: str, tmp_path: Path, message_dict: MessageFactory
) -> None:
    """Nothing is sent; the line names the option, the file and its last line."""
    path = tmp_path / "three.jsonl"
    messages = distinct(message_dict, "short", 3)
    path.write_text("".join(json.dumps(message) + "\n" for message in messages), "utf-8")

    run = publish(str(path), "--from-line", "9")

    assert (run.code, run.stderr_lines) == (
        INVALID,
        [f"{PROG}: --from-line 9: {path} has no line 9 (its last line is 3)"],
    )
    assert queued(queue) == []
