"""The pure pipeline: message in, record out, with a fixed clock and an embedded store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import Alert, AttributionResult, ScoreRecord, input_hash, policy_from_threshold
from tests.conftest import CITED_SUPPORTED, FIXED_NOW
from tests.factories import NO_ARTIFACT, expected_rejected, expected_scored
from worker.errors import InputError, OversizeMessage
from worker.pipeline.intake import parse_message
from worker.pipeline.scoring import (
    WORKER_VERSION,
    Delivery,
    process,
    process_many,
    rejected_record,
)
from worker.stores.sqlite.sqlite_store import SQLiteStore

TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
ONE_THIRD_REASON = "supported=1; required=3; missing=refund-method,support-channel"
UNKNOWN_ID_REASON = (
    "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: unknown-id"
)

MessageFactory = Callable[..., AttributionResult]
DictFactory = Callable[..., dict[str, Any]]


def clock() -> datetime:
    return FIXED_NOW


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[[], SQLiteStore]]:
    """Fresh SQLite stores in tmp_path, closed after the test."""
    opened: list[SQLiteStore] = []

    def make() -> SQLiteStore:
        store = SQLiteStore(tmp_path / f"store-{len(opened)}.sqlite3")
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[[], SQLiteStore]) -> SQLiteStore:
    return make_store()


def scored(message: AttributionResult, **fields: Any) -> ScoreRecord:
    """The expected scored record of `message` on a miss in report-only mode, with overrides."""
    return ScoreRecord(**expected_scored(message, **fields))


# --- parse_message ---------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["str", "bytes", "dict"])
def test_parse_message_accepts_a_valid_message(message_dict: DictFactory, encoding: str) -> None:
    """A valid message parses the same from JSON text, UTF-8 bytes or a decoded dict."""
    data = message_dict()
    text = json.dumps(data)
    body: Any = {"str": text, "bytes": text.encode(), "dict": data}[encoding]

    assert parse_message(body, max_bytes=100_000) == AttributionResult.model_validate(data)


def test_parse_message_accepts_a_body_exactly_at_the_limit(message_dict: DictFactory) -> None:
    """The byte limit is inclusive: a body of exactly max_bytes is parsed."""
    text = json.dumps(message_dict())

    assert parse_message(text, max_bytes=len(text)).case_id == "refund-001"


def test_parse_message_rejects_a_body_over_the_limit(message_dict: DictFactory) -> None:
    """One byte over the limit raises OversizeMessage saying both sizes."""
    text = json.dumps(message_dict())
    size = len(text.encode())

    with pytest.raises(OversizeMessage) as raised:
        parse_message(text, max_bytes=size - 1)

    assert str(raised.value) == f"message is {size} bytes, over the {size - 1}-byte limit"


def test_parse_message_checks_size_before_parsing() -> None:
    """An oversize body that is not even JSON gets the oversize error, not a JSON error."""
    with pytest.raises(OversizeMessage) as raised:
        parse_message(b"{" * 50, max_bytes=10)

    assert str(raised.value) == "message is 50 bytes, over the 10-byte limit"


def test_parse_message_measures_text_in_utf8_bytes() -> None:
    """A str body is measured in UTF-8 bytes, not characters: six 'é' are 12 bytes."""
    with pytest.raises(OversizeMessage) as raised:
        parse_message("é" * 6, max_bytes=10)

    assert str(raised.value) == "message is 12 bytes, over the 10-byte limit"


def test_oversize_message_is_an_input_error() -> None:
    """Callers that handle InputError also handle an oversize message."""
    with pytest.raises(InputError):
        parse_message("x" * 11, max_bytes=10)


@pytest.mark.parametrize("body", ["{", b'{"case_id": ', "not json", ""])
def test_parse_message_rejects_invalid_json(body: str | bytes) -> None:
    """A body that is not JSON is an InputError whose reason starts with 'invalid JSON:'."""
    with pytest.raises(InputError) as raised:
        parse_message(body, max_bytes=1000)

    assert not isinstance(raised.value, OversizeMessage)
    assert str(raised.value).startswith("invalid JSON: ")


@pytest.mark.parametrize("encoding", ["str", "dict"])
def test_parse_message_names_an_unknown_field(message_dict: DictFactory, encoding: str) -> None:
    """An unknown field is rejected by name, from JSON text and from a dict alike."""
    data = message_dict(bogus=1)
    body: Any = json.dumps(data) if encoding == "str" else data

    with pytest.raises(InputError) as raised:
        parse_message(body, max_bytes=100_000)

    assert str(raised.value) == "schema: bogus: Extra inputs are not permitted"


def test_parse_message_names_a_missing_field(message_dict: DictFactory) -> None:
    """A missing required field is rejected by name."""
    data = message_dict()
    del data["grader"]

    with pytest.raises(InputError) as raised:
        parse_message(json.dumps(data), max_bytes=100_000)

    assert str(raised.value) == "schema: grader: Field required"


def test_parse_message_rejects_a_list_body() -> None:
    """A decoded body that is a list, not an object, is an InputError naming its type."""
    with pytest.raises(InputError) as raised:
        parse_message([{"case_id": "refund-001"}], max_bytes=1000)

    assert str(raised.value) == "message must be a JSON object, got list"


def test_parse_message_rejects_non_utf8_bytes(message_dict: DictFactory) -> None:
    """Bytes that are not UTF-8 are an InputError saying so, not a crash."""
    body = json.dumps(message_dict(case_id="refund-X")).encode().replace(b"X", b"\xff")
    position = body.index(b"\xff")

    with pytest.raises(InputError) as raised:
        parse_message(body, max_bytes=100_000)

    assert (
        str(raised.value) == f"message is not valid UTF-8 (invalid start byte at byte {position})"
    )


# --- process: the record of one message ------------------------------------------------------


def test_process_first_message_is_a_miss_scored_in_report_only_mode(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """With no policy, a valid first message is a miss with status scored and no owner."""
    msg = message()

    processed = process(msg, store=store, policy=None, clock=clock)

    assert processed.record == scored(msg)
    assert processed.alert is None


def test_process_with_a_policy_passes_at_or_above_threshold(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """With MIN_EVIDENCE_COVERAGE=0.5, 2/3 passes with the threshold and version recorded."""
    msg = message()

    processed = process(msg, store=store, policy=policy_from_threshold("0.5"), clock=clock)

    assert processed.record == scored(
        msg, status="pass", threshold=0.5, policy_version="env:0.5", owner=None
    )


def test_process_with_a_policy_fails_below_threshold_owned_by_product(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """With MIN_EVIDENCE_COVERAGE=0.9, 2/3 fails; the supported claims are cited and the
    missing one is not: routed to product, and the attempt keeps the citations."""
    msg = message(citations=CITED_SUPPORTED)

    processed = process(msg, store=store, policy=policy_from_threshold("0.9"), clock=clock)

    not_cited = {**NO_ARTIFACT, "finding": "not_cited", "owner": "product"}
    assert processed.record == scored(
        msg,
        status="fail",
        threshold=0.9,
        policy_version="env:0.9",
        owner="product",
        findings=[not_cited],
    )
    history = store.history(processed.record.input_hash or "")
    assert history is not None
    kept = history.first
    assert [c.model_dump() for c in kept.citations or []] == [
        {**citation, "answer_span": tuple(citation["answer_span"]), "excerpt": None}
        for citation in CITED_SUPPORTED
    ]
    assert (kept.missing_claim_ids, kept.findings, kept.owner, kept.contract_drift) == (
        ["refund-method"],
        processed.record.findings,
        "product",
        False,
    )


def test_process_same_inputs_again_is_a_hit_with_observed_outcome(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """The same inputs judged the same way again are a hit; observed_* repeats the outcome."""
    process(message(), store=store, policy=None, clock=clock)
    again = message(case_id="refund-002")

    processed = process(again, store=store, policy=None, clock=clock)

    assert processed.record == scored(
        again,
        cache="hit",
        observed_value=2 / 3,
        observed_reason=TWO_THIRDS_REASON,
    )
    assert processed.record.case_id == "refund-002"
    assert processed.alert is None


def test_process_conflict_record_carries_the_first_outcome(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """A conflict's record keeps the first outcome in value/reason/status, its own in observed_*."""
    policy = policy_from_threshold("0.5")
    process(message(), store=store, policy=policy, clock=clock)
    changed = message(case_id="refund-002", supported_claim_ids=["refund-window"])

    processed = process(changed, store=store, policy=policy, clock=clock)

    assert processed.record == scored(
        changed,
        status="pass",
        threshold=0.5,
        policy_version="env:0.5",
        cache="conflict",
        observed_value=1 / 3,
        observed_reason=ONE_THIRD_REASON,
    )


def test_process_conflict_returns_an_alert_naming_both_attempts(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """A conflict's alert names the hash, the first and the observed attempt, and kept_first."""
    first = message()
    process(first, store=store, policy=None, clock=clock, delivery=Delivery(task_id="task-1"))
    changed = message(case_id="refund-002", supported_claim_ids=["refund-window"])

    processed = process(
        changed, store=store, policy=None, clock=clock, delivery=Delivery(task_id="task-2")
    )

    history = store.history(input_hash(first))
    assert history is not None
    assert processed.alert == Alert(
        input_hash=input_hash(first),
        decision="kept_first",
        first=history.attempts[0],
        observed=history.attempts[1],
        raised_at=FIXED_NOW,
    )
    assert (processed.alert.first.case_id, processed.alert.first.task_id) == (
        "refund-001",
        "task-1",
    )
    assert (processed.alert.observed.case_id, processed.alert.observed.task_id) == (
        "refund-002",
        "task-2",
    )
    assert (processed.alert.observed.value, processed.alert.observed.reason) == (
        1 / 3,
        ONE_THIRD_REASON,
    )


def test_process_metric_invalid_message_is_invalid_never_zero(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """An unknown supported ID gives status invalid, value None, owner evaluation-data."""
    msg = message(supported_claim_ids=["unknown-id"])

    processed = process(msg, store=store, policy=policy_from_threshold("0.5"), clock=clock)

    assert processed.record == scored(
        msg,
        value=None,
        reason=UNKNOWN_ID_REASON,
        status="invalid",
        policy_version="env:0.5",
        threshold=None,
        owner="evaluation-data",
    )
    assert processed.record.value is None


def test_process_metric_invalid_again_is_a_hit(message: MessageFactory, store: SQLiteStore) -> None:
    """The same invalid row twice is a hit: None equals None when the reasons agree."""
    msg = message(supported_claim_ids=["unknown-id"])
    process(msg, store=store, policy=None, clock=clock)

    processed = process(msg, store=store, policy=None, clock=clock)

    assert processed.record.cache == "hit"
    assert processed.record.status == "invalid"
    assert (processed.record.observed_value, processed.record.observed_reason) == (
        None,
        UNKNOWN_ID_REASON,
    )


def test_process_unknown_policy_group_is_invalid(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """A row naming a group the policy lacks is invalid, with the group in the reason."""
    msg = message(policy_group="disclosure")

    processed = process(msg, store=store, policy=policy_from_threshold("0.5"), clock=clock)

    assert processed.record == scored(
        msg,
        value=None,
        reason="policy_group 'disclosure' is not defined in policy env:0.5 (groups: default)",
        status="invalid",
        policy_group="disclosure",
        policy_version="env:0.5",
        owner="evaluation-data",
    )


def test_process_record_carries_delivery_and_trace(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """The task id, input line and a W3C trace id reach the record unchanged."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    msg = message(trace_id=trace_id, blocking=False)

    processed = process(
        msg, store=store, policy=None, clock=clock, delivery=Delivery(task_id="task-9", line=3)
    )

    assert processed.record == scored(
        msg, task_id="task-9", line=3, trace_id=trace_id, blocking=False
    )


def test_a_malformed_trace_id_is_dropped_with_a_warning_and_the_row_still_scored(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """A trace_id that is not W3C's never rejects the message: the record says why it has none."""
    msg = message(trace_id="trace-42")

    processed = process(msg, store=store, policy=None, clock=clock)

    assert processed.record == scored(
        msg,
        trace_id=None,
        warnings=["trace_id dropped: not 32 lowercase hex digits (W3C trace-id), got 8 characters"],
    )


def test_process_stores_the_attempt_as_received(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """The stored attempt keeps the lists as received, the clock's time and the delivery."""
    msg = message(supported_claim_ids=[" support-channel", "refund-window"])

    process(
        msg,
        store=store,
        policy=None,
        clock=clock,
        delivery=Delivery(task_id="task-7", redelivered=True),
    )

    history = store.history(input_hash(msg))
    assert history is not None
    attempt = history.first
    assert attempt.required_claim_ids == ["refund-window", "refund-method", "support-channel"]
    assert attempt.supported_claim_ids == [" support-channel", "refund-window"]
    assert (attempt.value, attempt.reason) == (2 / 3, TWO_THIRDS_REASON)
    assert attempt.recorded_at == FIXED_NOW
    assert (attempt.task_id, attempt.redelivered) == ("task-7", True)
    assert (attempt.metric_version, attempt.ragas_version, attempt.worker_version) == (
        "evidence_coverage/1",
        "0.4.3",
        WORKER_VERSION,
    )


def test_process_keeps_what_explain_reads(message: MessageFactory, store: SQLiteStore) -> None:
    """The attempt keeps the contexts' document IDs in rank order, each once, and the
    message's policy group (SPEC §9, looking a row up)."""
    contexts = [
        {"document_id": "kb-2", "text": "a"},
        {"document_id": "kb-1", "text": "b"},
        {"document_id": "kb-2", "text": "c"},
    ]
    msg = message(contexts=contexts, policy_group="disclosure")

    process(msg, store=store, policy=None, clock=clock)

    history = store.history(input_hash(msg))
    assert history is not None
    assert history.first.retrieved_document_ids == ["kb-2", "kb-1"]
    assert history.first.policy_group == "disclosure"


def test_a_retrieved_document_id_with_a_lone_surrogate_is_kept_as_its_escape(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """A lone surrogate is a legal JSON escape in a context's document ID; stores keep UTF-8."""
    msg = message(contexts=[{"document_id": "kb\udbff-1", "text": "a"}])

    process(msg, store=store, policy=None, clock=clock)

    history = store.history(input_hash(msg))
    assert history is not None
    assert history.first.retrieved_document_ids == ["kb\\udbff-1"]


def test_process_uses_the_clock_for_the_alert_time(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """Alerts are stamped with the injected clock, not the wall clock."""
    later = FIXED_NOW + timedelta(hours=1)
    process(message(), store=store, policy=None, clock=clock)

    processed = process(
        message(supported_claim_ids=[]), store=store, policy=None, clock=lambda: later
    )

    assert processed.alert is not None
    assert processed.alert.raised_at == later


# --- process_many ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("second_supported", "expected_cache"),
    [
        pytest.param(["refund-window", "support-channel"], "hit", id="same-outcome"),
        pytest.param(["refund-window"], "conflict", id="different-outcome"),
    ],
)
def test_process_many_same_hash_in_one_call_behaves_as_sequential(
    message: MessageFactory,
    make_store: Callable[[], SQLiteStore],
    second_supported: list[str],
    expected_cache: str,
) -> None:
    """Two messages of one new hash in one call give the records two process() calls give."""
    first = message()
    second = message(case_id="refund-002", supported_claim_ids=second_supported)
    items = [(first, Delivery(task_id="task-1")), (second, Delivery(task_id="task-2"))]

    batched = process_many(items, store=make_store(), policy=None, clock=clock)
    sequential_store = make_store()
    sequential = [
        process(msg, store=sequential_store, policy=None, clock=clock, delivery=delivery)
        for msg, delivery in items
    ]

    assert [p.record.cache for p in batched] == ["miss", expected_cache]
    assert batched == sequential


def test_process_many_keeps_each_message_in_order(
    message: MessageFactory, store: SQLiteStore
) -> None:
    """A batch over different hashes returns one record per message, in order."""
    messages = [
        message(case_id="refund-001"),
        message(case_id="refund-002", answer="Another answer."),
        message(case_id="refund-003"),
    ]

    processed = process_many(
        [(msg, Delivery()) for msg in messages], store=store, policy=None, clock=clock
    )

    assert [(p.record.case_id, p.record.cache) for p in processed] == [
        ("refund-001", "miss"),
        ("refund-002", "miss"),
        ("refund-003", "hit"),
    ]


def test_process_many_of_nothing_is_empty(store: SQLiteStore) -> None:
    """An empty batch processes nothing."""
    assert process_many([], store=store, policy=None, clock=clock) == []


# --- rejected --------------------------------------------------------------------------------


def expected_rejection(
    reason: str = "schema: bogus: Extra inputs are not permitted", **fields: Any
) -> ScoreRecord:
    return ScoreRecord(**expected_rejected(reason, **fields))


@pytest.mark.parametrize("encoding", ["str", "bytes", "dict"])
def test_rejected_record_extracts_the_case_id(message_dict: DictFactory, encoding: str) -> None:
    """A rejected message's record is invalid, owned by evaluation-data, with its case_id."""
    data = message_dict(bogus=1)
    text = json.dumps(data)
    body: Any = {"str": text, "bytes": text.encode(), "dict": data}[encoding]

    record = rejected_record(
        "schema: bogus: Extra inputs are not permitted", body=body, recorded_at=FIXED_NOW
    )

    assert record == expected_rejection(case_id="refund-001")


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(None, id="no-body"),
        pytest.param(b"\xff\xfe junk", id="non-utf8"),
        pytest.param("{", id="invalid-json"),
        pytest.param("[1, 2]", id="json-list"),
        pytest.param({"case_id": 5}, id="non-string-case-id"),
        pytest.param({"case_id": ""}, id="empty-case-id"),
        pytest.param('"refund-001"', id="json-string"),
    ],
)
def test_rejected_record_of_junk_has_no_case_id(body: object) -> None:
    """A body without a usable case_id gives case_id None, and no crash."""
    record = rejected_record(
        "invalid JSON: expected value at line 1 column 1", body=body, recorded_at=FIXED_NOW
    )

    assert record == expected_rejection(
        case_id=None, reason="invalid JSON: expected value at line 1 column 1"
    )


def test_rejected_record_carries_policy_version_and_delivery() -> None:
    """With a policy and a delivery, the rejected record names the policy version, task and line."""
    record = rejected_record(
        "message is 50 bytes, over the 10-byte limit",
        body=b"{" * 50,
        recorded_at=FIXED_NOW,
        policy=policy_from_threshold("0.85"),
        delivery=Delivery(task_id="task-3", line=4),
    )

    assert record == expected_rejection(
        reason="message is 50 bytes, over the 10-byte limit",
        policy_version="env:0.85",
        task_id="task-3",
        line=4,
    )
