"""contracts.grader_stability: per grader, inputs, re-grades and flips counted by the stores'
notion of "same outcome", and the 95% Wilson interval of the flip rate, pinned and checked
against statsmodels (SPEC §10)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from statsmodels.stats.proportion import proportion_confint

from contracts.grader_stability import (
    WILSON_Z,
    GraderId,
    GraderStability,
    StabilityTally,
    grader_stability,
    outcome_key,
    same_outcome,
    wilson_interval,
)
from contracts.outcomes import Outcome
from tests.conftest import BASE_MESSAGE
from tests.factories import attempt
from worker.stores.contract import classify

GRADER = GraderId("claim-attributor", "3.2.0", "gpt-4o-mini-2024-07-18")
TWO_THIRDS = Outcome(value=2 / 3, reason="supported=2; required=3; missing=refund-method")
ALL_THREE = Outcome(value=1.0, reason="supported=3; required=3; missing=none")
EMPTY = Outcome(value=None, reason="required_claim_ids must not be empty")
UNKNOWN = Outcome(value=None, reason="supported_claim_ids contains unknown IDs: old-c1")

# --- the interval ------------------------------------------------------------------------

# (flipped, regraded) -> (low, high): the values wilson_interval() gives, digit for digit;
# statsmodels agrees with each to within 2 ulps (test below).
WILSON = [
    (0, 1, 0.0, 0.7934506856227626),
    (1, 1, 0.20654931437723742, 1.0),
    (0, 30, 0.0, 0.11351339317396876),
    (3, 30, 0.03459988874733419, 0.2562108257918408),
    (15, 30, 0.33154125640533766, 0.6684587435946624),
    (30, 30, 0.8864866068260312, 1.0),
    (1, 1000, 0.00017654637062607817, 0.0056425585979579355),
    (999, 1000, 0.9943574414020421, 0.9998234536293739),
    (13, 97, 0.0800245668040993, 0.21589993854994485),
]


@pytest.mark.parametrize(("flipped", "regraded", "low", "high"), WILSON)
def test_the_wilson_interval_is_pinned(
    flipped: int, regraded: int, low: float, high: float
) -> None:
    """Each interval is exactly these two floats."""
    assert wilson_interval(flipped, regraded) == (low, high)


@pytest.mark.parametrize(("flipped", "regraded", "low", "high"), WILSON)
def test_the_pinned_intervals_are_statsmodels_wilson_intervals(
    flipped: int, regraded: int, low: float, high: float
) -> None:
    """statsmodels' proportion_confint(method="wilson") at alpha 0.05, an independent
    implementation, gives the same ends to rounding: its z, scipy's norm.isf(0.025), is
    1.9599639845400545, one ulp from SPEC §10's 1.959963984540054."""
    oracle_low, oracle_high = proportion_confint(flipped, regraded, alpha=0.05, method="wilson")
    assert low == pytest.approx(float(oracle_low), rel=1e-13, abs=1e-15)
    assert high == pytest.approx(float(oracle_high), rel=1e-13, abs=1e-15)


@given(
    st.integers(min_value=1, max_value=100_000).flatmap(
        lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))
    )
)
def test_any_interval_agrees_with_statsmodels_and_holds_the_rate(counts: tuple[int, int]) -> None:
    """Over any count: statsmodels' ends, 0 <= low <= rate <= high <= 1."""
    flipped, regraded = counts
    low, high = wilson_interval(flipped, regraded)
    oracle_low, oracle_high = proportion_confint(flipped, regraded, alpha=0.05, method="wilson")
    assert low == pytest.approx(float(oracle_low), rel=1e-12, abs=1e-15)
    assert high == pytest.approx(float(oracle_high), rel=1e-12, abs=1e-15)
    assert 0.0 <= low <= flipped / regraded <= high <= 1.0


def test_z_is_the_normal_quantile_statsmodels_uses_for_95_percent() -> None:
    """z = Φ⁻¹(0.975), computed here from the error function by bisection."""
    below, above = 1.9, 2.0
    for _ in range(200):
        middle = (below + above) / 2
        below, above = (
            (middle, above) if math.erfc(middle / math.sqrt(2)) > 0.05 else (below, middle)
        )
    assert abs(WILSON_Z - below) < 1e-15


@pytest.mark.parametrize(("flipped", "regraded"), [(0, 0), (1, 0), (-1, 3), (4, 3)], ids=str)
def test_counts_that_are_no_proportion_are_refused(flipped: int, regraded: int) -> None:
    with pytest.raises(ValueError, match="need 0 <= successes <= trials and trials >= 1"):
        wilson_interval(flipped, regraded)


# --- what counts as the same outcome -------------------------------------------------------

SAME_OR_NOT = [
    ("equal values and reasons", TWO_THIRDS, TWO_THIRDS, True),
    ("another value", TWO_THIRDS, ALL_THREE, False),
    ("another reason, same value", ALL_THREE, Outcome(value=1.0, reason="other"), False),
    (
        "a value one ulp away",
        Outcome(value=0.5, reason="r"),
        Outcome(value=0.5000000000000001, reason="r"),
        False,
    ),
    (
        "0.0 and -0.0 (repr differs)",
        Outcome(value=0.0, reason="r"),
        Outcome(value=-0.0, reason="r"),
        False,
    ),
    ("invalid, same reason", EMPTY, EMPTY, True),
    ("invalid, another reason", EMPTY, UNKNOWN, False),
    (
        "None and NaN (both kept as null)",
        Outcome(value=None, reason="r"),
        Outcome(value=math.nan, reason="r"),
        True,
    ),
    (
        "NaN and infinity (both kept as null)",
        Outcome(value=math.nan, reason="r"),
        Outcome(value=math.inf, reason="r"),
        True,
    ),
    (
        "trailing whitespace in a reason counts",
        Outcome(value=1.0, reason="r"),
        Outcome(value=1.0, reason="r "),
        False,
    ),
]


@pytest.mark.parametrize(
    ("first", "other", "same"),
    [case[1:] for case in SAME_OR_NOT],
    ids=[case[0] for case in SAME_OR_NOT],
)
def test_same_outcome_is_what_the_stores_call_a_hit(
    first: Outcome, other: Outcome, same: bool
) -> None:
    """same_outcome() is True exactly where a store's classify() says hit, not conflict."""
    assert same_outcome(first, other) is same
    stored = classify(
        attempt(value=first.value, reason=first.reason),
        attempt(value=other.value, reason=other.reason),
    )
    assert stored == ("hit" if same else "conflict")


@given(
    st.one_of(st.none(), st.floats()),
    st.one_of(st.none(), st.floats()),
    st.sampled_from(["r", "r ", "s", "supported=1; required=1; missing=none"]),
    st.sampled_from(["r", "r ", "s", "supported=1; required=1; missing=none"]),
)
def test_same_outcome_agrees_with_the_stores_on_any_pair(
    first_value: float | None, other_value: float | None, first_reason: str, other_reason: str
) -> None:
    """For any values (NaN, infinities, signed zeros included) and reasons."""
    first, other = (
        Outcome(value=first_value, reason=first_reason),
        Outcome(value=other_value, reason=other_reason),
    )
    stored = classify(
        attempt(value=first_value, reason=first_reason),
        attempt(value=other_value, reason=other_reason),
    )
    assert same_outcome(first, other) is (stored == "hit")


def test_an_attempt_is_judged_by_its_outcome_alone() -> None:
    """A stored Attempt feeds the count as it is: only its value and reason are read."""
    stored = attempt(value=2 / 3, reason=TWO_THIRDS.reason, case_id="another-case", task_id="t-9")
    assert outcome_key(stored) == outcome_key(TWO_THIRDS) == (repr(2 / 3), TWO_THIRDS.reason)


# --- the counting rules ----------------------------------------------------------------------

COUNTING = [
    # name, one hash's attempts in order, (inputs, regraded, flipped)
    ("one attempt: not re-graded", [TWO_THIRDS], (1, 0, 0)),
    ("two equal: re-graded, not flipped", [TWO_THIRDS, TWO_THIRDS], (1, 1, 0)),
    ("two different: flipped", [TWO_THIRDS, ALL_THREE], (1, 1, 1)),
    ("three, the third differs: flipped", [TWO_THIRDS, TWO_THIRDS, ALL_THREE], (1, 1, 1)),
    (
        "three, the second differs and the third returns: flipped",
        [TWO_THIRDS, ALL_THREE, TWO_THIRDS],
        (1, 1, 1),
    ),
    ("five equal: one re-grade, not five", [ALL_THREE] * 5, (1, 1, 0)),
    ("invalid twice, same reason: not flipped", [EMPTY, EMPTY], (1, 1, 0)),
    ("invalid twice, different reasons: flipped", [EMPTY, UNKNOWN], (1, 1, 1)),
    ("valid then invalid: flipped", [ALL_THREE, EMPTY], (1, 1, 1)),
]


@pytest.mark.parametrize(
    ("attempts", "counts"), [case[1:] for case in COUNTING], ids=[case[0] for case in COUNTING]
)
def test_one_input_hash_counts(attempts: Sequence[Outcome], counts: tuple[int, int, int]) -> None:
    (row,) = grader_stability([(GRADER, "h1", attempts)])
    assert (row.grader, row.inputs, row.regraded, row.flipped) == (GRADER, *counts)


def test_rate_and_interval_follow_the_counts() -> None:
    """Four inputs: one not re-graded, two re-graded alike, one flipped: 1 of 3."""
    row = grader_stability(
        [
            (GRADER, "h1", [TWO_THIRDS]),
            (GRADER, "h2", [TWO_THIRDS, TWO_THIRDS]),
            (GRADER, "h3", [EMPTY, EMPTY, EMPTY]),
            (GRADER, "h4", [ALL_THREE, TWO_THIRDS]),
        ]
    )[0]
    low, high = wilson_interval(1, 3)
    assert row == GraderStability(GRADER, inputs=4, regraded=3, flipped=1)
    assert (row.flip_rate, row.flip_rate_low, row.flip_rate_high) == (1 / 3, low, high)
    assert (low, high) == (0.061491944720396215, 0.7923403991979523)


def test_a_grader_with_nothing_re_graded_has_no_rate_and_no_interval() -> None:
    """Null, not 0: one look at each input says nothing about flipping."""
    row = grader_stability([(GRADER, "h1", [TWO_THIRDS]), (GRADER, "h2", [EMPTY])])[0]
    assert (row.inputs, row.regraded, row.flipped) == (2, 0, 0)
    assert (row.flip_rate, row.flip_rate_low, row.flip_rate_high) == (None, None, None)


def test_a_hash_without_attempts_is_not_an_input() -> None:
    assert grader_stability([(GRADER, "h1", [])]) == []


@pytest.mark.parametrize(
    "other",
    [
        GraderId("claim-attributor-v2", GRADER.version, GRADER.model),
        GraderId(GRADER.name, "3.3.0", GRADER.model),
        GraderId(GRADER.name, GRADER.version, "gpt-4o-2024-08-06"),
    ],
    ids=["name", "version", "model"],
)
def test_graders_differing_in_any_one_name_are_counted_apart(other: GraderId) -> None:
    """One flipped hash under GRADER, one steady hash under the other: two rows, no mixing,
    even where both graders report the same input hash."""
    rows = grader_stability(
        [
            (GRADER, "h1", [TWO_THIRDS, ALL_THREE]),
            (other, "h1", [TWO_THIRDS, TWO_THIRDS]),
        ]
    )
    assert sorted(rows, key=lambda row: row.grader) == rows
    assert {row.grader: (row.inputs, row.regraded, row.flipped) for row in rows} == {
        GRADER: (1, 1, 1),
        other: (1, 1, 0),
    }


def test_the_tally_takes_attempts_one_at_a_time_interleaved_across_hashes() -> None:
    """As record lines arrive: hashes interleave, each hash's attempts in order."""
    tally = StabilityTally()
    for input_hash, outcome in [
        ("h1", TWO_THIRDS),
        ("h2", EMPTY),
        ("h1", TWO_THIRDS),
        ("h2", UNKNOWN),
        ("h1", ALL_THREE),
    ]:
        tally.add(GRADER, input_hash, outcome)
    assert tally.rows() == [GraderStability(GRADER, inputs=2, regraded=2, flipped=2)]


def test_a_grader_id_is_a_message_grader_s_name_version_and_model() -> None:
    """Prompt and params are not part of the identity (they are of the input hash)."""
    from contracts import Grader

    grader = Grader.model_validate(BASE_MESSAGE["grader"])
    assert GraderId.of(grader) == GRADER


# --- the published object ----------------------------------------------------------------------


def test_as_json_names_the_grader_and_every_figure() -> None:
    row = GraderStability(GRADER, inputs=40, regraded=30, flipped=3)
    assert row.as_json() == {
        "grader_name": "claim-attributor",
        "grader_version": "3.2.0",
        "grader_model": "gpt-4o-mini-2024-07-18",
        "inputs": 40,
        "regraded": 30,
        "flipped": 3,
        "flip_rate": 0.1,
        "flip_rate_low": 0.03459988874733419,
        "flip_rate_high": 0.2562108257918408,
    }


def test_as_json_is_null_for_the_rate_and_interval_without_re_grades() -> None:
    row = GraderStability(GRADER, inputs=5, regraded=0, flipped=0)
    assert row.as_json() == {
        "grader_name": "claim-attributor",
        "grader_version": "3.2.0",
        "grader_model": "gpt-4o-mini-2024-07-18",
        "inputs": 5,
        "regraded": 0,
        "flipped": 0,
        "flip_rate": None,
        "flip_rate_low": None,
        "flip_rate_high": None,
    }


def test_a_row_is_frozen() -> None:
    row = GraderStability(GRADER, inputs=1, regraded=0, flipped=0)
    with pytest.raises(AttributeError):
        row.flipped = 1  # type: ignore[misc]
