"""The pipeline under a review band and an observation window (SPEC §12), the clock injected:
the record and the stored attempt carry what the policy adds, and nothing when it adds none."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts import AttributionResult, Policy, PolicyError, parse_policy
from worker.observability.logging import record_fields
from worker.pipeline.scoring import process
from worker.stores.sqlite.sqlite_store import SQLiteStore

MessageFactory = Callable[..., AttributionResult]
PREVIOUS = 'version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.6\n'
OBSERVED = (
    'version = "2026-12-15"\n[groups.default]\nmin_coverage = 0.85\n'
    '[observe]\nprevious = "policy-2026-11.toml"\nuntil = "2026-12-31"\n'
)
BANDED = parse_policy('version = "b"\n[groups.default]\nmin_coverage = 0.7\nreview_band = 0.05\n')


def read(name: str) -> Policy:
    if name != "policy-2026-11.toml":
        raise PolicyError(f"cannot read {name}")
    return parse_policy(PREVIOUS, previous=True)


OBSERVING = parse_policy(OBSERVED, read_previous=read)


def at(day: int, month: int = 12, year: int = 2026) -> Callable[[], datetime]:
    """A clock stopped late on a UTC day (23:59: still that day)."""
    return lambda: datetime(year, month, day, 23, 59, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "s.sqlite3")
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("clock", "expected"),
    [
        (at(1), ("2026-11-01", "pass", "release-rule")),
        (at(31), ("2026-11-01", "pass", "release-rule")),
        (at(1, 1, 2027), (None, None, "attribution")),
    ],
    ids=["before-until", "on-until", "after-until"],
)
def test_a_record_carries_the_previous_rule_through_until(
    store: SQLiteStore,
    message: MessageFactory,
    clock: Callable[[], datetime],
    expected: tuple[str | None, str | None, str],
) -> None:
    """2 of 3 claims fails 0.85 and passed 0.6: through 2026-12-31 the record says the
    previous version and status and is the release rule's; from 2027-01-01 its line has
    neither field and the row is its findings' (no citations: attribution)."""
    record = process(message(), store=store, policy=OBSERVING, clock=clock).record
    fields = record_fields(record)

    assert (
        fields.get("previous_policy_version", None),
        fields.get("previous_status", None),
        record.owner,
    ) == expected
    assert ("previous_status" in fields) == (expected[1] is not None)


@pytest.mark.parametrize(
    ("clock", "kept"),
    [(at(31), ("2026-11-01", "pass")), (at(1, 1, 2027), (None, None))],
    ids=["open", "ended"],
)
def test_the_stored_attempt_keeps_the_previous_status(
    store: SQLiteStore,
    message: MessageFactory,
    clock: Callable[[], datetime],
    kept: tuple[str | None, str | None],
) -> None:
    """The first attempt read back from the store says what its record said."""
    one = message()
    record = process(one, store=store, policy=OBSERVING, clock=clock).record
    assert record.input_hash is not None
    history = store.history(record.input_hash)

    assert history is not None
    assert (history.first.previous_policy_version, history.first.previous_status) == kept


def test_an_attempt_without_a_window_is_dumped_without_its_fields(
    store: SQLiteStore, message: MessageFactory
) -> None:
    """Outside a window the attempt's dump (show, alert lines) has no previous_* keys."""
    record = process(message(), store=store, policy=BANDED, clock=at(1)).record
    assert record.input_hash is not None
    history = store.history(record.input_hash)

    assert history is not None
    dumped = history.first.model_dump(mode="json")
    assert ("previous_status" in dumped, "previous_policy_version" in dumped) == (False, False)


def test_a_hit_carries_the_previous_status_too(store: SQLiteStore, message: MessageFactory) -> None:
    """The same message twice in the window: the hit's record says the previous status."""
    process(message(), store=store, policy=OBSERVING, clock=at(1))
    record = process(message(), store=store, policy=OBSERVING, clock=at(2)).record

    assert (record.cache, record.previous_status, record.owner) == ("hit", "pass", "release-rule")


def test_a_conflict_is_decided_under_the_previous_rule_on_its_first_outcome(
    store: SQLiteStore, message: MessageFactory
) -> None:
    """A conflict's record is the first outcome's (2/3: pass before), not the attempt's
    (1/3: fail under both)."""
    process(message(), store=store, policy=OBSERVING, clock=at(1))
    other = message(supported_claim_ids=["refund-window"])
    record = process(other, store=store, policy=OBSERVING, clock=at(2)).record

    assert (record.cache, record.status, record.previous_status) == ("conflict", "fail", "pass")


def test_a_row_in_the_band_is_review_with_its_band(
    store: SQLiteStore, message: MessageFactory
) -> None:
    """2 of 3 (0.667) under threshold 0.7, band 0.05: review, release-rule, band on the line."""
    record = process(message(), store=store, policy=BANDED, clock=at(1)).record
    fields = record_fields(record)

    assert (record.status, record.owner, fields["threshold"], fields["review_band"]) == (
        "review",
        "release-rule",
        0.7,
        0.05,
    )
    assert record.reason == "supported=2; required=3; missing=refund-method"


def test_record_fields_spell_what_the_model_dumps(
    store: SQLiteStore, message: MessageFactory
) -> None:
    """record_fields() leaves out exactly the unset fields ScoreRecord's dump leaves out."""
    for policy in (BANDED, OBSERVING, None):
        record = process(message(), store=store, policy=policy, clock=at(1)).record
        dumped = record.model_dump(mode="json")
        del dumped["event"]

        assert list(record_fields(record)) == list(dumped)
