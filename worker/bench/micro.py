"""`bench --micro`: the worker's scoring call against the raw set arithmetic it wraps.

The raw baseline applies the same rules with sets and no reason text; the target is that the
worker's path (exact Ragas reasons included) costs at most 2x that.
"""

from __future__ import annotations

import random
import timeit
from collections.abc import Callable, Sequence
from typing import Any

from contracts import evidence_coverage
from contracts.metric import score_pair


def raw_set_arithmetic(required: Sequence[str], supported: Sequence[str]) -> float | None:
    """The rules as bare set arithmetic: value or None, no reasons."""
    required_set = {claim_id.strip() for claim_id in required}
    supported_set = {claim_id.strip() for claim_id in supported}
    if (
        not required
        or len(required_set) != len(required)
        or len(supported_set) != len(supported)
        or "" in required_set
        or not supported_set <= required_set  # and so no blank in supported either
    ):
        return None
    return len(supported_set) / len(required_set)


def sample_inputs(count: int = 1_000, seed: int = 11) -> list[tuple[list[str], list[str]]]:
    """Realistic claim lists: 2-8 required IDs, a prefix of them supported, a few invalid."""
    rng = random.Random(seed)
    claims = [f"claim-{n}" for n in range(12)]
    inputs = []
    for _ in range(count):
        required = rng.sample(claims, rng.randint(2, 8))
        supported = required[: rng.randint(0, len(required))]
        if rng.random() < 0.05:
            supported = [*supported, "claim-old"]
        inputs.append((required, supported))
    return inputs


def _per_call_us(
    functions: Sequence[Callable[[list[str], list[str]], Any]], inputs: list[Any], rounds: int = 9
) -> list[float]:
    """Best-of-rounds µs per call for each function, interleaved so noise hits all alike."""
    best = [float("inf")] * len(functions)
    for _ in range(rounds):
        for position, function in enumerate(functions):

            def run(function: Callable[[list[str], list[str]], Any] = function) -> None:
                for required, supported in inputs:
                    function(required, supported)

            best[position] = min(best[position], timeit.timeit(run, number=3))
    return [seconds / (3 * len(inputs)) * 1e6 for seconds in best]


def micro() -> dict[str, float]:
    """Best-of-5 µs per call for raw arithmetic, the worker's path and Ragas's .score()."""
    inputs = sample_inputs()
    raw, worker = _per_call_us([raw_set_arithmetic, score_pair], inputs)
    [ragas] = _per_call_us(
        [lambda r, s: evidence_coverage.score(required_claim_ids=r, supported_claim_ids=s)],
        inputs[:50],
        rounds=2,
    )
    return {
        "raw_us_per_call": round(raw, 3),
        "worker_us_per_call": round(worker, 3),
        "ragas_score_us_per_call": round(ragas, 1),
        "ratio_worker_to_raw": round(worker / raw, 3),
        "ratio_ragas_to_worker": round(ragas / worker, 1),
    }
