"""The attempt, its kept citations and the record, built without validation
(contracts.trusted), are what validating their field values builds (issue 24)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from contracts import Attempt, AttributionResult, Policy, ScoreRecord
from contracts.policy import PolicyGroup
from contracts.record_models import KeptCitation
from contracts.triage import Finding
from tests.unit.contracts.test_trusted import same_as_validated
from worker.bench.drain import sample_messages
from worker.pipeline.scoring import Delivery, build_record, judge, make_attempt
from worker.stores.sqlite.sqlite_store import SQLiteStore

NOW = datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=UTC)
POLICY = Policy(version="v1", groups={"default": PolicyGroup(min_coverage=0.75)})


def nested(instance: BaseModel) -> list[BaseModel]:
    """The models a record or an attempt holds, each of its own exact type."""
    held: list[BaseModel] = []
    for name, kind in (("citations", KeptCitation), ("findings", Finding)):
        for item in getattr(instance, name, None) or []:
            assert type(item) is kind
            held.append(item)
    return held


@pytest.mark.parametrize("excerpt_chars", [None, 12])
@pytest.mark.parametrize("policy", [None, POLICY], ids=["report-only", "min-0.75"])
def test_attempts_and_records_are_what_validation_builds(
    tmp_path: Path, excerpt_chars: int | None, policy: Policy | None
) -> None:
    """Over the bench's messages, first attempts, hits and conflicts, with and without excerpts."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    judged = []
    for position, body in enumerate(sample_messages(600)):
        try:
            message = AttributionResult.model_validate(body)
        except ValidationError:
            continue
        judged.append(judge(message, Delivery(task_id="t-1", line=position + 1), policy))
    attempts = [make_attempt(one, now=NOW, excerpt_chars=excerpt_chars) for one in judged]
    recorded = store.record_many(
        [(one.input_hash, a) for one, a in zip(judged, attempts, strict=True)], now=NOW
    )
    records = [
        build_record(one, recorded=found, observed=one.outcome, policy=policy, now=NOW)
        for one, found in zip(judged, recorded, strict=True)
    ]

    for instance in [*attempts, *records]:
        assert type(instance) in (Attempt, ScoreRecord)
        same_as_validated(instance)
        for item in nested(instance):
            same_as_validated(item)
    assert {record.cache for record in records} == {"miss", "hit", "conflict"}
    excerpts = {c.excerpt is not None for a in attempts for c in a.citations or []}
    assert excerpts == {excerpt_chars is not None}  # every bench span is valid
    store.close()


def test_an_attempt_owns_its_lists() -> None:
    """Validation copies lists; so does make_attempt: the message's lists are not shared."""
    message = AttributionResult.model_validate(next(iter(sample_messages(1))))
    one = judge(message, Delivery(), None)

    attempt = make_attempt(one, now=NOW)

    assert attempt.required_claim_ids == message.required_claim_ids
    assert attempt.required_claim_ids is not message.required_claim_ids
    assert attempt.supported_claim_ids is not message.supported_claim_ids
    assert attempt.findings is not one.triage.findings
