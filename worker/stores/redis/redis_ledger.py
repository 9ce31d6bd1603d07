"""The publish ledger on Redis (worker/stores/contract.py): a sorted set of open write ids by
publish time, and one hash of entries per task; RECORD_LUA closes an entry as it records."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis

from worker.stores.contract import DeadLetter, LedgerEntry, task_and_position
from worker.stores.redis import lua
from worker.stores.redis.keys import KeyLayout
from worker.stores.redis.routing import ClusterRouter, Command, Scripts, SingleRouter

T = TypeVar("T")

LEDGER_PAGE = 1000  # open entries per read while reconcile walks the ledger

NOTE_LUA = lua.source("note")
CONFIRM_LUA = lua.source("confirm")
CLOSE_LUA = lua.source("close")
GIVE_BACK_LUA = lua.source("give_back")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _from_ms(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class RedisLedger:
    """The Ledger half of RedisStore (mixed in): needs its client, prefix, keys, scripts,
    router and _call. Its writes are the router's commands, the same on one server and on a
    Redis Cluster; its reads go through the client, which routes them on a cluster."""

    client: redis.Redis
    prefix: str
    keys: KeyLayout
    ledger_ttl_seconds: int
    scripts: Scripts
    router: SingleRouter | ClusterRouter

    if TYPE_CHECKING:

        def _call(self, operation: Callable[[], T]) -> T: ...  # RedisStore's

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        if not entries or self.ledger_ttl_seconds <= 0:
            return
        commands = [
            self.scripts.call("note", keys, args)
            for keys, args in self._note_calls(entries, sent=sent)
        ]
        self._call(lambda: self.router.run(commands))

    def _note_calls(
        self, entries: Sequence[LedgerEntry], *, sent: bool
    ) -> list[tuple[list[str], list[Any]]]:
        """NOTE_LUA's keys and arguments, one call per ledger (one on a single Redis; per
        shard on a Redis Cluster, whose ledger keys share a shard with their task's)."""
        by_ledger: dict[str, list[LedgerEntry]] = defaultdict(list)
        for entry in entries:
            by_ledger[self.keys.ledger_of(entry.task_id)].append(entry)
        calls = []
        for ledger, noted in by_ledger.items():
            keys = [ledger]
            args: list[Any] = [self.ledger_ttl_seconds, "1" if sent else ""]
            for entry in noted:
                keys.append(self.keys.ledger_task(entry.task_id))
                args += (entry.position, entry.model_dump_json(), entry.write_id)
            calls.append((keys, args))
        return calls

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        if not write_ids or self.ledger_ttl_seconds <= 0:
            return
        calls = self._confirm_calls(write_ids)
        commands = [self.scripts.call("confirm", keys, args) for keys, args in calls]
        self._call(lambda: self.router.run(commands))

    def _confirm_calls(self, write_ids: Sequence[str]) -> list[tuple[list[str], list[Any]]]:
        """CONFIRM_LUA's keys and arguments, one call per ledger (as _note_calls)."""
        by_ledger: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for write_id in write_ids:
            task_id, position = task_and_position(write_id)
            by_ledger[self.keys.ledger_of(task_id)].append((task_id, position))
        calls = []
        for ledger, entries in by_ledger.items():
            keys = [ledger]
            args: list[Any] = []
            for task_id, position in entries:
                keys.append(self.keys.ledger_task(task_id))
                args += (position, f"{task_id}:{position}")
            calls.append((keys, args))
        return calls

    def _closes(self, closes: Sequence[tuple[str, int | None]]) -> list[Command]:
        """CLOSE_LUA once per task for its positions (a None among them: all its entries)."""
        by_task: dict[str, list[int | None]] = defaultdict(list)
        for task_id, position in closes:
            by_task[task_id].append(position)
        return [
            self.scripts.call(
                "close",
                [self.keys.ledger_of(task_id), self.keys.ledger_task(task_id)],
                [task_id, *([""] if None in positions else positions)],
            )
            for task_id, positions in by_task.items()
        ]

    def close_entries(self, write_ids: Sequence[str]) -> None:
        closes: list[tuple[str, int | None]] = []
        for write_id in write_ids:
            task_id, position = task_and_position(write_id)
            closes.append((task_id, int(position)))
        if closes:
            commands = self._closes(closes)
            self._call(lambda: self.router.run(commands))

    def take_lease(self, name: str, holder: str, seconds: int) -> bool:
        """SET NX with the expiry: Redis ages the lease by its own clock. Taken once the
        replicas have it (on a cluster, the lease's master's), as every write: a lease lost in
        a failover would let a second holder take it (a promoted replica that never saw it)."""
        key = self.keys.lease(name)
        command = Command(key, ("SET", key, holder, "NX", "EX", seconds))
        return self._call(lambda: self.router.run([command]))[0] is not None

    def give_back_lease(self, name: str, holder: str) -> None:
        key = self.keys.lease(name)
        self._call(lambda: self.client.eval(GIVE_BACK_LUA, 1, key, holder))

    def _closes_of(self, letters: Sequence[DeadLetter]) -> list[tuple[str, int | None]]:
        return [(letter.task_id, letter.position) for letter in letters if letter.task_id]

    def ledger_now(self) -> datetime:
        """The server's clock (TIME), which NOTE_LUA stamps entries by. A Redis Cluster's
        answer comes from one of its masters: their clocks are the store's, kept together by
        whoever runs them, unlike every publisher's."""
        seconds, microseconds = self._call(self.client.time)
        return datetime.fromtimestamp(seconds + microseconds / 1_000_000, UTC)

    def count_unrecorded(self, *, published_before: datetime) -> int:
        live_since = _ms(self.ledger_now()) - self.ledger_ttl_seconds * 1000

        def count() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for ledger in self.keys.ledgers():
                pipe.zcount(ledger, live_since, f"({_ms(published_before)}")
            return pipe.execute()

        return sum(int(found) for found in self._call(count))

    def unrecorded(self, *, published_before: datetime) -> Iterator[LedgerEntry]:
        """Every ledger's entries (a Redis Cluster's store has one per shard) merged by the time
        the store noted them; those past the time to live are not read, as NOTE_LUA would have
        forgotten them (a shard forgets only as it is written to)."""
        live_since = _ms(self.ledger_now()) - self.ledger_ttl_seconds * 1000
        ledgers = [
            self._unrecorded_in(ledger, published_before, live_since)
            for ledger in self.keys.ledgers()
        ]
        if len(ledgers) == 1:
            return ledgers[0]
        return heapq.merge(*ledgers, key=lambda entry: (entry.noted_at, entry.write_id))

    def _unrecorded_in(
        self, ledger: str, published_before: datetime, live_since: int
    ) -> Iterator[LedgerEntry]:
        """Pages by noted time (not by offset, which entries closed meanwhile would shift);
        an entry whose task hash has expired is forgotten on the way."""
        low: str | float = live_since
        seen: set[bytes] = set()  # members yielded already whose score is `low`
        while True:
            wanted = LEDGER_PAGE + len(seen)

            def read(low: str | float = low, wanted: int = wanted) -> Any:
                return self.client.zrangebyscore(
                    ledger, low, f"({_ms(published_before)}", 0, wanted, withscores=True
                )

            page = cast("list[tuple[bytes, float]]", self._call(read))
            fresh = {member.decode(): score for member, score in page if member not in seen}
            yield from self._entries(ledger, fresh)
            if not fresh or len(page) < wanted:
                return
            top = page[-1][1]
            if top != low:
                seen = set()
            seen |= {member for member, score in page if score == top}
            low = top

    def _entries(self, ledger: str, write_ids: dict[str, float]) -> Iterator[LedgerEntry]:
        """The entries of `write_ids` (each with its score: when the store noted it)."""
        by_task: dict[str, list[str]] = defaultdict(list)
        for write_id in write_ids:
            task_id, position = task_and_position(write_id)
            by_task[task_id].append(position)

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for task_id, positions in by_task.items():
                pipe.hmget(self.keys.ledger_task(task_id), positions)
            return pipe.execute()

        found: dict[str, LedgerEntry] = {}
        gone: list[str] = []
        for (task_id, positions), values in zip(by_task.items(), self._call(read), strict=True):
            for position, value in zip(positions, values, strict=True):
                if value is None:
                    gone.append(f"{task_id}:{position}")
                else:
                    entry = LedgerEntry.model_validate_json(value)
                    noted_at = _from_ms(write_ids[f"{task_id}:{position}"])
                    found[entry.write_id] = entry.model_copy(update={"noted_at": noted_at})
        if gone:  # closed since the page was read, or expired: forget the expired ones
            still = self._call(lambda: self.client.zmscore(ledger, gone))
            expired = [
                write_id for write_id, score in zip(gone, still, strict=True) if score is not None
            ]
            if expired:
                self._call(lambda: self.client.zrem(ledger, *expired))
        for write_id in write_ids:
            if write_id in found:
                yield found[write_id]
