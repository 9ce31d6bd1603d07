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
in Lua (see RECORD_LUA); a store test checks that both stores write the same strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses
from typing import Any, Final

import orjson
from pydantic_core import to_json

from contracts import Alert, Attempt
from contracts.outcomes import value_json
from contracts.records import KeptCitation
from contracts.triage import Finding
from worker.stores.contract import outcome_json

# Every Attempt field is in one of three groups (a unit test checks it): a field added to
# Attempt must be added here and to the functions that spell its group.
OWN_FIELDS: Final = ("case_id", "task_id", "recorded_at")
OUTCOME_FIELDS: Final = ("value", "reason")
SHARED_FIELDS: Final = (
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
    "contract_drift",
    "owner",
    "grader_name",
    "grader_version",
    "grader_model",
    "answer_length",
    "expected_evidence",
    "previous_policy_version",
    "previous_status",
)


def own_json(attempt: Attempt) -> tuple[str, str, str]:
    """The JSON values of OWN_FIELDS, in order: the start of every entry."""
    return (
        _text_json(attempt.case_id),
        _text_json(attempt.task_id),
        to_json(attempt.recorded_at).decode(),  # as pydantic writes it in a whole attempt
    )


def outcome_members(attempt: Attempt) -> str:
    """The JSON object members (no braces) of OUTCOME_FIELDS, spelled as outcome_json() is."""
    return f'"value":{value_json(attempt.value)},"reason":{encode_basestring(attempt.reason)}'


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
    """shared_head() spelled in Python, for what orjson refuses."""
    parts = []
    if attempt.answer_length is not None:
        parts.append(f'"answer_length":{int(attempt.answer_length)}')
    parts += [
        f'"required_claim_ids":[{_texts_json(attempt.required_claim_ids)}]',
        f'"supported_claim_ids":[{_texts_json(attempt.supported_claim_ids)}]',
        f'"metric_version":{encode_basestring(attempt.metric_version)}',
        f'"ragas_version":{encode_basestring(attempt.ragas_version)}',
        f'"worker_version":{encode_basestring(attempt.worker_version)}',
        f'"redelivered":{"true" if attempt.redelivered else "false"}',
        f'"contract_version":{_text_json(attempt.contract_version)}',
        f'"citations":{_citations_json(attempt.citations)}',
    ]
    if not derivable(attempt):
        parts.append(f'"missing_claim_ids":{_optional_texts_json(attempt.missing_claim_ids)}')
        parts.append(f'"findings":{_findings_json(attempt.findings)}')
    parts.append(f'"retrieved_document_ids":{_optional_texts_json(attempt.retrieved_document_ids)}')
    parts.append(f'"policy_group":{_text_json(attempt.policy_group)}')
    if attempt.grader_name is not None:
        parts.append(f'"grader_name":{_text_json(attempt.grader_name)}')
        parts.append(f'"grader_version":{_text_json(attempt.grader_version)}')
        parts.append(f'"grader_model":{_text_json(attempt.grader_model)}')
    if attempt.expected_evidence is not None:
        expected = ",".join(
            f"{encode_basestring(claim)}:[{_texts_json(documents)}]"
            for claim, documents in attempt.expected_evidence.items()
        )
        parts.append(f'"expected_evidence":{{{expected}}}')
    if attempt.previous_status is not None:
        parts.append(f'"previous_policy_version":{_text_json(attempt.previous_policy_version)}')
        parts.append(f'"previous_status":{_text_json(attempt.previous_status)}')
    return ",".join(parts)


def drift_tail(attempt: Attempt) -> str:
    """The end of shared_json(): contract_drift and owner, which the store may change when it
    finds contract drift (drifted(); the Redis script appends DRIFTED_TAIL instead)."""
    drift = "true" if attempt.contract_drift else "false"
    return f',"contract_drift":{drift},"owner":{_text_json(attempt.owner)}'


# A drifted attempt's tail: its owner is evaluation data whatever its findings (SPEC §9).
DRIFT_OWNER: Final = "evaluation-data"
DRIFTED_TAIL: Final = f',"contract_drift":true,"owner":"{DRIFT_OWNER}"'


def drifted(attempt: Attempt) -> Attempt:
    """The attempt as recorded when the store saw another required set for its (contract
    version, case ID): marked, and owned by evaluation data."""
    return attempt.model_copy(update={"contract_drift": True, "owner": DRIFT_OWNER})


def required_set_json(attempt: Attempt) -> str:
    """What contract drift compares: the sorted required claim IDs as a JSON array, for a
    valid attempt with a contract version and a case ID; "" for any other (no drift check:
    an invalid row's list is not a set)."""
    if attempt.value is None or attempt.contract_version is None or attempt.case_id is None:
        return ""
    return f"[{_texts_json(sorted(attempt.required_claim_ids))}]"


def same_shared_fields(first: Attempt, attempt: Attempt) -> bool:
    """Whether two attempts' SHARED_FIELDS are equal: exactly when their shared_json() is."""
    return (
        first.required_claim_ids == attempt.required_claim_ids
        and first.supported_claim_ids == attempt.supported_claim_ids
        and first.metric_version == attempt.metric_version
        and first.ragas_version == attempt.ragas_version
        and first.worker_version == attempt.worker_version
        and first.redelivered == attempt.redelivered
        and first.contract_version == attempt.contract_version
        and first.citations == attempt.citations
        and first.missing_claim_ids == attempt.missing_claim_ids
        and first.findings == attempt.findings
        and first.retrieved_document_ids == attempt.retrieved_document_ids
        and first.policy_group == attempt.policy_group
        and first.contract_drift == attempt.contract_drift
        and first.owner == attempt.owner
        and first.grader_name == attempt.grader_name
        and first.grader_version == attempt.grader_version
        and first.grader_model == attempt.grader_model
        and first.answer_length == attempt.answer_length
        and first.expected_evidence == attempt.expected_evidence
        and first.previous_status == attempt.previous_status
        and first.previous_policy_version == attempt.previous_policy_version
    )


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
    return (
        f'{{"case_id":{case_id},"task_id":{task_id},"recorded_at":{recorded_at},'
        f"{outcome_members(attempt)},{shared}}}"
    )


# Where a compact first (one whose shared_json() starts with answer_length) keeps its shared
# members: a store keeps no copy of them (RECORD_LUA finds them the same way). Every member
# before them is a JSON string or number, in which a quote is escaped, so the first match is
# them; an attempt dumped whole by pydantic writes answer_length after owner, never before
# required_claim_ids.
SHARED_START: Final = re.compile(r',"answer_length":\d+,"required_claim_ids":')


def kept_comparands(first: str) -> tuple[str, str] | None:
    """outcome_json() and shared_json() of a stored compact first attempt, read out of its
    whole(), what a later attempt is compared by; None for a first stored before the compact
    layout (it keeps both beside it, or neither). Its outcome members are `"value":V,
    "reason":R` before the shared ones, V a number or null: outcome_json() is `[V, R]`."""
    found = SHARED_START.search(first)
    if found is None:
        return None
    value, _, reason = first[first.find(',"value":') + 9 : found.start()].partition(',"reason":')
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


def _optional_texts_json(texts: list[str] | None) -> str:
    return "null" if texts is None else f"[{_texts_json(texts)}]"


def _citations_json(citations: list[KeptCitation] | None) -> str:
    if citations is None:
        return "null"
    spelled = []
    for citation in citations:
        start, end = citation.answer_span
        excerpt = "" if citation.excerpt is None else f",{encode_basestring(citation.excerpt)}"
        spelled.append(
            f"[{encode_basestring(citation.claim_id)},{encode_basestring(citation.document_id)},"
            f"{int(start)},{int(end)}{excerpt}]"
        )
    return f"[{','.join(spelled)}]"


def _findings_json(findings: list[Finding] | None) -> str:
    if findings is None:
        return "null"
    spelled = []
    for finding in findings:
        retrieved = finding.evidence_retrieved
        tail = "" if retrieved is None else f',"evidence_retrieved":{str(retrieved).lower()}'
        spelled.append(
            f'{{"claim_id":{encode_basestring(finding.claim_id)},"finding":"{finding.finding}",'
            f'"owner":"{finding.owner}","document_ids":[{_texts_json(finding.document_ids)}]'
            f"{tail}}}"
        )
    return f"[{','.join(spelled)}]"


def alert_json(alert: Alert) -> str:
    """A nondeterminism alert as a store keeps it: its JSON with its attempts' storage-only
    fields (Attempt.answer_length, expected_evidence), which a dump leaves out, so that it
    reads back equal (RECORD_LUA's alerts hold them as its firsts do)."""
    data = alert.model_dump(mode="json")
    for side, attempt in (("first", alert.first), ("observed", alert.observed)):
        data[side]["answer_length"] = attempt.answer_length
        data[side]["expected_evidence"] = attempt.expected_evidence
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


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
