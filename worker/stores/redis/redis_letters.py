"""Dead letters by id on Redis (base.LetterBox): a letter's id is its stream entry ID; on a
Redis Cluster, whose letters are in a stream per shard, the shard's number, "/", the entry ID
("3f/1733500000000-0"). Stream IDs only grow, so a removed letter's id is never reused."""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis

from worker.stores.codec import read_letter
from worker.stores.contract import DeadLetter, task_and_position
from worker.stores.redis.keys import KeyLayout

T = TypeVar("T")

LETTER_PAGE = 200  # letters per XREVRANGE: a page of bodies, each bounded
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")

Letter = tuple[tuple[datetime, bytes, int, int], str, DeadLetter]


class RedisLetters:
    """The LetterBox half of RedisStore (mixed in): needs its client, keys and _call."""

    client: redis.Redis
    keys: KeyLayout

    if TYPE_CHECKING:

        def _call(self, operation: Callable[[], T]) -> T: ...  # RedisStore's

    def _letter_id(self, shard: int, entry_id: bytes) -> str:
        if len(self.keys.dead_letter_streams()) == 1:
            return entry_id.decode()
        return f"{shard:02x}/{entry_id.decode()}"

    def _where(self, letter_id: str) -> tuple[str, str] | None:
        """The stream and entry ID a letter id names; None for anything never written here."""
        streams = self.keys.dead_letter_streams()
        shard, _, entry_id = letter_id.rpartition("/")
        if len(streams) == 1:
            index = 0 if not shard else -1
        else:
            index = int(shard, 16) if re.fullmatch(r"[0-9a-f]{2}", shard) else -1
        if not 0 <= index < len(streams) or not _ENTRY_ID.fullmatch(entry_id):
            return None
        if any(int(part) >= 2**64 for part in entry_id.split("-")):  # Redis would refuse it
            return None
        return streams[index], entry_id

    def letters_newest_first(self) -> Iterator[tuple[str, DeadLetter]]:
        """Several streams (a Redis Cluster's shards) merged by each letter's own time, then the
        order its writer gave it, then entry ID, as RedisStore orders its alerts: no one clock
        orders what different masters took."""
        streams = [
            self._stream_newest_first(shard, stream)
            for shard, stream in enumerate(self.keys.dead_letter_streams())
        ]
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, reverse=True)
        for _, letter_id, letter in merged:
            yield letter_id, letter

    def _stream_newest_first(self, shard: int, stream: str) -> Iterator[Letter]:
        newest = "+"
        while True:

            def fetch(newest: str = newest) -> Any:
                return self.client.xrevrange(stream, max=newest, count=LETTER_PAGE)

            page = cast("list[tuple[bytes, dict[bytes, bytes]]]", self._call(fetch))
            for entry_id, fields in page:
                letter = read_letter(fields[b"letter"])
                at = letter.received_at
                ms, _, sequence = entry_id.partition(b"-")
                key = (at if at.tzinfo else at.replace(tzinfo=UTC), fields.get(b"n", b""))
                yield (*key, int(ms), int(sequence or 0)), self._letter_id(shard, entry_id), letter
            if len(page) < LETTER_PAGE:
                return
            newest = f"({page[-1][0].decode()}"

    def letter(self, letter_id: str) -> DeadLetter | None:
        where = self._where(letter_id)
        if where is None:
            return None
        stream, entry_id = where

        def fetch() -> Any:
            return self.client.xrange(stream, min=entry_id, max=entry_id, count=1)

        page = cast("list[tuple[bytes, dict[bytes, bytes]]]", self._call(fetch))
        return read_letter(page[0][1][b"letter"]) if page else None

    def remove_letters(self, letter_ids: Sequence[str]) -> int:
        found = [where for each in letter_ids if (where := self._where(each)) is not None]
        if not found:
            return 0

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for stream, entry_id in found:
                pipe.xdel(stream, entry_id)
            return pipe.execute()

        return sum(int(removed) for removed in self._call(run))

    def still_open(self, write_ids: Sequence[str]) -> set[str]:
        """An entry is open while its write id is in its ledger's sorted set and its task's
        hash (RECORD_LUA and CLOSE_LUA remove both; the hash's expiry forgets it)."""
        if not write_ids:
            return set()

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for write_id in write_ids:
                task_id, position = task_and_position(write_id)
                pipe.zscore(self.keys.ledger_of(task_id), write_id)
                pipe.hexists(self.keys.ledger_task(task_id), position)
            return pipe.execute()

        replies = self._call(read)
        return {
            write_id
            for write_id, score, kept in zip(write_ids, replies[::2], replies[1::2], strict=True)
            if score is not None and kept
        }
