"""Dead letters on every store: a bounded body with its digest and size, a 100 MB body kept
as 64 KiB in a real Redis, letters written before the bound still read back, and letters by
id (read, removed) with the ledger entries their replays are followed by."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from tests.conftest import FIXED_NOW
from tests.integration.store_factories import (
    CLUSTER,
    HASH,
    REDIS,
    StoreFactory,
    attempt,
    store_factory,
)
from worker.settings import DEAD_LETTER_MAX_BYTES
from worker.stores import DeadLetter, ResultStore
from worker.stores.contract import LedgerEntry
from worker.stores.redis.keys import dead_letters_key
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

pytestmark = pytest.mark.integration

HUNDRED_MB = 100 * 1024 * 1024
OLD_LETTER = {
    "received_at": "2026-12-01T12:00:00Z",
    "error": "schema: bogus: Extra inputs are not permitted",
    "body": '{"case_id": "junk-old", "bogus": "é"}',
    "task_id": "task-old",
}


@pytest.fixture(params=["sqlite", "fakeredis", REDIS, CLUSTER])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Every store kind in turn, built with keyword options."""
    with store_factory(request.param, request, tmp_path) as make:
        yield make


def letter(body: str) -> DeadLetter:
    return DeadLetter(received_at=FIXED_NOW, error="schema: bogus", body=body, task_id="task-1")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_a_body_within_the_bound_is_kept_whole_with_its_digest_and_size(
    make_store: StoreFactory,
) -> None:
    """Under the bound: the body as given, its SHA-256 and byte count, not truncated."""
    store = make_store(dead_letter_max_bytes=64)
    body = '{"case_id": "junk", "bogus": "é"}'

    store.dead_letter(letter(body))

    assert store.dead_letters() == [
        letter(body).model_copy(update={"body_sha256": digest(body), "body_bytes": 34})
    ]


def test_a_body_over_the_bound_is_cut_at_a_character_boundary(make_store: StoreFactory) -> None:
    """A 16-byte bound through "€" (bytes 15 to 17): the first 14 bytes are kept."""
    store = make_store(dead_letter_max_bytes=16)
    body = "abcdefghijklmn€ and more"

    store.dead_letter(letter(body))

    (stored,) = store.dead_letters()
    assert (stored.body, stored.body_bytes, stored.truncated, stored.body_sha256) == (
        "abcdefghijklmn",
        26,
        True,
        digest(body),
    )


def test_each_letter_of_a_batch_is_bounded(make_store: StoreFactory) -> None:
    """dead_letter(a, b) bounds each letter on its own."""
    store = make_store(dead_letter_max_bytes=4)

    store.dead_letter(letter("abc"), letter("abcdef"))

    assert [(each.body, each.body_bytes, each.truncated) for each in store.dead_letters()] == [
        ("abc", 3, False),
        ("abcd", 6, True),
    ]


def write_old_letter(store: ResultStore) -> None:
    """Store OLD_LETTER as the stores wrote letters before the bound: no digest, no size."""
    text = json.dumps(OLD_LETTER)
    if isinstance(store, RedisStore):
        # the stream the new letter (task-1's) goes to, on a Redis Cluster too
        store.client.xadd(store.keys.dead_letters_of("task-1"), {"letter": text})
    else:
        assert isinstance(store, SQLiteStore)
        store._db.execute("INSERT INTO dead_letters (letter) VALUES (?)", (text,))


def test_a_letter_written_before_the_bound_reads_with_no_digest(make_store: StoreFactory) -> None:
    """An old letter's JSON reads back as it was, beside a new one that has its digest."""
    store = make_store()
    write_old_letter(store)
    store.dead_letter(letter("new"))

    assert store.dead_letters() == [
        DeadLetter(
            received_at=FIXED_NOW,
            error=OLD_LETTER["error"],
            body=OLD_LETTER["body"],
            task_id="task-old",
            body_sha256=None,
            body_bytes=None,
            truncated=False,
        ),
        letter("new").model_copy(update={"body_sha256": digest("new"), "body_bytes": 3}),
    ]


def test_a_100_mb_body_sits_in_a_real_redis_as_64_kib(redis_url: str, key_prefix: str) -> None:
    """The stream entry Redis holds is the bounded letter: 64 KiB of body plus the rest."""
    store = RedisStore.from_url(redis_url, prefix=key_prefix)
    body = "z" * HUNDRED_MB
    try:
        store.dead_letter(letter(body))

        (stored,) = store.dead_letters()
        entries = cast(
            "list[tuple[bytes, dict[bytes, bytes]]]",
            store.client.xrange(dead_letters_key(key_prefix)),
        )
        ((_, fields),) = entries
        memory = store.client.memory_usage(dead_letters_key(key_prefix))
    finally:
        store.close()
    assert (stored.body, stored.body_bytes, stored.truncated, stored.body_sha256) == (
        "z" * DEAD_LETTER_MAX_BYTES,
        HUNDRED_MB,
        True,
        digest(body),
    )
    assert DEAD_LETTER_MAX_BYTES < len(fields[b"letter"]) < DEAD_LETTER_MAX_BYTES + 1024
    assert memory is not None
    assert memory < 2 * DEAD_LETTER_MAX_BYTES


def bodies(store: ResultStore) -> list[str]:
    return [each.body for _, each in store.letters_newest_first()]


def test_letters_read_back_newest_first_each_with_an_id_that_finds_it(
    make_store: StoreFactory,
) -> None:
    """letters_newest_first() gives every letter with its id, newest first; letter(id) finds
    each one whole."""
    store = make_store()
    store.dead_letter(letter("one"))
    store.dead_letter(letter("two"), letter("three"))

    found = list(store.letters_newest_first())

    assert [each.body for _, each in found] == ["three", "two", "one"]
    assert [store.letter(letter_id) for letter_id, _ in found] == [each for _, each in found]
    assert len({letter_id for letter_id, _ in found}) == 3


@pytest.mark.parametrize(
    "letter_id",
    ["", "0", "x", "1-0", "99999-0", "00/1-0", "zz/1-0", "1/2/3", "99999999999999999999-0", "١"],
)
def test_an_id_the_store_never_gave_finds_nothing_and_removes_nothing(
    make_store: StoreFactory, letter_id: str
) -> None:
    """A malformed id, or one of no letter, is None to letter() and 0 to remove_letters()."""
    store = make_store()
    store.dead_letter(letter("kept"))

    assert store.letter(letter_id) is None
    assert store.remove_letters([letter_id]) == 0
    assert bodies(store) == ["kept"]


def test_remove_letters_removes_those_ids_and_no_other(make_store: StoreFactory) -> None:
    """Removing a, c and c again removes two letters; b stays."""
    store = make_store()
    store.dead_letter(letter("a"), letter("b"), letter("c"))
    ids = {each.body: letter_id for letter_id, each in store.letters_newest_first()}

    assert store.remove_letters([ids["a"], ids["c"], ids["c"]]) == 2
    assert bodies(store) == ["b"]
    assert store.letter(ids["a"]) is None


def test_a_ledger_entry_stays_open_until_its_write_is_recorded_or_dead_lettered(
    make_store: StoreFactory,
) -> None:
    """still_open(): t-1's entry closes as its write is recorded, t-2's as its message is
    dead-lettered; t-3's stays open."""
    store = make_store()
    now = datetime.now(UTC)
    store.note_published(
        [
            LedgerEntry(
                task_id=f"t-{n}",
                position=0,
                case_id=f"refund-{n:03d}",
                input_hash=HASH,
                published_at=now,
                body="{}",
            )
            for n in (1, 2, 3)
        ]
    )
    write_ids = ["t-1:0", "t-2:0", "t-3:0"]
    assert store.still_open(write_ids) == set(write_ids)

    store.record(HASH, attempt(1), now=now, write_id="t-1:0")
    store.dead_letter(
        DeadLetter(received_at=now, error="schema: bogus", body="{}", task_id="t-2", position=0)
    )

    assert store.still_open(write_ids) == {"t-3:0"}
