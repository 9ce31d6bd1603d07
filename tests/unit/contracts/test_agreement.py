"""contracts.agreement: κ, its 95% interval and the recommendation (SPEC §12), checked against
statsmodels' independent implementation."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import cohens_kappa as sm_cohens_kappa
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from contracts.agreement import (
    DISAGREE_MESSAGE,
    CandidateAgreement,
    ReviewedRow,
    agreement,
    bootstrap_indices,
    cohen_kappa,
    fleiss_kappa,
    fleiss_kappa_interval,
    recommend,
)

P, F = True, False


def pairs(
    both_fail: int, a_fail_b_pass: int, a_pass_b_fail: int, both_pass: int
) -> Sequence[tuple[bool, ...]]:
    """Two reviewers' decisions from a 2x2 table (A's category by B's)."""
    return (
        [(F, F)] * both_fail
        + [(F, P)] * a_fail_b_pass
        + [(P, F)] * a_pass_b_fail
        + [(P, P)] * both_pass
    )


# (both fail, A fail B pass, A pass B fail, both pass)
TABLES = {
    "perfect agreement": (4, 0, 0, 6),
    "chance agreement": (5, 5, 5, 5),
    "substantial": (10, 2, 1, 17),
    "one reviewer always fails": (5, 1, 0, 0),
    "systematic disagreement": (1, 6, 6, 1),
    "mostly passing": (1, 2, 2, 45),
}


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # its z test
@pytest.mark.parametrize("table", TABLES.values(), ids=TABLES.keys())
def test_cohen_kappa_and_its_interval_are_statsmodels(table: tuple[int, int, int, int]) -> None:
    """κ, kappa_low and kappa_high equal statsmodels' cohens_kappa (its bounds clipped to -1..1)."""
    found = cohen_kappa(pairs(*table))
    expected = sm_cohens_kappa(np.array([[table[0], table[1]], [table[2], table[3]]]))

    assert found.kappa == pytest.approx(expected.kappa, abs=1e-12)
    assert found.low == pytest.approx(max(-1.0, expected.kappa_low), abs=1e-7)
    assert found.high == pytest.approx(min(1.0, expected.kappa_upp), abs=1e-7)


def test_chance_agreement_is_exactly_zero() -> None:
    """Agreement at chance level gives κ = 0.0 exactly (fractions, not 1e-16)."""
    assert cohen_kappa(pairs(5, 5, 5, 5)).kappa == 0.0


def test_perfect_agreement_is_one_with_a_zero_width_interval() -> None:
    """Perfect agreement with both categories: κ = 1 and the large-sample interval [1, 1]."""
    found = cohen_kappa(pairs(4, 0, 0, 6))

    assert (found.kappa, found.low, found.high) == (1.0, 1.0, 1.0)


def test_one_category_only_leaves_kappa_undefined_with_a_reason() -> None:
    """Every decision pass: κ is None with the reason, and the statistics dump no NaN."""
    rows = [ReviewedRow(candidate_passes=True, decisions=(P, P))] * 4

    found = agreement(0.8, rows)

    assert (found.kappa, found.kappa_low, found.kappa_high) == (None, None, None)
    assert found.kappa_reason == "every decision is pass: kappa needs both pass and fail"
    assert (found.percent_agreement, found.threshold_agreement) == (1.0, 1.0)
    assert "NaN" not in json.dumps(found.model_dump(mode="json"))


def test_no_rows_leaves_every_statistic_undefined() -> None:
    """n = 0: nothing to measure, each statistic None and the reason says why."""
    found = agreement(0.85, [])

    assert found.model_dump(exclude={"estimator"}) == {
        "candidate": 0.85,
        "n": 0,
        "percent_agreement": None,
        "kappa": None,
        "kappa_low": None,
        "kappa_high": None,
        "kappa_reason": "no row was decided by every reviewer",
        "threshold_agreement": None,
    }


THREE: dict[str, Sequence[tuple[bool, ...]]] = {
    "three reviewers, substantial": [(P, P, P)] * 10
    + [(P, F, P)] * 4
    + [(F, F, F)] * 6
    + [(F, P, F)] * 2,
    "three reviewers, near chance": [(P, F, P), (F, P, F), (P, P, F), (F, F, P)] * 4
    + [(P, P, P), (F, F, F)],
    "four reviewers": [(P, P, P, P)] * 7 + [(F, F, F, F)] * 5 + [(P, P, F, P)] * 3,
}


@pytest.mark.parametrize("decisions", THREE.values(), ids=THREE.keys())
def test_fleiss_kappa_is_statsmodels(decisions: Sequence[tuple[bool, ...]]) -> None:
    """Fleiss' κ for three or more reviewers equals statsmodels' fleiss_kappa."""
    counts, _ = aggregate_raters(np.array(decisions, dtype=int))

    assert fleiss_kappa(decisions) == pytest.approx(sm_fleiss_kappa(counts), abs=1e-12)


@pytest.mark.parametrize("decisions", THREE.values(), ids=THREE.keys())
def test_fleiss_interval_is_the_percentile_bootstrap_of_statsmodels_kappa(
    decisions: Sequence[tuple[bool, ...]],
) -> None:
    """The interval is the 2.5%/97.5% numpy percentiles of statsmodels' κ over the same
    seeded resamples, undefined resamples left out."""
    kappas = []
    for indices in bootstrap_indices(len(decisions)):
        sample = [decisions[i] for i in indices]
        if len({d for row in sample for d in row}) == 2:
            kappas.append(sm_fleiss_kappa(aggregate_raters(np.array(sample, dtype=int))[0]))

    found = fleiss_kappa_interval(decisions)

    assert found.low == pytest.approx(max(-1.0, np.percentile(kappas, 2.5)), abs=1e-9)
    assert found.high == pytest.approx(min(1.0, np.percentile(kappas, 97.5)), abs=1e-9)


def test_the_bootstrap_interval_is_the_same_every_time() -> None:
    """The same decisions give the same interval: the resamples are seeded."""
    decisions = THREE["three reviewers, substantial"]

    assert fleiss_kappa_interval(decisions) == fleiss_kappa_interval(decisions)


def test_three_reviewers_use_fleiss_and_two_use_cohen() -> None:
    """The estimator named on the statistics follows the number of reviewers."""
    two = agreement(0.8, [ReviewedRow(candidate_passes=P, decisions=d) for d in pairs(3, 1, 1, 5)])
    three = agreement(
        0.8,
        [ReviewedRow(candidate_passes=P, decisions=d) for d in THREE["four reviewers"]],
    )

    assert two.estimator.startswith("Cohen's kappa")
    assert three.estimator.startswith("Fleiss' kappa")


def test_percent_and_threshold_agreement_count_unanimous_rows() -> None:
    """percent_agreement: rows decided alike by all; threshold_agreement: those of them whose
    decision is the candidate's own."""
    rows = [
        ReviewedRow(candidate_passes=P, decisions=(P, P, P)),  # unanimous, as the candidate
        ReviewedRow(candidate_passes=P, decisions=(F, F, F)),  # unanimous, against it
        ReviewedRow(candidate_passes=F, decisions=(F, F, F)),  # unanimous, as the candidate
        ReviewedRow(candidate_passes=F, decisions=(F, P, F)),  # split
    ]

    found = agreement(0.85, rows)

    assert (found.n, found.percent_agreement, found.threshold_agreement) == (4, 0.75, 0.5)


def candidate(
    value: float, kappa_low: float | None, threshold_agreement: float
) -> CandidateAgreement:
    return CandidateAgreement(
        candidate=value,
        n=20,
        percent_agreement=0.9,
        kappa=None if kappa_low is None else kappa_low + 0.1,
        kappa_low=kappa_low,
        kappa_high=None if kappa_low is None else min(1.0, kappa_low + 0.2),
        kappa_reason=None
        if kappa_low is not None
        else "every decision is pass: kappa needs both pass and fail",
        threshold_agreement=threshold_agreement,
        estimator="",
    )


def test_the_recommendation_is_the_best_threshold_agreement_with_kappa_low_at_least_0_6() -> None:
    """A candidate with a higher threshold agreement but kappa_low under 0.6 is passed over."""
    found = recommend(
        [candidate(0.8, 0.65, 0.7), candidate(0.85, 0.59, 0.95), candidate(0.9, 0.6, 0.8)]
    )

    assert found.recommendation == 0.9
    assert found.message == (
        "recommend 0.9: the highest threshold agreement (0.800) of the 2 of 3 candidates "
        "whose kappa_low is at least 0.6"
    )


def test_a_tie_goes_to_the_lowest_candidate() -> None:
    """Equal threshold agreement: the lowest of the tied candidates."""
    found = recommend(
        [candidate(0.9, 0.7, 0.8), candidate(0.85, 0.7, 0.8), candidate(0.8, 0.7, 0.6)]
    )

    assert found.recommendation == 0.85


def test_no_qualifying_candidate_gives_no_recommendation_and_the_message() -> None:
    """Every kappa_low under 0.6 or undefined: no pick, the message says what to do instead."""
    found = recommend([candidate(0.8, 0.2, 0.9), candidate(0.85, None, 1.0)])

    assert (found.recommendation, found.message) == (None, DISAGREE_MESSAGE)
    assert found.message == (
        "reviewers disagree at every candidate: improve the claim contract, split the "
        "population, or route borderline rows to review (review_band)"
    )


def test_kappa_is_never_nan() -> None:
    """Over every 2x2 table of up to 4 rows, κ and its bounds are a finite number or None."""
    for a in range(5):
        for b in range(5 - a):
            for c in range(5 - a - b):
                for d in range(5 - a - b - c):
                    found = cohen_kappa(pairs(a, b, c, d))
                    for value in (found.kappa, found.low, found.high):
                        assert value is None or math.isfinite(value)
