"""The determinism canary: re-score stored first outcomes with the code installed now.

Run after upgrading Ragas or the metric, before trusting the upgrade: any row whose
(value, reason) changed is a difference, listed with both versions. Reads only.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from contracts import METRIC_VERSION, RAGAS_VERSION, Attempt, evidence_coverage
from contracts.metric import score_pair


@dataclass(frozen=True)
class Difference:
    """One stored first outcome that the installed code no longer reproduces."""

    input_hash: str
    first: Attempt
    now_value: float | None
    now_reason: str
    ragas_value: float | None
    ragas_reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "input_hash": self.input_hash,
            "case_id": self.first.case_id,
            "stored": {
                "value": self.first.value,
                "reason": self.first.reason,
                "metric_version": self.first.metric_version,
                "ragas_version": self.first.ragas_version,
            },
            "now": {
                "value": self.now_value,
                "reason": self.now_reason,
                "metric_version": METRIC_VERSION,
                "ragas_version": RAGAS_VERSION,
            },
            "ragas_score": {"value": self.ragas_value, "reason": self.ragas_reason},
        }


@dataclass
class CanaryResult:
    """How many stored outcomes were re-scored, and which ones differ."""

    seen: int = 0
    checked: int = 0
    differences: list[Difference] = field(default_factory=list)


def sample(
    items: Iterable[tuple[str, Attempt]], size: int | None, seed: int
) -> Iterator[tuple[str, Attempt]]:
    """All items, or a uniform sample of `size` (reservoir sampling: one pass, bounded memory)."""
    if size is None:
        yield from items
        return
    rng = random.Random(seed)
    reservoir: list[tuple[str, Attempt]] = []
    for seen, item in enumerate(items):
        if len(reservoir) < size:
            reservoir.append(item)
        elif (slot := rng.randint(0, seen)) < size:
            reservoir[slot] = item
    yield from reservoir


def check(input_hash: str, first: Attempt) -> Difference | None:
    """Re-score one first attempt through the worker's path and through Ragas itself."""
    now_value, now_reason = score_pair(first.required_claim_ids, first.supported_claim_ids)
    ragas = evidence_coverage.score(
        required_claim_ids=first.required_claim_ids,
        supported_claim_ids=first.supported_claim_ids,
    )
    stored = (first.value, first.reason)
    if stored == (now_value, now_reason) == (ragas.value, ragas.reason):
        return None
    return Difference(
        input_hash=input_hash,
        first=first,
        now_value=now_value,
        now_reason=now_reason,
        ragas_value=ragas.value,
        ragas_reason=ragas.reason,
    )


def run_canary(
    outcomes: Iterable[tuple[str, Attempt]], *, size: int | None = None, seed: int = 0
) -> CanaryResult:
    """Re-score all stored first outcomes, or a seeded sample of them."""
    result = CanaryResult()

    def counted() -> Iterator[tuple[str, Attempt]]:
        for item in outcomes:
            result.seen += 1
            yield item

    for input_hash, first in sample(counted(), size, seed):
        result.checked += 1
        difference = check(input_hash, first)
        if difference is not None:
            result.differences.append(difference)
    return result
