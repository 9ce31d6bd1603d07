"""Deterministic sampling of production traffic (SPEC §10): which cases to score, which to grade
twice.

A case is in the sample at rate R when the first 8 bytes of the SHA-256 of its key, read as a
big-endian integer over 2**64, fall below R. The decision depends on the key alone, so every
publisher (`publish --sample-rate`, the client's `sample_rate`, a job of any language that
hashes the same way) picks the same cases, and raising the rate only adds cases: the 10% set
lies inside the 25% set. `should_regrade` hashes "regrade:" + case ID, so the cases graded twice
are independent of the cases scored at all.
"""

from __future__ import annotations

import hashlib
import math

# The share of 2**64 that the first 8 bytes of a digest are read as.
_SPAN = 2**64
REGRADE_PREFIX = "regrade:"


def sample_point(key: str) -> float:
    """Where `key` falls in [0, 1): its SHA-256's first 8 bytes, big-endian, over 2**64.

    Converting the 64-bit integer to a float rounds it, and can round it up to exactly 1.0 for
    the last 2**10 integers: at R = 1 those must still be sampled, which sampled() keeps by
    sending everything at R = 1 rather than trusting `< 1.0`.
    """
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / _SPAN


def check_rate(rate: float) -> float:
    """`rate` as a float when it is a finite number in 0.0..1.0; else ValueError saying so."""
    if isinstance(rate, bool) or not isinstance(rate, int | float):
        raise ValueError(f"sample rate {rate!r} is not a number in 0.0..1.0")
    if not math.isfinite(rate):
        raise ValueError(f"sample rate {rate!r} is not a finite number in 0.0..1.0")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"sample rate {rate!r} is outside 0.0..1.0")
    return float(rate)


def sampled(key: str, rate: float) -> bool:
    """True when `key` is in the sample at `rate` (0 samples nothing, 1 everything)."""
    check_rate(rate)
    if rate >= 1.0:
        return True  # sample_point() may round to 1.0 (see there); R = 1 is everything
    return sample_point(key) < rate


def should_regrade(case_id: str, rate: float) -> bool:
    """True when the upstream job should grade `case_id` a second time, at `rate`.

    Hashed as "regrade:" + case ID, so the regrade subset is independent of sampled(case_id,
    ...): a re-grade is asked of a fair share of whatever was sampled, never of a slice of it.
    """
    return sampled(REGRADE_PREFIX + case_id, rate)
