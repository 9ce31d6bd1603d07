"""Every ResultStore decides miss, hit and conflict alike: the first outcome is kept, a
different one raises one alert, and outcomes compare exactly (None, 0.0, -0.0, floats, text)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from contracts import Alert
from tests.conftest import FIXED_NOW
from tests.factories import ONE_THIRD_REASON, TWO_THIRDS_REASON
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, OTHER_HASH, TWO_THIRDS, UNKNOWN_REASON, attempt
from worker.stores import Recorded, ResultStore

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_store = suite.make_store
store = suite.store


# --- record: miss, hit, conflict -------------------------------------------------------------


def test_first_record_of_a_hash_is_a_miss_with_itself_as_first(store: ResultStore) -> None:
    """The first attempt under a hash is a miss and is the canonical first attempt."""
    first = attempt(1)

    assert store.record(HASH, first, now=FIXED_NOW) == Recorded(cache="miss", first=first)


def test_same_outcome_again_is_a_hit_returning_the_original_first(store: ResultStore) -> None:
    """A later attempt with the same (value, reason) is a hit whose first is the original."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)
    assert recorded.first.case_id == "refund-001"
    assert recorded.first.task_id == "task-1"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param(0.5, TWO_THIRDS_REASON, id="value-only"),
        pytest.param(TWO_THIRDS, "supported=2; required=3; missing=other", id="reason-only"),
        pytest.param(1 / 3, ONE_THIRD_REASON, id="both"),
    ],
)
def test_different_outcome_is_a_conflict_with_a_kept_first_alert(
    store: ResultStore, value: float, reason: str
) -> None:
    """A different value or a different reason alone is a conflict naming both attempts."""
    first = attempt(1)
    observed = attempt(2, value=value, reason=reason)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, observed, now=FIXED_NOW + timedelta(seconds=5))

    alert = Alert(
        input_hash=HASH,
        decision="kept_first",
        first=first,
        observed=observed,
        raised_at=FIXED_NOW + timedelta(seconds=5),
    )
    assert recorded == Recorded(cache="conflict", first=first, alert=alert)


def test_conflict_alert_is_listed_by_alerts(store: ResultStore) -> None:
    """The alert a conflict returns is the one alerts() lists afterwards."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.5), now=FIXED_NOW)

    assert store.alerts() == [recorded.alert]


def test_hit_raises_no_alert(store: ResultStore) -> None:
    """A confirmation carries no alert and adds none to the alert stream."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2), now=FIXED_NOW)

    assert recorded.alert is None
    assert store.alerts() == []


def test_attempt_equal_to_first_after_a_conflict_is_a_hit(store: ResultStore) -> None:
    """A conflict never replaces the first: a third attempt equal to the first is a hit."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW)
    store.record(HASH, attempt(2, value=0.5), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(3), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)


def test_attempt_equal_to_the_conflicting_one_is_another_conflict(store: ResultStore) -> None:
    """Agreeing with an earlier conflicting attempt is still a conflict with the first, and
    the same conflict is not alerted twice."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW)
    store.record(HASH, attempt(2, value=0.5), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(3, value=0.5), now=FIXED_NOW)

    assert recorded.cache == "conflict"
    assert recorded.first == first
    assert recorded.alert is None
    assert len(store.alerts()) == 1


def test_outcomes_of_different_hashes_are_independent(store: ResultStore) -> None:
    """A different outcome under another hash is a miss there, not a conflict."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(OTHER_HASH, attempt(2, value=0.5), now=FIXED_NOW)

    assert recorded.cache == "miss"
    assert store.alerts() == []


# --- outcomes compare exactly --------------------------------------------------------------


def test_invalid_outcomes_with_the_same_reason_are_a_hit(store: ResultStore) -> None:
    """Two invalid rows (value None) with the same reason agree like any outcome."""
    first = attempt(1, value=None, reason=UNKNOWN_REASON)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=None, reason=UNKNOWN_REASON), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)


@pytest.mark.parametrize(
    ("first_value", "later_value"),
    [pytest.param(None, 0.0, id="none-then-zero"), pytest.param(0.0, None, id="zero-then-none")],
)
def test_none_and_zero_are_never_equal(
    store: ResultStore, first_value: float | None, later_value: float | None
) -> None:
    """An invalid row (None) and a zero score with the same reason are a conflict."""
    store.record(HASH, attempt(1, value=first_value, reason="same"), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=later_value, reason="same"), now=FIXED_NOW)

    assert recorded.cache == "conflict"
    assert recorded.first.value == first_value


def test_invalid_outcomes_with_different_reasons_are_a_conflict(store: ResultStore) -> None:
    """Two invalid rows for different reasons disagree."""
    store.record(HASH, attempt(1, value=None, reason=UNKNOWN_REASON), now=FIXED_NOW)

    recorded = store.record(
        HASH, attempt(2, value=None, reason="required_claim_ids must not be empty"), now=FIXED_NOW
    )

    assert recorded.cache == "conflict"


def test_float_values_round_trip_exactly(store: ResultStore) -> None:
    """A value like 2/3 comes back bit-for-bit from history and the next attempt's first."""
    store.record(HASH, attempt(1, value=2 / 3), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=2 / 3), now=FIXED_NOW)
    history = store.history(HASH)

    assert recorded.cache == "hit"
    assert recorded.first.value == 2 / 3
    assert history is not None
    assert [a.value for a in history.attempts] == [2 / 3, 2 / 3]
    assert history.first.value == 2 / 3


def test_floats_one_bit_apart_are_a_conflict(store: ResultStore) -> None:
    """Outcomes compare exactly: the next float after 2/3 is a different value."""
    store.record(HASH, attempt(1, value=2 / 3), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.6666666666666667), now=FIXED_NOW)

    assert 0.6666666666666667 != 2 / 3
    assert recorded.cache == "conflict"


def test_non_ascii_reasons_compare_and_round_trip(store: ResultStore) -> None:
    """A reason with non-ASCII text is stored verbatim and confirms itself."""
    reason = "supported=1; required=2; missing=réf-ünïcode"
    first = attempt(1, value=0.5, reason=reason)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.5, reason=reason), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)


# --- "same outcome": one definition, every store alike ------------------------------------


@pytest.mark.parametrize(
    ("first", "later", "cache"),
    [
        pytest.param((0.5, "r"), (0.5, "r"), "hit", id="equal"),
        pytest.param((0.5, "r"), (0.50000000001, "r"), "conflict", id="0.5-vs-0.50000000001"),
        pytest.param((0.0, "r"), (-0.0, "r"), "conflict", id="zero-then-negative-zero"),
        pytest.param((-0.0, "r"), (-0.0, "r"), "hit", id="negative-zero-twice"),
        pytest.param((0.5, "a b"), (0.5, "a  b"), "conflict", id="reason-inner-whitespace"),
        pytest.param((0.5, "r"), (0.5, "r "), "conflict", id="reason-trailing-space"),
        pytest.param((0.5, "r"), (0.5, "r\n"), "conflict", id="reason-trailing-newline"),
        pytest.param((float("nan"), "r"), (None, "r"), "hit", id="nan-is-kept-as-null"),
    ],
)
def test_every_store_decides_same_outcome_alike(
    store: ResultStore,
    first: tuple[float | None, str],
    later: tuple[float | None, str],
    cache: str,
) -> None:
    """Each store compares outcome_json() strings: the same hit or conflict on edge cases."""
    store.record(HASH, attempt(1, value=first[0], reason=first[1]), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=later[0], reason=later[1]), now=FIXED_NOW)

    assert recorded.cache == cache
