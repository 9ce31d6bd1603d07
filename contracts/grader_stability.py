"""Grader stability (SPEC §10): per grader, how often re-grading the same inputs changed the
outcome, with a 95% Wilson score interval around that rate.

A grader is (grader.name, grader.version, grader.model). An input hash is re-graded when it
has at least two attempts, and flipped when some attempt's outcome differs from its first
attempt's, "differs" meaning what the stores mean by a conflict (same_outcome()). Pure: the
caller reads attempts from a store or record lines and feeds them in order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from contracts.messages import Grader
from contracts.outcomes import value_json

# The 0.975 quantile of the standard normal: a two-sided 95% interval.
WILSON_Z = 1.959963984540054


class GraderId(NamedTuple):
    """Who graded: the part of a message's grader that names it (prompt and params aside)."""

    name: str
    version: str
    model: str

    @classmethod
    def of(cls, grader: Grader) -> GraderId:
        return cls(grader.name, grader.version, grader.model)


class Judged(Protocol):
    """Anything with an outcome: an Outcome, an Attempt, a record's (value, reason)."""

    @property
    def value(self) -> float | None: ...

    @property
    def reason(self) -> str: ...


OutcomeKey = tuple[str, str]


def outcome_key(judged: Judged) -> OutcomeKey:
    """Two outcomes are the same exactly when their keys are equal: the stores' definition
    (worker/stores/contract.py outcome_json()), the value spelled by the same value_json() and the
    reason verbatim. A test holds the two together."""
    return value_json(judged.value), judged.reason


def same_outcome(first: Judged, other: Judged) -> bool:
    """True when `other` confirms `first` (a hit), False when it conflicts with it."""
    return outcome_key(first) == outcome_key(other)


def wilson_interval(successes: int, trials: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of successes / trials (trials >= 1).

    By hand: it is three lines, and contracts/ is pure, with no statistics dependency
    (statsmodels' proportion_confint(method="wilson") is the tests' oracle for it). At 0
    successes the low end is 0 and at `trials` the high end is 1, exactly: there the
    formula's two terms cancel only to within an ulp, which could print as -1e-17.
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1: {successes}/{trials}")
    p, n, z2 = successes / trials, trials, z * z
    centre, denominator = p + z2 / (2 * n), 1 + z2 / n
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low, high = (centre - spread) / denominator, (centre + spread) / denominator
    return (0.0 if successes == 0 else low), (1.0 if successes == n else high)


@dataclass(frozen=True)
class GraderStability:
    """One grader's figures: distinct inputs, those re-graded, those whose outcome flipped."""

    grader: GraderId
    inputs: int
    regraded: int
    flipped: int

    @property
    def flip_rate(self) -> float | None:
        """flipped / regraded; None when nothing was re-graded (no evidence either way)."""
        return self.flipped / self.regraded if self.regraded else None

    @property
    def flip_rate_low(self) -> float | None:
        """The low end of flip_rate's 95% Wilson interval; None when nothing was re-graded."""
        return wilson_interval(self.flipped, self.regraded)[0] if self.regraded else None

    @property
    def flip_rate_high(self) -> float | None:
        """The high end of flip_rate's 95% Wilson interval; None when nothing was re-graded."""
        return wilson_interval(self.flipped, self.regraded)[1] if self.regraded else None

    def as_json(self) -> dict[str, Any]:
        """The published object: the grader's three names, the counts, the rate and interval
        (null, all three, when nothing was re-graded)."""
        return {
            "grader_name": self.grader.name,
            "grader_version": self.grader.version,
            "grader_model": self.grader.model,
            "inputs": self.inputs,
            "regraded": self.regraded,
            "flipped": self.flipped,
            "flip_rate": self.flip_rate,
            "flip_rate_low": self.flip_rate_low,
            "flip_rate_high": self.flip_rate_high,
        }


@dataclass
class _Input:
    """What is kept of one input hash while counting: its first outcome and what came after."""

    first: OutcomeKey
    attempts: int = 1
    flipped: bool = False


@dataclass
class StabilityTally:
    """Counts attempts as they come, one input hash's in the order they were recorded; memory
    is one small entry per (grader, input hash), never the attempts themselves."""

    _inputs: dict[tuple[GraderId, str], _Input] = field(default_factory=dict)

    def add(self, grader: GraderId, input_hash: str, judged: Judged) -> None:
        """One attempt at `input_hash` by `grader`; its hash's earlier attempts came first."""
        key = outcome_key(judged)
        seen = self._inputs.get((grader, input_hash))
        if seen is None:
            self._inputs[grader, input_hash] = _Input(key)
            return
        seen.attempts += 1
        seen.flipped = seen.flipped or key != seen.first

    def add_line(
        self, grader: GraderId, input_hash: str, cache: str | None, first: Judged, own: Judged
    ) -> None:
        """One record line's attempt: `own` is its outcome, `first` its hash's first (a
        hit's or a conflict's value/reason). A hash whose first line here is a hit or a
        conflict (a file that starts mid-stream) has its first taken from it, so the
        re-grade the line is still counts."""
        if cache in ("hit", "conflict") and (grader, input_hash) not in self._inputs:
            self.add(grader, input_hash, first)
        self.add(grader, input_hash, own)

    def rows(self) -> list[GraderStability]:
        """One row per grader seen, ordered by (name, version, model)."""
        inputs: Counter[GraderId] = Counter()
        regraded: Counter[GraderId] = Counter()
        flipped: Counter[GraderId] = Counter()
        for (grader, _), seen in self._inputs.items():
            inputs[grader] += 1
            if seen.attempts >= 2:
                regraded[grader] += 1
            if seen.flipped:
                flipped[grader] += 1
        return [
            GraderStability(grader, inputs[grader], regraded[grader], flipped[grader])
            for grader in sorted(inputs)
        ]


def least_stable_first(rows: Iterable[GraderStability]) -> list[GraderStability]:
    """By flip_rate_low descending (what the data show at the least), graders with nothing
    re-graded last, ties by (name, version, model)."""
    ordered = sorted(rows, key=lambda row: row.grader)
    return sorted(ordered, key=lambda row: 1.0 if row.flip_rate_low is None else -row.flip_rate_low)


def grader_stability(
    histories: Iterable[tuple[GraderId, str, Sequence[Judged]]],
) -> list[GraderStability]:
    """Per grader, from each input hash's (grader, hash, attempts in recorded order); a hash
    with no attempts is not an input seen."""
    tally = StabilityTally()
    for grader, input_hash, attempts in histories:
        for judged in attempts:
            tally.add(grader, input_hash, judged)
    return tally.rows()
