"""Every Redis key name in one place, in two layouts.

On one Redis (KeyLayout, the names every earlier version wrote) the alert, dead-letter and
ledger keys are global and a hash's keys carry the hash as their tag. On a Redis Cluster
(ClusterKeyLayout) a Lua script may only touch keys of one slot, so every key belongs to one of
SHARDS shards, named by a hash tag of its own: a hash's outcome, attempts and case index entry
and the alert stream its conflicts go to share the hash's shard; a (contract version, case ID)
pair's first required set, its drift alerts and its write memos share the pair's; a task's
ledger entries and dead letters share the task's. Shards spread evenly over the masters (a
shard is a slot, the unit resharding moves), and the readers merge the shards' streams in time
order."""

from __future__ import annotations

import hashlib
from json.encoder import encode_basestring_ascii  # what json.dumps() spells a str with


def outcome_key(prefix: str, input_hash: str) -> str:
    """HASH: first (the whole first attempt's JSON, worker.stores.codec.whole()), outcome
    and shared (its outcome_json() and shared_json(): kept only where an earlier version wrote
    the hash; a compact first, one that keeps answer_length, holds both in itself), total,
    one field per recent write id, `w0:<id>` or `w1:<id>` (two generations of the attempt
    bound each, see RECORD_LUA): what that write found, `miss`, `hit`, `conflict` (a conflict
    alerted before) or its alert's JSON, and beside it `w0:<id>#d` when that write found
    contract drift (`1`, or the drift alert's JSON when it raised it); and one field per
    conflict alerted, `a:<the observed outcome_json()>`, so each is raised once; `since`, the
    first attempt's recorded_at in milliseconds (case_key's scores start there; absent where an
    earlier version wrote the hash).

    The write ids sit in the outcome's own hash so that they expire with it and go with it
    when a new first outcome starts a new history, and cost the script no key of their own.
    RECORD_LUA reads the input hash back out of this key for an alert: it must stay the last
    `{...}` before `:outcome`."""
    return f"{prefix}:{{{input_hash}}}:outcome"


def hash_from_outcome_key(prefix: str, key: str) -> str:
    """The input hash inside an outcome key (the inverse of outcome_key)."""
    return key.removeprefix(f"{prefix}:{{").removesuffix("}:outcome")


def attempts_key(prefix: str, input_hash: str) -> str:
    """LIST of attempt entries (worker/stores/codec.py), newest last, trimmed to the bound.
    Under a compact first only the later attempts' (created by the first of them, expiring
    with the outcome); under an earlier version's first its own entry too."""
    return f"{prefix}:{{{input_hash}}}:attempts"


def contract_key(prefix: str, contract_version: str | None, case_id: str | None) -> str:
    """HASH per (contract version, case ID), for contract drift (SPEC §9): `required` (the
    first valid row's sorted required claim IDs as JSON), `input_hash` and `task_id` (its
    hash, and its task ID as JSON), and one field per drift seen, `drift:<the other set's
    JSON>`: that drift's alert JSON, so that it is raised once. The pair is hashed
    into the name: both are free text."""
    pair = f"[{_json(contract_version)}, {_json(case_id)}]"  # json.dumps([version, case_id])
    return f"{prefix}:contract:{_digest(pair)}"


def case_key(prefix: str, case_id: str) -> str:
    """SORTED SET per case ID, for `show --case` (SPEC §9, looking a row up): member every
    input hash an attempt of that case was recorded under, score the time (milliseconds since
    the epoch, the attempt's recorded_at) that case first recorded it in the hash's current
    history (RECORD_LUA). The case ID is hashed into the name, as contract_key's pair is: it
    is free text."""
    return f"{prefix}:case:{_digest(_json(case_id))}"


def _json(text: str | None) -> str:
    # json.dumps' own spelling (ASCII, surrogates escaped), without its encoder's set-up per
    # call: these names exist in stores already, so the spelling must not change.
    return "null" if text is None else encode_basestring_ascii(text)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def alerts_key(prefix: str) -> str:
    """STREAM of alerts of both kinds (field `alert`: the alert JSON), appended by RECORD_LUA
    in the call that records the conflicting attempt (which is why the store is single-Redis:
    this key has no hash tag, so it shares no Cluster slot with the hash's keys)."""
    return f"{prefix}:alerts"


def dead_letters_key(prefix: str) -> str:
    """STREAM of rejected messages (field `letter`: the DeadLetter JSON)."""
    return f"{prefix}:dead-letters"


def deliveries_key(prefix: str, task_id: str) -> str:
    """INTEGER: how often a redelivered task id has been seen; expires after a day."""
    return f"{prefix}:deliveries:{task_id}"


def ledger_key(prefix: str) -> str:
    """SORTED SET of open publish-ledger entries: member the write id (task ID:position),
    score the publish time in milliseconds since the epoch (worker/stores/contract.py)."""
    return f"{prefix}:ledger"


def ledger_task_key(prefix: str, task_id: str) -> str:
    """HASH of one task's open ledger entries: field the message's position, value the
    LedgerEntry JSON; expires after EVIDENCE_LEDGER_TTL_SECONDS. Redis deletes it when its
    last entry is closed."""
    return f"{prefix}:ledger:task:{task_id}"


def lease_key(prefix: str, name: str) -> str:
    """STRING: the holder of the lease `name` (Ledger.take_lease); expires with the lease."""
    return f"{prefix}:lease:{name}"


def replication_mark_key(prefix: str) -> str:
    """STRING `1`: set by every write that waits for replicas, just before its WAIT
    (worker/stores/redis/replicas.py), so that the WAIT covers every earlier write; expires an hour
    after the last."""
    return f"{prefix}:replication-mark"


# Shards on a Redis Cluster: each is one slot, so at most this many masters share the work.
# Never change it for an existing store: keys are found by their shard.
SHARDS = 256


def shard_of(text: str) -> str:
    """The shard a key belongs to, as its hash tag's text: the first two hex digits of the
    SHA-256 of `text` (an input hash, a task ID)."""
    return _digest(text)[:2]


class KeyLayout:
    """The names on one Redis: the module's functions, as every earlier version wrote them."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def outcome(self, input_hash: str) -> str:
        return outcome_key(self.prefix, input_hash)

    def attempts(self, input_hash: str) -> str:
        return attempts_key(self.prefix, input_hash)

    def outcome_pattern(self) -> str:
        return outcome_key(self.prefix, "*")

    def hash_from_outcome(self, key: str) -> str:
        return hash_from_outcome_key(self.prefix, key)

    def contract(self, contract_version: str | None, case_id: str | None) -> str:
        return contract_key(self.prefix, contract_version, case_id)

    def case(self, case_id: str) -> str:
        return case_key(self.prefix, case_id)

    def case_pieces(self, case_id: str) -> list[str]:
        """The case index's pieces: one on one server (one per shard on a Redis Cluster)."""
        return [self.case(case_id)]

    def alert_streams(self) -> list[str]:
        return [alerts_key(self.prefix)]

    def dead_letter_streams(self) -> list[str]:
        return [dead_letters_key(self.prefix)]

    def dead_letters_of(self, task_id: str | None) -> str:
        return dead_letters_key(self.prefix)

    def ledgers(self) -> list[str]:
        return [ledger_key(self.prefix)]

    def ledger_of(self, task_id: str) -> str:
        return ledger_key(self.prefix)

    def ledger_task(self, task_id: str) -> str:
        return ledger_task_key(self.prefix, task_id)

    def deliveries(self, task_id: str) -> str:
        return deliveries_key(self.prefix, task_id)

    def lease(self, name: str) -> str:
        return lease_key(self.prefix, name)


class ClusterKeyLayout(KeyLayout):
    """The names on a Redis Cluster: `<prefix>:{<shard>}:...`, the shard as the hash tag.

    A per-hash key keeps the hash in braces after the tag (Redis hashes only the first
    `{...}`), so RECORD_LUA reads the hash out of an outcome key in both layouts."""

    def _in(self, shard: str) -> str:
        return f"{self.prefix}:{{{shard}}}"

    @staticmethod
    def _beside(key: str) -> str:
        """The `<prefix>:{<shard>}` part of a key: what names another key in its shard."""
        return f"{key.split('}', 1)[0]}}}"

    def outcome(self, input_hash: str) -> str:
        return f"{self._in(shard_of(input_hash))}:{{{input_hash}}}:outcome"

    def attempts(self, input_hash: str) -> str:
        return f"{self._in(shard_of(input_hash))}:{{{input_hash}}}:attempts"

    def outcome_pattern(self) -> str:
        return f"{self.prefix}:{{*}}:{{*}}:outcome"

    def hash_from_outcome(self, key: str) -> str:
        return key.rsplit("{", 1)[1].removesuffix("}:outcome")

    def contract(self, contract_version: str | None, case_id: str | None) -> str:
        digest = contract_key("", contract_version, case_id).rsplit(":", 1)[1]
        return f"{self._in(digest[:2])}:contract:{digest}"

    def drift_memo(self, contract: str, write_id: str) -> str:
        """STRING: what the drift check found for one write id (record_steps.py), in the
        contract key's shard, kept a day: a worker that dies between the drift check and the
        record replays the same verdict."""
        return f"{contract}:w:{write_id}"

    def case_in(self, key: str, case_id: str) -> str:
        """The case index's piece in the shard of `key` (an outcome key): RECORD_LUA indexes a
        hash under its case in the call that records it, so each shard keeps its own piece."""
        return f"{self._beside(key)}:case:{_digest(_json(case_id))}"

    def case_pieces(self, case_id: str) -> list[str]:
        digest = _digest(_json(case_id))
        return [f"{self._in(shard)}:case:{digest}" for shard in _SHARD_NAMES]

    def replication_mark_in(self, key: str) -> str:
        """keys.replication_mark_key() in the shard of `key`: a WAIT's mark must be on the
        master that took the writes it covers."""
        return f"{self._beside(key)}:replication-mark"

    def alerts_in(self, key: str) -> str:
        """The alert stream in the shard of `key` (an outcome or contract key)."""
        return f"{self._beside(key)}:alerts"

    def alert_streams(self) -> list[str]:
        return [f"{self._in(shard)}:alerts" for shard in _SHARD_NAMES]

    def dead_letter_streams(self) -> list[str]:
        return [f"{self._in(shard)}:dead-letters" for shard in _SHARD_NAMES]

    def dead_letters_of(self, task_id: str | None) -> str:
        return f"{self._in(shard_of(task_id or ''))}:dead-letters"

    def ledgers(self) -> list[str]:
        return [f"{self._in(shard)}:ledger" for shard in _SHARD_NAMES]

    def ledger_of(self, task_id: str) -> str:
        return f"{self._in(shard_of(task_id))}:ledger"

    def ledger_task(self, task_id: str) -> str:
        return f"{self._in(shard_of(task_id))}:ledger:task:{task_id}"

    def deliveries(self, task_id: str) -> str:
        return f"{self._in(shard_of(task_id))}:deliveries:{task_id}"

    def lease(self, name: str) -> str:
        return f"{self._in(shard_of(name))}:lease:{name}"


_SHARD_NAMES = [f"{shard:02x}" for shard in range(SHARDS)]
