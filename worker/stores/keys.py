"""Every Redis key name in one place. Per-hash keys share a hash tag, so a hash's outcome and
attempts would sit in one Redis Cluster slot; the store's batch script touches many hashes at
once, though, so it runs on one Redis. The alert and dead-letter streams are global."""

from __future__ import annotations

import hashlib
from json.encoder import encode_basestring_ascii  # what json.dumps() spells a str with


def outcome_key(prefix: str, input_hash: str) -> str:
    """HASH: outcome (outcome_json() of the first attempt), first (the whole first attempt's
    JSON), shared (its shared_json(); absent where an earlier version wrote the hash), total,
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
    """LIST of attempt entries (worker/stores/attempts.py), newest last, trimmed to the bound."""
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
    score the publish time in milliseconds since the epoch (worker/stores/ledger.py)."""
    return f"{prefix}:ledger"


def ledger_task_key(prefix: str, task_id: str) -> str:
    """HASH of one task's open ledger entries: field the message's position, value the
    LedgerEntry JSON; expires after EVIDENCE_LEDGER_TTL_SECONDS. Redis deletes it when its
    last entry is closed."""
    return f"{prefix}:ledger:task:{task_id}"
