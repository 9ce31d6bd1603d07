"""How both stores keep attempts: the first whole, each entry as what sets it apart from the first.

Re-scoring an input mostly confirms it: a hit has the first's outcome by definition and, as a
rule, the first's claim ID lists and versions. An entry therefore stores an attempt's own
fields (case ID, task ID, time) and only those other fields that differ from the first's:

    ["case-7", "task-9", "2026-12-04T10:00:00Z"]                   everything else: the first's
    ["case-7", "task-9", "2026-12-04T10:00:00Z", {"value": ...}]   the members given differ

What a store keeps is compact (issue 24): a citation is an array, missing_claim_ids and
findings are left out where they are what triage derives from the rest (derivable(); the
attempt keeps triage's inputs, answer_length and expected_evidence, and Attempt._derived
derives them on read), and a first attempt is kept once, with no copy of its outcome or
shared members and no entry of its own (kept_comparands(), with_first()). On the bench's mix
that took a Redis store from 3,715 to 1,838 bytes a message and SQLite from 3,639 to 1,371.

A JSON object entry is a whole attempt, as versions before this encoding wrote every entry;
both kinds read back as the same Attempt. Fields compare in two groups, each by one string:
the outcome by outcome_json() (the definition of "same outcome") and the shared fields
(claim ID lists, versions, redelivered) by shared_json(), or same_shared_fields(), which says
the same without building the strings. The Redis script builds entries from the same pieces,
in Lua (record.lua), and names no field itself: the keys it spells or looks for are the
constants lua_header() writes from the field lists here; a store test checks that both stores
write the same strings.

This module is the only definition of how a store spells what it keeps: an attempt (above), a
first attempt's row (first_rows()), an alert of nondeterminism (alert_json()) and a dead letter
(letter_json(), read_letter()).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses
from operator import attrgetter
from typing import Any, Final

import orjson
from pydantic_core import to_json

from contracts import Alert, Attempt
from contracts.outcomes import value_json
from contracts.record_models import KeptCitation
from contracts.triage import Finding
from worker.stores.contract import DeadLetter, outcome_json

# Every Attempt field is in one of three groups (a unit test checks it), each listed once here,
# in the order a store spells it: a field added to Attempt is added to its group's list and to
# the one function that spells the group (_shared_head_fields() for the shared ones, which a
# unit test holds to SHARED_HEAD_FIELDS' order). Everything else derives from these lists:
# same_shared_fields(), the keys a whole attempt is spelled with, and the constants the Redis
# script is given (lua_header()).
OWN_FIELDS: Final = ("case_id", "task_id", "recorded_at")
OUTCOME_FIELDS: Final = ("value", "reason")
# answer_length first: a compact first is told by it, and its shared members found by it and
# required_claim_ids (kept_comparands(), the Redis script). The grader's three names, and the
# observation window's two fields, are spelled together or not at all (shared_head()).
SHARED_HEAD_FIELDS: Final = (
    "answer_length",
    "required_claim_ids",
    "supported_claim_ids",
    "metric_version",
    "ragas_version",
    "worker_version",
    "redelivered",
    "contract_version",
    "citations",
    "missing_claim_ids",
    "findings",
    "retrieved_document_ids",
    "policy_group",
    "grader_name",
    "grader_version",
    "grader_model",
    "expected_evidence",
    "previous_policy_version",
    "previous_status",
)
# The end of the shared members, which the store changes when it finds contract drift.
DRIFT_FIELDS: Final = ("contract_drift", "owner")
SHARED_FIELDS: Final = (*SHARED_HEAD_FIELDS, *DRIFT_FIELDS)

# How whole() and the Redis script spell the keys of those fields.
OWN_KEYS: Final = tuple(("{" if i == 0 else ",") + f'"{n}":' for i, n in enumerate(OWN_FIELDS))
VALUE_KEY: Final = f'"{OUTCOME_FIELDS[0]}":'
REASON_KEY: Final = f',"{OUTCOME_FIELDS[1]}":'
COMPACT_KEY: Final = f'"{SHARED_HEAD_FIELDS[0]}":'
# Where a compact first (one whose shared_json() starts with answer_length) keeps its shared
# members: a store keeps no copy of them (the Redis script finds them the same way). Every
# member before them is a JSON string or number, in which a quote is escaped, so the first
# match is them; an attempt dumped whole by pydantic writes answer_length after owner, never
# before required_claim_ids.
SHARED_START_PARTS: Final = (f",{COMPACT_KEY}", f',"{SHARED_HEAD_FIELDS[1]}":')  # a number between
SHARED_START: Final = re.compile(
    re.escape(SHARED_START_PARTS[0]) + r"\d+" + re.escape(SHARED_START_PARTS[1])
)
DRIFT_KEYS: Final = tuple(f',"{name}":' for name in DRIFT_FIELDS)
_shared_values = attrgetter(*SHARED_FIELDS)


def own_json(attempt: Attempt) -> tuple[str, str, str]:
    """The JSON values of OWN_FIELDS, in order: the start of every entry."""
    return (
        _text_json(attempt.case_id),
        _text_json(attempt.task_id),
        to_json(attempt.recorded_at).decode(),  # as pydantic writes it in a whole attempt
    )


def outcome_members(attempt: Attempt) -> str:
    """The JSON object members (no braces) of OUTCOME_FIELDS, spelled as outcome_json() is."""
    return f"{VALUE_KEY}{value_json(attempt.value)}{REASON_KEY}{encode_basestring(attempt.reason)}"


def shared_json(attempt: Attempt) -> str:
    """The string two attempts must share for an entry to leave out the lists and versions: the
    JSON object members (no braces) of SHARED_FIELDS, spelled as json would.

    Those fields are text, integers, booleans and lists and objects of them, and this spelling
    is one-to-one (a citation's excerpt and a finding's evidence_retrieved are left out when
    None, and read back as None), so two strings are equal exactly when the values are
    (same_shared_fields() compares the same), before or after a round trip through a store.
    """
    return shared_head(attempt) + drift_tail(attempt)


def shared_head(attempt: Attempt) -> str:
    """shared_json() up to its last two members, which contract drift sets (drift_tail()).

    Compact, as stores keep it: a citation is an array [claim ID, document ID, span start, span
    end(, excerpt)]; answer_length comes first (the Redis script tells by it an attempt that
    keeps triage's inputs); missing_claim_ids and findings are left out where derivable()
    (they are derived on read, Attempt._derived), and answer_length, the grader's three names
    (set together, from the message's grader) and expected_evidence where None.

    orjson spells text exactly as json.dumps(ensure_ascii=False) does (every code point but
    the lone surrogates, which it refuses, as it refuses integers beyond 64 bits: those take
    the spelling in Python); the shared fields hold no float. Half the cost, on every attempt.
    """
    try:
        return orjson.dumps(_shared_head_fields(attempt))[1:-1].decode()
    except orjson.JSONEncodeError:
        return _shared_head_spelled(attempt)


def derivable(attempt: Attempt) -> bool:
    """Whether an attempt's missing_claim_ids and findings are what Attempt._derived derives
    from the rest of it: it keeps triage's inputs and triage ran on them (a valid row under a
    defined policy group, or an invalid row). A retrieved document ID with a lone surrogate
    (kept as its \\udXXX text) would not match its citations' raw text: kept as they are."""
    if attempt.answer_length is None or attempt.findings is None or attempt.citations is None:
        return False
    if attempt.value is None:
        return attempt.missing_claim_ids is None and not attempt.findings
    retrieved = attempt.retrieved_document_ids
    return (
        attempt.missing_claim_ids is not None
        and retrieved is not None
        and not any("\\ud" in document for document in retrieved)
    )


def _shared_head_fields(attempt: Attempt) -> dict[str, object]:
    citations = attempt.citations
    fields: dict[str, object] = {}
    if attempt.answer_length is not None:
        fields["answer_length"] = attempt.answer_length
    fields["required_claim_ids"] = attempt.required_claim_ids
    fields["supported_claim_ids"] = attempt.supported_claim_ids
    fields["metric_version"] = attempt.metric_version
    fields["ragas_version"] = attempt.ragas_version
    fields["worker_version"] = attempt.worker_version
    fields["redelivered"] = attempt.redelivered
    fields["contract_version"] = attempt.contract_version
    fields["citations"] = None if citations is None else list(map(_citation, citations))
    if not derivable(attempt):
        findings = attempt.findings
        fields["missing_claim_ids"] = attempt.missing_claim_ids
        fields["findings"] = None if findings is None else list(map(_finding, findings))
    fields["retrieved_document_ids"] = attempt.retrieved_document_ids
    fields["policy_group"] = attempt.policy_group
    if attempt.grader_name is not None:
        fields["grader_name"] = attempt.grader_name
        fields["grader_version"] = attempt.grader_version
        fields["grader_model"] = attempt.grader_model
    if attempt.expected_evidence is not None:
        fields["expected_evidence"] = attempt.expected_evidence
    if attempt.previous_status is not None:  # an observation window's (SPEC §12), set together
        fields["previous_policy_version"] = attempt.previous_policy_version
        fields["previous_status"] = attempt.previous_status
    return fields


def _citation(citation: KeptCitation) -> list[object]:
    start, end = citation.answer_span
    if citation.excerpt is None:
        return [citation.claim_id, citation.document_id, start, end]
    return [citation.claim_id, citation.document_id, start, end, citation.excerpt]


def _finding(finding: Finding) -> dict[str, object]:
    fields: dict[str, object] = {
        "claim_id": finding.claim_id,
        "finding": finding.finding,
        "owner": finding.owner,
        "document_ids": finding.document_ids,
    }
    if finding.evidence_retrieved is not None:
        fields["evidence_retrieved"] = finding.evidence_retrieved
    return fields


def _shared_head_spelled(attempt: Attempt) -> str:
    """shared_head() spelled by json, for what orjson refuses: the same members, which json
    spells as orjson does where orjson can (encode_basestring, compact separators)."""
    spelled = json.dumps(_shared_head_fields(attempt), ensure_ascii=False, separators=(",", ":"))
    return spelled[1:-1]


def drift_tail(attempt: Attempt) -> str:
    """The end of shared_json(): contract_drift and owner, which the store may change when it
    finds contract drift (drifted(); the Redis script appends DRIFTED_TAIL instead)."""
    drift = "true" if attempt.contract_drift else "false"
    return f"{DRIFT_KEYS[0]}{drift}{DRIFT_KEYS[1]}{_text_json(attempt.owner)}"


# A drifted attempt's tail: its owner is evaluation data whatever its findings (SPEC §9).
DRIFT_OWNER: Final = "evaluation-data"
DRIFTED_TAIL: Final = f"{DRIFT_KEYS[0]}true{DRIFT_KEYS[1]}{encode_basestring(DRIFT_OWNER)}"


def drifted(attempt: Attempt) -> Attempt:
    """The attempt as recorded when the store saw another required set for its (contract
    version, case ID): marked, and owned by evaluation data."""
    return attempt.model_copy(update=dict(zip(DRIFT_FIELDS, (True, DRIFT_OWNER), strict=True)))


def required_set_json(attempt: Attempt) -> str:
    """What contract drift compares: the sorted required claim IDs as a JSON array, for a
    valid attempt with a contract version and a case ID; "" for any other (no drift check:
    an invalid row's list is not a set)."""
    if attempt.value is None or attempt.contract_version is None or attempt.case_id is None:
        return ""
    return f"[{_texts_json(sorted(attempt.required_claim_ids))}]"


def same_shared_fields(first: Attempt, attempt: Attempt) -> bool:
    """Whether two attempts' SHARED_FIELDS are equal: exactly when their shared_json() is."""
    return _shared_values(first) == _shared_values(attempt)


def whole(attempt: Attempt) -> str:
    """The whole attempt as one JSON object: how a first attempt is kept (RECORD_LUA builds the
    same string from script_args())."""
    return _whole(own_json(attempt), attempt, shared_json(attempt))


def first_rows(attempt: Attempt) -> tuple[str, str, str, str]:
    """What a store keeps of a first attempt: whole(), outcome_json(), shared_json() and its own
    entry (entry() of an attempt that agrees with itself), each piece spelled once: the shared
    fields are most of an attempt's spelling, and a new input hash needs all four."""
    own, shared = own_json(attempt), shared_json(attempt)
    return _whole(own, attempt, shared), outcome_json(attempt), shared, f"[{','.join(own)}]"


def _whole(own: tuple[str, str, str], attempt: Attempt, shared: str) -> str:
    case_id, task_id, recorded_at = own
    own_keys = OWN_KEYS
    return (
        f"{own_keys[0]}{case_id}{own_keys[1]}{task_id}{own_keys[2]}{recorded_at},"
        f"{outcome_members(attempt)},{shared}}}"
    )


def kept_comparands(first: str) -> tuple[str, str] | None:
    """outcome_json() and shared_json() of a stored compact first attempt, read out of its
    whole(), what a later attempt is compared by; None for a first stored before the compact
    layout (it keeps both beside it, or neither). Its outcome members are `"value":V,
    "reason":R` before the shared ones, V a number or null: outcome_json() is `[V, R]`."""
    found = SHARED_START.search(first)
    if found is None:
        return None
    start = first.find(f",{VALUE_KEY}") + len(VALUE_KEY) + 1
    value, _, reason = first[start : found.start()].partition(REASON_KEY)
    return f"[{value}, {reason}]", first[found.start() + 1 : -1]


def keeps_own_entry(first: Attempt) -> bool:
    """Whether a hash's entries include its first attempt's own: those of a first stored
    before the compact layout do; since, the first is not kept twice (with_first())."""
    return first.answer_length is None


def with_first(first: Attempt, attempts: list[Attempt], total: int, bound: int) -> list[Attempt]:
    """A hash's newest attempts (at most `bound`) from its expanded entries: a compact
    layout's entries are the later attempts only, so the first leads them while none of those
    has been trimmed."""
    if not keeps_own_entry(first) and len(attempts) == total - 1:
        attempts = [first, *attempts]
    return attempts[-bound:] if bound > 0 else attempts


def entry(attempt: Attempt, *, same_outcome: bool, same_shared: bool) -> str:
    """The entry of an attempt beside a first it agrees with as given (RECORD_LUA builds the
    same string from script_args()). A first attempt's own entry agrees in both."""
    own = ",".join(own_json(attempt))
    if same_outcome and same_shared:
        return f"[{own}]"
    differing = []
    if not same_outcome:
        differing.append(outcome_members(attempt))
    if not same_shared:
        differing.append(shared_json(attempt))
    return f"[{own},{{{','.join(differing)}}}]"


def script_args(attempt: Attempt) -> tuple[str, ...]:
    """What RECORD_LUA is given per attempt to compare it, build its entry and check contract
    drift: the own JSON values, outcome_json(), outcome_members(), shared_head(),
    drift_tail(), the contract version as JSON and required_set_json()."""
    return (
        *own_json(attempt),
        outcome_json(attempt),
        outcome_members(attempt),
        shared_head(attempt),
        drift_tail(attempt),
        _text_json(attempt.contract_version),
        required_set_json(attempt),
    )


def _texts_json(texts: list[str]) -> str:
    return ",".join(map(encode_basestring, texts))


def _text_json(text: str | None) -> str:
    return "null" if text is None else encode_basestring(text)


def alert_json(alert: Alert) -> str:
    """A nondeterminism alert as a store keeps it: its JSON with its attempts' storage-only
    fields (Attempt.answer_length, expected_evidence), which a dump leaves out, so that it
    reads back equal (RECORD_LUA's alerts hold them as its firsts do)."""
    data = alert.model_dump(mode="json")
    for side, attempt in (("first", alert.first), ("observed", alert.observed)):
        data[side]["answer_length"] = attempt.answer_length
        data[side]["expected_evidence"] = attempt.expected_evidence
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def letter_json(letter: DeadLetter, max_bytes: int) -> str:
    """A dead letter as a store keeps it: its JSON, its body cut to `max_bytes`
    (DeadLetter.bounded())."""
    return letter.bounded(max_bytes).model_dump_json()


def read_letter(stored: str | bytes) -> DeadLetter:
    """A dead letter as letter_json() kept it."""
    return DeadLetter.model_validate_json(stored)


class Expander:
    """Reads entries back as whole attempts, filling in what an entry left out from the first."""

    def __init__(self, first: Attempt) -> None:
        self._first = first.model_dump(mode="json")

    def attempt(self, stored: str | bytes) -> Attempt:
        if stored[:1] in ("{", b"{"):  # a whole attempt
            return Attempt.model_validate_json(stored)
        data: Any = json.loads(stored)
        case_id, task_id, recorded_at, *rest = data
        fields = {
            **self._first,
            "case_id": case_id,
            "task_id": task_id,
            "recorded_at": recorded_at,
        }
        if rest:
            differing = rest[0]
            if "required_claim_ids" in differing and "findings" not in differing:
                # its own lists, whose findings are derived: not the first's
                del fields["missing_claim_ids"], fields["findings"]
            fields.update(differing)
        return Attempt.model_validate(fields)

    def attempts(self, entries: Iterable[str | bytes]) -> list[Attempt]:
        return [self.attempt(stored) for stored in entries]
