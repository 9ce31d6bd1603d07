"""How RedisStore records a batch: in one round trip on one server, in three steps on a Redis
Cluster, where a Lua script may only touch keys of one slot.

On one server (KeyLayout), RECORD_LUA with its steps: one script call per chunk of attempts,
all in one pipeline after the batch's letters; each call checks drift, writes its attempts'
outcomes, entries, write ids and alerts, and closes their ledger entries together.

On a Redis Cluster the keys are in SHARDS shards (keys.ClusterKeyLayout) and a batch is
recorded in three steps, each one pipeline per master (routing.ClusterRouter):

1. drift: each valid attempt's (contract version, case ID) pair checks its required set in the
   pair's shard (DRIFT_LUA), and notes what it found under the write id for a day, so that a
   worker killed before step 2 replays the same finding;
2. record: RECORD_LUA without its steps, per hash shard, given what step 1 found; the case
   index is kept in pieces, one per shard, each written with its hashes' outcomes;
3. finish: the ledger entries' close (one call per task, in the task's shard) and the drift
   notes' removal (one DEL per shard).

Every step is idempotent under the write id, and the worker acknowledges a message only after
record_many() returned, so a worker killed between steps leaves the message to a redelivery,
which replays what is done and does the rest.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic_core import to_json

from contracts import Attempt
from worker.stores.codec import DRIFTED_TAIL, required_set_json, script_args
from worker.stores.contract import DeadLetter, recorded_ms, task_and_position
from worker.stores.redis import lua
from worker.stores.redis.keys import ClusterKeyLayout, KeyLayout
from worker.stores.redis.routing import ClusterRouter, Command, Scripts, SingleRouter

T = TypeVar("T")

MAX_ALERTS = 10_000
RECORD_LUA = lua.source("record")
DRIFT_LUA = lua.source("cluster_drift")
# Attempts per script call: Redis runs one call at a time, so a huge batch is cut into calls
# of a few milliseconds each (still one round trip), leaving room for other clients between.
ATTEMPTS_PER_CALL = 200


@dataclass(frozen=True)
class Batch:
    """What record_many() was given, and what every step spells of it once."""

    items: Sequence[tuple[str, Attempt]]
    ids: Sequence[str | None]
    spelled: list[tuple[str, ...]]  # script_args() per attempt
    raised_at: str  # the time as JSON, an alert's raised_at
    orders: list[str]  # order_of(): the `n` of each attempt's alerts


class RecordSteps:
    """The record half of RedisStore (mixed in): needs its keys, scripts, router, limits,
    _call, dead_letter() and the letters' commands."""

    keys: KeyLayout
    layout: ClusterKeyLayout  # on a Redis Cluster only (_record_in_steps)
    scripts: Scripts
    router: SingleRouter | ClusterRouter
    ttl_seconds: int
    max_attempts_per_hash: int
    attempts_ttl_seconds: int

    if TYPE_CHECKING:

        def _call(self, operation: Callable[[], T]) -> T: ...  # RedisStore's

        def dead_letter(self, *letters: DeadLetter) -> None: ...  # RedisStore's

        def _letter_commands(self, letters: Sequence[DeadLetter]) -> list[Command]: ...

        def _closes(self, closes: Sequence[tuple[str, int | None]]) -> list[Command]: ...

    def _record_head(self, raised_at: str, *, steps: bool) -> list[Any]:
        """RECORD_LUA's arguments before the attempts' (see its comment)."""
        return [
            self.max_attempts_per_hash,
            self.ttl_seconds,
            MAX_ALERTS,
            raised_at,
            DRIFTED_TAIL,
            "1" if steps else "",
            self.attempts_ttl_seconds,
        ]

    def _record_at_once(
        self,
        items: Sequence[tuple[str, Attempt]],
        ids: Sequence[str | None],
        now: datetime,
        letters: Sequence[DeadLetter],
    ) -> list[Any]:
        """One server: one round trip for the batch, its letters first; Redis runs the scripts
        in order, one at a time.

        The letters share the round trip because a task's rejected messages are common (one
        batch in most has one) and a second round trip waits behind the other pool
        processes' scripts: it was 8% of a pool process's time in `bench`. One call records
        many attempts (one EVALSHA per attempt cost three times the client's CPU in `bench`),
        so the batch's keys span many Cluster slots: one server's plan only."""
        # raised_at as pydantic writes it in a whole Alert; steps: drift and ledger close in
        # the same call
        head = self._record_head(to_json(now).decode(), steps=True)
        keys_of = self.keys
        shared_keys = [keys_of.alert_streams()[0], keys_of.ledgers()[0]]
        commands = self._letter_commands(letters) if letters else []
        lead = len(commands)
        for start in range(0, len(items), ATTEMPTS_PER_CALL):
            end = start + ATTEMPTS_PER_CALL
            keys: list[str] = list(shared_keys)
            args: list[Any] = list(head)
            for (input_hash, attempt), write_id in zip(
                items[start:end], ids[start:end], strict=True
            ):
                keys += (
                    keys_of.outcome(input_hash),
                    keys_of.attempts(input_hash),
                    keys_of.ledger_task(task_and_position(write_id or "")[0]),
                    keys_of.contract(attempt.contract_version, attempt.case_id),
                    # No case ID: a key the script does not touch (it is given one per attempt).
                    keys_of.case(attempt.case_id or ""),
                )
                args += script_args(attempt)
                args += (write_id or "", recorded_ms(attempt), "", "")
            commands.append(self.scripts.call("record", keys, args))
        replies = self._call(lambda: self.router.run(commands))
        return [reply for chunk in replies[lead:] for reply in chunk]

    def _record_in_steps(
        self,
        items: Sequence[tuple[str, Attempt]],
        ids: Sequence[str | None],
        now: datetime,
        letters: Sequence[DeadLetter],
    ) -> list[Any]:
        """A Redis Cluster: the three steps of the module's docstring, each one pipeline per
        master; `letters` go before them, in dead_letter()'s own round trip (their streams are
        spread over the masters)."""
        self.dead_letter(*letters)
        batch = Batch(
            items,
            ids,
            spelled=[script_args(attempt) for _, attempt in items],  # once, for both steps
            raised_at=to_json(now).decode(),
            orders=order_of(len(items)),
        )
        found = self._call(lambda: self._check_drift(batch))
        replies = self._call(lambda: self._record_shards(batch, found))
        self._call(lambda: self._finish(items, ids, replies))
        return replies

    def _check_drift(self, batch: Batch) -> list[str]:
        """Step 1: what the drift check found per attempt ('' for one it does not apply to)."""
        items, ids, spelled = batch.items, batch.ids, batch.spelled
        by_shard: dict[str, list[int]] = defaultdict(list)
        contracts: dict[int, str] = {}
        for index, (_, attempt) in enumerate(items):
            if spelled[index][8]:  # required_set_json(): a valid row with version and case
                key = self.layout.contract(attempt.contract_version, attempt.case_id)
                contracts[index] = key
                by_shard[self.layout.alerts_in(key)].append(index)
        commands: list[Command] = []
        chunks: list[list[int]] = []
        for stream, indexes in by_shard.items():
            for start in range(0, len(indexes), ATTEMPTS_PER_CALL):
                chunk = indexes[start : start + ATTEMPTS_PER_CALL]
                keys = [stream]
                args: list[Any] = [self.ttl_seconds, MAX_ALERTS, batch.raised_at]
                for index in chunk:
                    input_hash = items[index][0]
                    write = ids[index] or ""
                    keys += (contracts[index], self.layout.drift_memo(contracts[index], write))
                    own = spelled[index]
                    args += (own[8], input_hash, own[0], own[1], own[7], write)
                    args.append(batch.orders[index])
                commands.append(self.scripts.call("drift", keys, args))
                chunks.append(chunk)
        found = [""] * len(items)
        for chunk, reply in zip(chunks, self.router.run(commands), strict=True):
            for index, text in zip(chunk, reply, strict=True):
                found[index] = text.decode() if isinstance(text, bytes) else str(text)
        return found

    def _record_shards(self, batch: Batch, found: list[str]) -> list[list[Any]]:
        """Step 2: RECORD_LUA per hash shard, in the batch's order within each shard."""
        items, ids, spelled = batch.items, batch.ids, batch.spelled
        by_shard: dict[str, list[int]] = defaultdict(list)
        for index, (input_hash, _) in enumerate(items):
            by_shard[self.layout.alerts_in(self.layout.outcome(input_hash))].append(index)
        head = self._record_head(batch.raised_at, steps=False)  # step 1 checked drift, 3 closes
        commands: list[Command] = []
        chunks: list[list[int]] = []
        for stream, indexes in by_shard.items():
            for start in range(0, len(indexes), ATTEMPTS_PER_CALL):
                chunk = indexes[start : start + ATTEMPTS_PER_CALL]
                keys = [stream, stream]  # the ledger's place: not touched without steps
                args = list(head)
                for index in chunk:
                    input_hash, attempt = items[index]
                    outcome = self.layout.outcome(input_hash)
                    # No case ID: a key the script does not touch (it is given one per attempt).
                    case = self.layout.case_in(outcome, attempt.case_id or "")
                    keys += (outcome, self.layout.attempts(input_hash), outcome, outcome, case)
                    args += spelled[index]
                    args += (
                        ids[index] or "",
                        recorded_ms(attempt),
                        found[index],
                        batch.orders[index],
                    )
                commands.append(self.scripts.call("record", keys, args))
                chunks.append(chunk)
        replies: list[list[Any]] = [[] for _ in items]
        for chunk, reply in zip(chunks, self.router.run(commands), strict=True):
            for index, one in zip(chunk, reply, strict=True):
                replies[index] = one
        return replies

    def _finish(
        self,
        items: Sequence[tuple[str, Attempt]],
        ids: Sequence[str | None],
        replies: list[list[Any]],
    ) -> None:
        """Step 3: close each task's ledger entries, drop the drift notes of each shard."""
        closes: list[tuple[str, int | None]] = []
        memos: dict[str, list[str]] = defaultdict(list)
        for (_, attempt), write in zip(items, ids, strict=True):
            if write:
                task_id, position = task_and_position(write)
                closes.append((task_id, int(position)))
                if required_set_json(attempt):
                    contract = self.layout.contract(attempt.contract_version, attempt.case_id)
                    memos[self.layout.alerts_in(contract)].append(
                        self.layout.drift_memo(contract, write)
                    )
        commands = self._closes(closes)
        commands += [Command(shard[0], ("DEL", *shard)) for shard in memos.values()]
        self.router.run(commands)


def order_of(count: int) -> list[str]:
    """The `n` field of each of `count` entries written together: this worker's clock in
    nanoseconds, then the entry's place, as text that sorts as the numbers do. Several masters'
    streams have no common order; entries of one time (raised_at, received_at) are read back
    in the order their writer gave them (redis.newest_first_key)."""
    now = f"{time.time_ns():020d}"
    return [f"{now}{index:06d}" for index in range(count)]
