"""The shared store on Redis: one Lua script per attempt, pipelined per batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import redis
from pydantic import BaseModel
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from contracts import Alert, Attempt
from worker.errors import ConfigurationError, TransientError
from worker.settings import REDIS_URL_HINT, masked_url
from worker.stores.attempts import Expander, script_args
from worker.stores.base import DeadLetter, History, Recorded
from worker.stores.keys import (
    alerts_key,
    attempts_key,
    dead_letters_key,
    deliveries_key,
    hash_from_outcome_key,
    outcome_key,
)

MAX_ALERTS = 10_000
MAX_DEAD_LETTERS = 10_000
DELIVERY_COUNT_TTL_SECONDS = 86_400
SCAN_BATCH = 500

# KEYS: outcome hash and attempts list of each attempt in turn. ARGV: attempt bound, ttl
# (0: none), then the script_args() of each attempt in turn: its case ID, task ID and time as
# JSON values, outcome_json(), outcome_members(), shared_json(). Returns, per attempt,
# {cache} on a miss, {cache, first attempt JSON} otherwise. Comparing the outcome strings inside
# the script is what makes "first writer wins" atomic; attempts are recorded in order, so two
# with one hash in a batch behave as if sent one after the other. Entries and the first attempt
# are assembled exactly as entry() and whole() in worker/stores/attempts.py do.
# A hash written before `shared` was kept has none: its entries keep their lists.
RECORD_LUA = """
local bound, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local replies = {}
for i = 1, #KEYS / 2 do
  local outcome_key, attempts_key = KEYS[2 * i - 1], KEYS[2 * i]
  local at = 2 + 6 * (i - 1)
  local case_id, task_id, recorded_at = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local outcome, outcome_members, shared = ARGV[at + 4], ARGV[at + 5], ARGV[at + 6]
  local entry = '[' .. case_id .. ',' .. task_id .. ',' .. recorded_at
  local first = redis.call('HMGET', outcome_key, 'outcome', 'shared')
  local cache = 'miss'
  if first[1] then
    redis.call('HINCRBY', outcome_key, 'total', 1)
    local differing = {}
    if first[1] == outcome then
      cache = 'hit'
    else
      cache = 'conflict'
      differing[#differing + 1] = outcome_members
    end
    if first[2] ~= shared then differing[#differing + 1] = shared end
    if #differing > 0 then entry = entry .. ',{' .. table.concat(differing, ',') .. '}' end
  else
    local whole = '{"case_id":' .. case_id .. ',"task_id":' .. task_id .. ',"recorded_at":'
      .. recorded_at .. ',' .. outcome_members .. ',' .. shared .. '}'
    redis.call('HSET', outcome_key, 'outcome', outcome, 'first', whole, 'shared', shared,
      'total', 1)
    -- a new first outcome (only possible after expiry) starts a new history
    redis.call('DEL', attempts_key)
  end
  redis.call('RPUSH', attempts_key, entry .. ']')
  redis.call('LTRIM', attempts_key, -bound, -1)
  if cache == 'miss' then
    if ttl > 0 then
      redis.call('EXPIRE', outcome_key, ttl)
      redis.call('EXPIRE', attempts_key, ttl)
    end
    replies[i] = {cache}
  else
    replies[i] = {cache, redis.call('HGET', outcome_key, 'first')}
  end
end
return replies
"""
# Attempts per script call: Redis runs one call at a time, so a huge batch is cut into calls
# of a few milliseconds each (still one round trip), leaving room for other clients between.
ATTEMPTS_PER_CALL = 200

T = TypeVar("T")


class RedisStore:
    """ResultStore on one Redis server (keys carry per-hash tags, see keys.py)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "evidence",
        max_attempts_per_hash: int = 100,
        ttl_seconds: int | None = None,
        name: str | None = None,
    ) -> None:
        self.client = client
        # How messages name the store: its URL without the password.
        self.name = name or f"redis database {client.connection_pool.connection_kwargs.get('db')}"
        self.prefix = prefix
        self.max_attempts_per_hash = max_attempts_per_hash
        self.ttl_seconds = ttl_seconds or 0
        self._record: Script = client.register_script(RECORD_LUA)

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **options: Any
    ) -> RedisStore:
        """A store on the server at `url`; `client_options` go to redis-py (TLS, say), where
        ssl_* query parameters in the URL win over them."""
        client = redis.Redis.from_url(
            url,
            socket_timeout=10,
            socket_connect_timeout=5,
            health_check_interval=30,
            **(client_options or {}),
        )
        return cls(client, name=masked_url(url), **options)

    def _call(self, operation: Callable[[], T]) -> T:
        """Run a Redis operation: a server that is away for now is a TransientError (retried);
        one that will never take us as configured is a ConfigurationError."""
        try:
            return operation()
        except redis.AuthenticationError as error:
            raise ConfigurationError(
                f"store {self.name}: Redis refused the login: {error}"
            ) from None
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as error:
            raise TransientError(f"Redis unreachable: {error}") from error
        except redis.ResponseError as error:
            if "DB index is out of range" not in str(error):
                raise
            raise ConfigurationError(
                f"store {self.name}: the Redis server has no such database: {REDIS_URL_HINT}"
            ) from None

    def record(self, input_hash: str, attempt: Attempt, *, now: datetime) -> Recorded:
        return self.record_many([(input_hash, attempt)], now=now)[0]

    def record_many(self, items: Sequence[tuple[str, Attempt]], *, now: datetime) -> list[Recorded]:
        """One round trip for the batch; Redis runs the scripts in order, one at a time."""
        if not items:
            return []
        calls = []
        for start in range(0, len(items), ATTEMPTS_PER_CALL):
            chunk = items[start : start + ATTEMPTS_PER_CALL]
            keys: list[str] = []
            args: list[Any] = [self.max_attempts_per_hash, self.ttl_seconds]
            for input_hash, attempt in chunk:
                keys += (
                    outcome_key(self.prefix, input_hash),
                    attempts_key(self.prefix, input_hash),
                )
                args += script_args(attempt)
            calls.append((keys, args))
        replies = [
            reply for chunk in self._call(lambda: self._run_scripts(calls)) for reply in chunk
        ]
        results = [
            self._recorded(input_hash, attempt, reply, now)
            for (input_hash, attempt), reply in zip(items, replies, strict=True)
        ]
        alerts = [result.alert for result in results if result.alert is not None]
        if alerts:
            self._call(lambda: self._add_alerts(alerts))
        return results

    def _run_scripts(self, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """EVALSHA each call in one pipeline. redis-py's Script in a pipeline would first ask
        SCRIPT EXISTS on every execute (a second round trip); we load only on NOSCRIPT and
        re-run just the calls that failed, so no attempt is ever recorded twice.

        One call records many attempts (one EVALSHA per attempt cost three times the client's
        CPU in `bench`), so the batch's keys span many Cluster slots: this store is for a
        single Redis (with replicas), as its plain client already was.
        """
        replies: list[Any] = [None] * len(calls)
        pending = list(range(len(calls)))
        for _ in range(2):
            pipe = self.client.pipeline(transaction=False)
            for index in pending:
                keys, args = calls[index]
                pipe.evalsha(self._record.sha, len(keys), *keys, *args)
            results = pipe.execute(raise_on_error=False)
            missing = []
            for index, result in zip(pending, results, strict=True):
                if isinstance(result, NoScriptError):
                    missing.append(index)
                elif isinstance(result, Exception):
                    raise result
                else:
                    replies[index] = result
            if not missing:
                return replies
            self.client.script_load(RECORD_LUA)
            pending = missing
        raise TransientError("Redis keeps forgetting the record script (SCRIPT FLUSH loop?)")

    @staticmethod
    def _recorded(input_hash: str, attempt: Attempt, reply: list[bytes], now: datetime) -> Recorded:
        cache = reply[0].decode()
        if cache == "miss":
            return Recorded(cache="miss", first=attempt)
        if cache == "hit":
            return Recorded(cache="hit", first=reply[1])
        first = Attempt.model_validate_json(reply[1])
        alert = Alert(input_hash=input_hash, first=first, observed=attempt, raised_at=now)
        return Recorded(cache="conflict", first=first, alert=alert)

    def _add_alerts(self, alerts: Sequence[Alert]) -> None:
        self._append(alerts_key(self.prefix), "alert", alerts, maxlen=MAX_ALERTS)

    def _append(self, key: str, field: str, entries: Sequence[BaseModel], *, maxlen: int) -> None:
        """XADD each entry's JSON to a bounded stream, in order, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for entry in entries:
            pipe.xadd(key, {field: entry.model_dump_json()}, maxlen=maxlen, approximate=True)
        pipe.execute()

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        pattern = outcome_key(self.prefix, "*")
        keys = [
            key.decode() for key in self._call(lambda: list(self.client.scan_iter(pattern, 1000)))
        ]
        for start in range(0, len(keys), SCAN_BATCH):
            chunk = keys[start : start + SCAN_BATCH]

            def fetch(chunk: list[str] = chunk) -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                for key in chunk:
                    pipe.hget(key, "first")
                return pipe.execute()

            for key, first in zip(chunk, self._call(fetch), strict=True):
                if first is not None:  # expired between the scan and the read
                    yield (
                        hash_from_outcome_key(self.prefix, key),
                        Attempt.model_validate_json(first),
                    )

    def history(self, input_hash: str) -> History | None:
        def run() -> tuple[dict[bytes, bytes], list[bytes], int]:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(outcome_key(self.prefix, input_hash))
            pipe.lrange(attempts_key(self.prefix, input_hash), 0, -1)
            pipe.pttl(outcome_key(self.prefix, input_hash))
            fields, attempts, ttl_ms = pipe.execute()
            return fields, attempts, ttl_ms

        fields, attempts, ttl_ms = self._call(run)
        if not fields:
            return None
        # PTTL is -1 for a key kept forever; report expiry as the SQLite store does.
        expires_at = datetime.now(UTC) + timedelta(milliseconds=ttl_ms) if ttl_ms > 0 else None
        first = Attempt.model_validate_json(fields[b"first"])
        return History(
            input_hash=input_hash,
            first=first,
            attempts=Expander(first).attempts(attempts),
            total_attempts=int(fields[b"total"]),
            expires_at=expires_at,
        )

    def _newest(self, stream: str, field: bytes, limit: int) -> list[bytes]:
        """The newest `limit` entries' `field`, oldest first."""
        if limit <= 0:  # XREVRANGE rejects COUNT 0; the SQLite store returns nothing
            return []
        entries = cast(
            "list[tuple[bytes, dict[bytes, bytes]]]",
            self._call(lambda: self.client.xrevrange(stream, count=limit)),
        )
        return [fields[field] for _, fields in reversed(entries)]

    def alerts(self, limit: int = 100) -> list[Alert]:
        return [
            Alert.model_validate_json(text)
            for text in self._newest(alerts_key(self.prefix), b"alert", limit)
        ]

    def alert_count(self) -> int:
        return int(self._call(lambda: self.client.xlen(alerts_key(self.prefix))))

    def dead_letter(self, *letters: DeadLetter) -> None:
        if letters:
            self._call(
                lambda: self._append(
                    dead_letters_key(self.prefix), "letter", letters, maxlen=MAX_DEAD_LETTERS
                )
            )

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return [
            DeadLetter.model_validate_json(text)
            for text in self._newest(dead_letters_key(self.prefix), b"letter", limit)
        ]

    def count_delivery(self, task_id: str) -> int:
        key = deliveries_key(self.prefix, task_id)

        def run() -> int:
            pipe = self.client.pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, DELIVERY_COUNT_TTL_SECONDS)
            count, _ = pipe.execute()
            return int(count)

        return self._call(run)

    def close(self) -> None:
        self.client.close()
