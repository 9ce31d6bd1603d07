"""Reviewer agreement at each candidate threshold, and the threshold it recommends (SPEC §12).

Pure: reviewed rows in, one CandidateAgreement per candidate and a Recommendation out.

- `percent_agreement`: the share of rows every reviewer decided alike (for two reviewers, the
  share they agree on).
- `kappa`: Cohen's κ for two reviewers (Cohen 1960), Fleiss' κ for three or more (Fleiss
  1971), over the two categories pass and fail.
- `kappa_low`, `kappa_high`, the 95% interval. Two reviewers: κ ± z·SE with the large-sample
  standard error of Fleiss, Cohen & Everitt (1969), "Large sample standard errors of kappa
  and weighted kappa", Psychological Bulletin 72(5) (the one statsmodels' `cohens_kappa`
  gives as `std_kappa`), z = 1.959963984540054. Three or more: a percentile bootstrap over
  rows (Efron & Tibshirani 1993, ch. 13): BOOTSTRAP_RESAMPLES resamples of the rows drawn
  with `random.Random(BOOTSTRAP_SEED)`, so the same sheets give the same interval, resamples
  whose κ is undefined (one category only) left out, the 2.5% and 97.5% quantiles by linear
  interpolation (numpy's default). Both bounds are clipped to -1..1.
- κ is undefined (None, never NaN, with `kappa_reason`) when no row was decided by every
  reviewer, or when every decision is the same (chance agreement is then 1).
- `threshold_agreement`: the share of rows decided unanimously where the candidate's own
  decision (value ≥ candidate passes) equals the reviewers'.

The recommendation: the candidate with the highest threshold_agreement among those whose
kappa_low ≥ MIN_KAPPA_LOW; on a tie, the lowest of the tied candidates (the reviewers'
decisions cannot tell them apart, and the lowest blocks the fewest rows). None qualifies:
no recommendation and DISAGREE_MESSAGE. Never a silent pick.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from fractions import Fraction

from pydantic import BaseModel, ConfigDict, Field

Z_95 = 1.959963984540054
MIN_KAPPA_LOW = 0.6
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261207
DISAGREE_MESSAGE = (
    "reviewers disagree at every candidate: improve the claim contract, split the population, "
    "or route borderline rows to review (review_band)"
)
NO_ROWS = "no row was decided by every reviewer"
COHEN = "Cohen's kappa, 95% interval: asymptotic SE of Fleiss, Cohen & Everitt (1969)"
FLEISS = (
    f"Fleiss' kappa, 95% interval: percentile bootstrap over rows ({BOOTSTRAP_RESAMPLES} "
    f"resamples, seed {BOOTSTRAP_SEED})"
)


class ReviewedRow(BaseModel):
    """One row every reviewer decided: the candidate's own decision and theirs (True: pass)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate_passes: bool
    decisions: tuple[bool, ...] = Field(min_length=2)


class CandidateAgreement(BaseModel):
    """The agreement of the reviewers at one candidate threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: float
    n: int
    percent_agreement: float | None
    kappa: float | None
    kappa_low: float | None
    kappa_high: float | None
    kappa_reason: str | None  # why kappa is None; None when it is defined
    threshold_agreement: float | None
    estimator: str


class Recommendation(BaseModel):
    """The recommended candidate (None: none qualifies) and the one line that says why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recommendation: float | None
    message: str


class Kappa(BaseModel):
    """κ with its interval, or None and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kappa: float | None
    low: float | None = None
    high: float | None = None
    reason: str | None = None


def agreement(candidate: float, rows: Sequence[ReviewedRow]) -> CandidateAgreement:
    """The agreement statistics of the rows reviewed at `candidate`; every row must carry
    the same number of reviewers' decisions."""
    raters = {len(row.decisions) for row in rows}
    if len(raters) > 1:
        raise ValueError(f"rows carry different numbers of decisions: {sorted(raters)}")
    n = len(rows)
    two = raters == {2} or not raters
    estimator = COHEN if two else FLEISS
    if n == 0:
        return CandidateAgreement(
            candidate=candidate,
            n=0,
            percent_agreement=None,
            kappa=None,
            kappa_low=None,
            kappa_high=None,
            kappa_reason=NO_ROWS,
            threshold_agreement=None,
            estimator=estimator,
        )
    decisions = [row.decisions for row in rows]
    unanimous = [len(set(d)) == 1 for d in decisions]
    matched = sum(
        same and row.decisions[0] == row.candidate_passes
        for same, row in zip(unanimous, rows, strict=True)
    )
    found = cohen_kappa(decisions) if two else fleiss_kappa_interval(decisions)
    return CandidateAgreement(
        candidate=candidate,
        n=n,
        percent_agreement=sum(unanimous) / n,
        kappa=found.kappa,
        kappa_low=found.low,
        kappa_high=found.high,
        kappa_reason=found.reason,
        threshold_agreement=matched / n,
        estimator=estimator,
    )


def cohen_kappa(decisions: Sequence[tuple[bool, ...]]) -> Kappa:
    """Cohen's κ of two reviewers with the Fleiss-Cohen-Everitt (1969) large-sample 95%
    interval (statsmodels' cohens_kappa, clipped to -1..1). Exact arithmetic (fractions) up
    to the square root: chance-level agreement is κ = 0, not 1e-16."""
    n = len(decisions)
    if n == 0:
        return Kappa(kappa=None, reason=NO_ROWS)
    # table[a][b]: the share of rows reviewer A put in category a and B in b (0 fail, 1 pass).
    counts = [[0, 0], [0, 0]]
    for a, b in decisions:
        counts[int(a)][int(b)] += 1
    table = [[Fraction(c, n) for c in row] for row in counts]
    rows_ = [table[i][0] + table[i][1] for i in range(2)]
    cols = [table[0][j] + table[1][j] for j in range(2)]
    observed = table[0][0] + table[1][1]
    expected = rows_[0] * cols[0] + rows_[1] * cols[1]
    if expected == 1:
        return Kappa(kappa=None, reason=_one_category(decisions))
    kappa = (observed - expected) / (1 - expected)
    term_a = sum(table[i][i] * (1 - (rows_[i] + cols[i]) * (1 - kappa)) ** 2 for i in range(2))
    term_b = (1 - kappa) ** 2 * sum(
        table[i][j] * (cols[i] + rows_[j]) ** 2 for i in range(2) for j in range(2) if i != j
    )
    term_c = (kappa - expected * (1 - kappa)) ** 2
    variance = max(Fraction(0), (term_a + term_b - term_c) / (1 - expected) ** 2 / n)
    spread = Z_95 * math.sqrt(variance)
    return Kappa(
        kappa=float(kappa), low=_clip(float(kappa) - spread), high=_clip(float(kappa) + spread)
    )


def fleiss_kappa(decisions: Sequence[tuple[bool, ...]]) -> float | None:
    """Fleiss' κ over pass/fail of rows each decided by the same number (≥ 2) of reviewers;
    None when it is undefined (no rows, or one category only). Exact arithmetic."""
    n = len(decisions)
    if n == 0:
        return None
    k = len(decisions[0])
    passes = [sum(d) for d in decisions]
    share_pass = Fraction(sum(passes), n * k)
    expected = share_pass**2 + (1 - share_pass) ** 2
    if expected == 1:
        return None
    observed = Fraction(sum(p * p + (k - p) ** 2 - k for p in passes), n * k * (k - 1))
    return float((observed - expected) / (1 - expected))


def fleiss_kappa_interval(decisions: Sequence[tuple[bool, ...]]) -> Kappa:
    """Fleiss' κ with its deterministic percentile-bootstrap 95% interval."""
    kappa = fleiss_kappa(decisions)
    if kappa is None:
        return Kappa(kappa=None, reason=_one_category(decisions) if decisions else NO_ROWS)
    resampled = sorted(
        found
        for indices in bootstrap_indices(len(decisions))
        if (found := fleiss_kappa([decisions[i] for i in indices])) is not None
    )
    if not resampled:  # every resample one category only: no interval to give
        return Kappa(kappa=kappa)
    return Kappa(
        kappa=kappa,
        low=_clip(quantile(resampled, 0.025)),
        high=_clip(quantile(resampled, 0.975)),
    )


def bootstrap_indices(n: int) -> list[list[int]]:
    """The row indices of each bootstrap resample of n rows: the same for the same n."""
    draw = random.Random(BOOTSTRAP_SEED)
    return [[int(draw.random() * n) for _ in range(n)] for _ in range(BOOTSTRAP_RESAMPLES)]


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values by linear interpolation (numpy's default method)."""
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


def recommend(candidates: Sequence[CandidateAgreement]) -> Recommendation:
    """The candidate with the highest threshold_agreement among those whose kappa_low ≥
    MIN_KAPPA_LOW (ties: the lowest candidate); none: no recommendation, DISAGREE_MESSAGE."""
    qualified = [
        c
        for c in candidates
        if c.kappa_low is not None
        and c.kappa_low >= MIN_KAPPA_LOW
        and c.threshold_agreement is not None
    ]
    if not qualified:
        return Recommendation(recommendation=None, message=DISAGREE_MESSAGE)
    best = min(qualified, key=lambda c: (-(c.threshold_agreement or 0.0), c.candidate))
    return Recommendation(
        recommendation=best.candidate,
        message=(
            f"recommend {best.candidate!r}: the highest threshold agreement "
            f"({best.threshold_agreement:.3f}) of the {len(qualified)} of "
            f"{len(candidates)} candidates whose kappa_low is at least {MIN_KAPPA_LOW}"
        ),
    )


def _one_category(decisions: Sequence[tuple[bool, ...]]) -> str:
    category = "pass" if decisions[0][0] else "fail"
    return f"every decision is {category}: kappa needs both pass and fail"


def _clip(value: float) -> float:
    return min(1.0, max(-1.0, value))
