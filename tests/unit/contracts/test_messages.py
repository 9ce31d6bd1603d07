"""Wire models: defaults, strictness and unknown fields of the two messages (SPEC §2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from contracts import AttributionResult, ReleaseRow
from contracts.trace_ids import checked_trace_id

MessageDict = Callable[..., dict[str, Any]]

ROW: dict[str, Any] = {
    "case_id": "refund-001",
    "required_claim_ids": ["refund-window", "refund-method"],
    "supported_claim_ids": ["refund-window"],
}


def _validate(model: type[BaseModel], data: dict[str, Any], mode: str) -> BaseModel:
    """Validate data as a decoded dict (`python`) or as JSON text (`json`)."""
    if mode == "json":
        return model.model_validate_json(json.dumps(data))
    return model.model_validate(data)


def _errors(model: type[BaseModel], data: dict[str, Any], mode: str) -> list[tuple[Any, str]]:
    """The (location, error type) pairs validation reports; fails if validation succeeds."""
    with pytest.raises(ValidationError) as raised:
        _validate(model, data, mode)
    return [(error["loc"], error["type"]) for error in raised.value.errors()]


MODES = [pytest.param("python", id="dict"), pytest.param("json", id="json-text")]


def test_release_row_defaults() -> None:
    """A ReleaseRow with only the required fields is blocking, in group default, unversioned."""
    row = ReleaseRow.model_validate(ROW)

    assert (row.blocking, row.policy_group, row.contract_version) == (True, "default", None)


def test_release_row_contract_version_optional_but_kept() -> None:
    """ReleaseRow accepts a contract_version and keeps it as given."""
    row = ReleaseRow.model_validate({**ROW, "contract_version": "support-faq/2026-10"})

    assert row.contract_version == "support-faq/2026-10"


def test_release_row_keeps_claim_lists_as_given() -> None:
    """List contents (blanks, duplicates, padding) are the metric's business, not the schema's."""
    row = ReleaseRow.model_validate(
        {**ROW, "required_claim_ids": ["", " a ", " a "], "supported_claim_ids": ["x"]}
    )

    assert (row.required_claim_ids, row.supported_claim_ids) == (["", " a ", " a "], ["x"])


def test_attribution_result_defaults(message_dict: MessageDict) -> None:
    """An AttributionResult without optional fields has no citations, time or trace."""
    data = message_dict()
    del data["citations"]
    result = AttributionResult.model_validate(data)

    assert (result.citations, result.produced_at, result.trace_id) == ([], None, None)


def test_attribution_result_inherits_release_row_defaults(message_dict: MessageDict) -> None:
    """AttributionResult shares ReleaseRow's defaults: blocking and group default."""
    result = AttributionResult.model_validate(message_dict())

    assert (result.blocking, result.policy_group) == (True, "default")


@pytest.mark.parametrize("mode", MODES)
def test_attribution_result_requires_contract_version(message_dict: MessageDict, mode: str) -> None:
    """contract_version is required on AttributionResult, unlike on ReleaseRow."""
    data = message_dict()
    del data["contract_version"]

    assert _errors(AttributionResult, data, mode) == [(("contract_version",), "missing")]


@pytest.mark.parametrize("mode", MODES)
def test_attribution_result_rejects_empty_contract_version(
    message_dict: MessageDict, mode: str
) -> None:
    """An empty contract_version is not a version."""
    data = message_dict(contract_version="")

    assert _errors(AttributionResult, data, mode) == [(("contract_version",), "string_too_short")]


@pytest.mark.parametrize("mode", MODES)
def test_release_row_rejects_unknown_field(mode: str) -> None:
    """A misspelt or unknown ReleaseRow field is an error, not silently dropped."""
    data = {**ROW, "blockng": False}

    assert _errors(ReleaseRow, data, mode) == [(("blockng",), "extra_forbidden")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("path", "field"),
    [
        pytest.param((), "score", id="top-level"),
        pytest.param(("contexts", 0), "score", id="context"),
        pytest.param(("citations", 0), "confidence", id="citation"),
        pytest.param(("grader",), "temperature", id="grader"),
    ],
)
def test_attribution_result_rejects_unknown_field(
    message_dict: MessageDict, path: tuple[Any, ...], field: str, mode: str
) -> None:
    """Unknown fields are rejected at every level of an AttributionResult."""
    data = message_dict(
        citations=[{"claim_id": "refund-window", "document_id": "d", "answer_span": [0, 7]}]
    )
    target = data
    for part in path:
        target = target[part]
    target[field] = 1

    assert _errors(AttributionResult, data, mode) == [((*path, field), "extra_forbidden")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", [ReleaseRow, AttributionResult], ids=["row", "result"])
def test_empty_case_id_rejected(
    message_dict: MessageDict, model: type[BaseModel], mode: str
) -> None:
    """case_id must be a non-empty string on both models."""
    data = message_dict(case_id="") if model is AttributionResult else {**ROW, "case_id": ""}

    assert _errors(model, data, mode) == [(("case_id",), "string_too_short")]


WRONG_TYPES = [
    pytest.param({"blocking": "true"}, ("blocking",), "bool_type", id="blocking-string"),
    pytest.param({"blocking": 1}, ("blocking",), "bool_type", id="blocking-int"),
    pytest.param({"case_id": 5}, ("case_id",), "string_type", id="case_id-int"),
    pytest.param(
        {"required_claim_ids": "a"}, ("required_claim_ids",), "list_type", id="required-string"
    ),
    pytest.param(
        {"supported_claim_ids": ["a", 1]},
        ("supported_claim_ids", 1),
        "string_type",
        id="supported-int-item",
    ),
    pytest.param({"policy_group": None}, ("policy_group",), "string_type", id="policy_group-null"),
    pytest.param(
        {"contract_version": 2026}, ("contract_version",), "string_type", id="contract-int"
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("change", "loc", "error_type"), WRONG_TYPES)
def test_release_row_rejects_wrong_types(
    change: dict[str, Any], loc: tuple[Any, ...], error_type: str, mode: str
) -> None:
    """A ReleaseRow field of the wrong JSON type is rejected, never coerced."""
    assert _errors(ReleaseRow, {**ROW, **change}, mode) == [(loc, error_type)]


def _citation(span: Any) -> dict[str, Any]:
    return {"citations": [{"claim_id": "c", "document_id": "d", "answer_span": span}]}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("change", "loc", "error_type"),
    [
        *WRONG_TYPES,
        pytest.param(
            _citation(["0", 2]),
            ("citations", 0, "answer_span", 0),
            "int_type",
            id="answer_span-string-offset",
        ),
        pytest.param(
            _citation([0, 2.5]),
            ("citations", 0, "answer_span", 1),
            "int_type",
            id="answer_span-float-offset",
        ),
        pytest.param(
            _citation([0, 2, 3]), ("citations", 0, "answer_span"), "too_long", id="span-too-long"
        ),
        pytest.param({"answer": 42}, ("answer",), "string_type", id="answer-int"),
        pytest.param({"trace_id": 5}, ("trace_id",), "string_type", id="trace_id-int"),
        pytest.param(
            {"contexts": [{"document_id": 1, "text": "t"}]},
            ("contexts", 0, "document_id"),
            "string_type",
            id="context-document_id-int",
        ),
        pytest.param({"schema_version": 2}, ("schema_version",), "less_than_equal", id="schema-2"),
        pytest.param({"schema_version": "1"}, ("schema_version",), "int_type", id="schema-string"),
    ],
)
def test_attribution_result_rejects_wrong_types(
    message_dict: MessageDict,
    change: dict[str, Any],
    loc: tuple[Any, ...],
    error_type: str,
    mode: str,
) -> None:
    """An AttributionResult field of the wrong JSON type is rejected, never coerced."""
    assert _errors(AttributionResult, message_dict(**change), mode) == [(loc, error_type)]


@pytest.mark.parametrize("mode", MODES)
def test_schema_version_rejects_bool(message_dict: MessageDict, mode: str) -> None:
    """`true` is not schema version 1: the published schema says an integer, const 1."""
    # Regression: Literal[1] accepted True (True == 1); schema_version is a strict int now.
    errors = _errors(AttributionResult, message_dict(schema_version=True), mode)

    assert [loc for loc, _ in errors] == [("schema_version",)]


@pytest.mark.parametrize("mode", MODES)
def test_answer_span_is_a_pair_of_ints(message_dict: MessageDict, mode: str) -> None:
    """A JSON array [start, end] becomes the (start, end) pair of character offsets."""
    result = _validate(AttributionResult, message_dict(**_citation([0, 7])), mode)

    assert isinstance(result, AttributionResult)
    assert result.citations[0].answer_span == (0, 7)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-12-01T12:00:00Z", datetime(2026, 12, 1, 12, 0, tzinfo=UTC), id="zulu"),
        pytest.param(
            "2026-12-01T14:00:00+02:00",
            datetime(2026, 12, 1, 14, 0, tzinfo=UTC) - timedelta(hours=2),
            id="offset",
        ),
        pytest.param(
            "2026-12-01T23:30:00-01:00", datetime(2026, 12, 2, 0, 30, tzinfo=UTC), id="next-day"
        ),
        pytest.param("2026-12-01T12:00:00", datetime(2026, 12, 1, 12, 0, tzinfo=UTC), id="naive"),
    ],
)
def test_produced_at_parses_iso_strings(
    message_dict: MessageDict, text: str, expected: datetime, mode: str
) -> None:
    """produced_at is an ISO 8601 string in both JSON text and a decoded dict, held in UTC
    (so records fall on UTC days); one without an offset is read as UTC."""
    result = _validate(AttributionResult, message_dict(produced_at=text), mode)

    assert isinstance(result, AttributionResult)
    assert result.produced_at == expected
    assert result.produced_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("mode", MODES)
def test_produced_at_rejects_non_dates(message_dict: MessageDict, mode: str) -> None:
    """A produced_at that is not a date-time is rejected."""
    errors = _errors(AttributionResult, message_dict(produced_at="yesterday"), mode)

    assert [loc for loc, _ in errors] == [("produced_at",)]


def test_json_round_trip(message_dict: MessageDict) -> None:
    """model_dump(mode="json") validates back, as JSON text, to an equal message."""
    original = AttributionResult.model_validate(
        message_dict(
            produced_at="2026-12-01T12:00:00Z",
            trace_id="t-1",
            **_citation([0, 7]),
        )
    )

    again = AttributionResult.model_validate_json(json.dumps(original.model_dump(mode="json")))

    assert again == original


@pytest.mark.parametrize(
    ("trace_id", "kept", "warning"),
    [
        (None, None, None),
        ("4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4736", None),
        (
            "4BF92F3577B34DA6A3CE929D0E0E4736",
            None,
            "trace_id dropped: not 32 lowercase hex digits (W3C trace-id), got 32 characters",
        ),
        (
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
            "trace_id dropped: not 32 lowercase hex digits (W3C trace-id), got 55 characters",
        ),
        (
            "",
            None,
            "trace_id dropped: not 32 lowercase hex digits (W3C trace-id), got 0 characters",
        ),
        ("0" * 32, None, "trace_id dropped: all zeros is W3C's invalid trace-id"),
    ],
)
def test_a_trace_id_is_kept_only_as_w3c_defines_one(
    trace_id: str | None, kept: str | None, warning: str | None
) -> None:
    """32 lowercase hex digits, not all zero; anything else is dropped, saying why."""
    assert checked_trace_id(trace_id) == (kept, warning)
