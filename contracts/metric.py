"""The evidence-coverage rules: what a coverage number means (SPEC §1), without Ragas.

The Ragas metric object wrapping these rules lives in contracts/ragas_metric.py and is
imported only where it is called (the canary, the equivalence tests): importing Ragas is
most of a process's start-up time and memory, and the scoring path never needs it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from typing import Final

METRIC_NAME: Final = "evidence_coverage"
METRIC_VERSION: Final = "evidence_coverage/1"
ALLOWED_RANGE: Final = (0.0, 1.0)
RAGAS_VERSION: Final = version("ragas")

# Ragas's words around an exception raised by the wrapped function; the fast path
# reproduces them so both paths return identical reasons.
RAGAS_ERROR_PREFIX: Final = f"Error executing metric {METRIC_NAME}: "


class InvalidClaims(ValueError):
    """Raised when claim ID lists break a metric rule; the message is the reason."""


def _join(ids: Iterable[str]) -> str:
    return ",".join(sorted(ids))


def _reason_prefix(n_supported: int, n_required: int) -> str:
    return f"supported={n_supported}; required={n_required}; missing="


# The valid reason's counts part, made once for the usual list lengths: formatting two ints
# per row is a large share of the worker's scoring call (bench --micro).
_REASON_PREFIXES: Final = {
    (n_supported, n_required): _reason_prefix(n_supported, n_required)
    for n_required in range(1, 33)
    for n_supported in range(n_required + 1)
}


def score_pair(
    required_claim_ids: Sequence[str],
    supported_claim_ids: Sequence[str],
    invalid_prefix: str = RAGAS_ERROR_PREFIX,
) -> tuple[float | None, str]:
    """Apply SPEC §1's rules in order: (value, reason), or (None, prefix + first broken rule).

    The worker's path: exactly evidence_coverage.score()'s (value, reason), without Ragas's
    per-call cost (a pydantic model and an event loop per call). Invalid rows carry
    Ragas's words around the exception (the metric itself passes no prefix: Ragas adds it).
    Ragas's range check cannot fire: a valid value is always within 0..1, supported being a
    duplicate-free subset of required. Inputs must already be lists of str (the message models
    guarantee it). Equivalence with .score() is a property test over generated inputs.
    """
    required_set = {claim_id.strip() for claim_id in required_claim_ids}
    supported_set = {claim_id.strip() for claim_id in supported_claim_ids}
    n_required, n_supported = len(required_claim_ids), len(supported_claim_ids)
    # One pass of set arithmetic decides whether any rule is broken (a set shorter than its
    # list: a duplicate once stripped; no blank in required and supported within required:
    # no blank in supported either); only then are the rules walked in order to name the
    # first one (the common valid row never pays for that).
    if (
        n_required
        and len(required_set) == n_required
        and len(supported_set) == n_supported
        and "" not in required_set
        and supported_set <= required_set
    ):
        # supported is a duplicate-free subset of required: of the same size, it is all of it.
        missing = "none" if n_supported == n_required else _join(required_set - supported_set)
        prefix = _REASON_PREFIXES.get((n_supported, n_required))
        if prefix is None:
            prefix = _reason_prefix(n_supported, n_required)
        return n_supported / n_required, prefix + missing
    return None, invalid_prefix + _first_broken_rule(
        required_claim_ids, supported_claim_ids, required_set, supported_set
    )


def _first_broken_rule(
    required_ids: Sequence[str],
    supported_ids: Sequence[str],
    required_set: set[str],
    supported_set: set[str],
) -> str:
    """The reason of the first rule broken, in SPEC §1's order, from the stripped sets."""
    for field, ids, id_set in (
        ("required_claim_ids", required_ids, required_set),
        ("supported_claim_ids", supported_ids, supported_set),
    ):
        if "" in id_set:
            return f"{field} contains a blank claim ID"
        if len(id_set) != len(ids):
            counts = Counter(claim_id.strip() for claim_id in ids)
            repeated = (claim_id for claim_id, count in counts.items() if count > 1)
            return f"{field} contains duplicate claim IDs: {_join(repeated)}"
    if not required_ids:
        return "required_claim_ids must not be empty"
    return f"supported_claim_ids contains unknown IDs: {_join(supported_set - required_set)}"
