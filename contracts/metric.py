"""The evidence-coverage metric: what a coverage number means (SPEC §1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from importlib.metadata import version
from typing import Final

from ragas.metrics import MetricResult, numeric_metric

METRIC_NAME: Final = "evidence_coverage"
METRIC_VERSION: Final = "evidence_coverage/1"
ALLOWED_RANGE: Final = (0.0, 1.0)
RAGAS_VERSION: Final = version("ragas")

# Ragas's words around an exception raised by the wrapped function; the fast path
# reproduces them so both paths return identical reasons.
RAGAS_ERROR_PREFIX: Final = f"Error executing metric {METRIC_NAME}: "


class InvalidClaims(ValueError):
    """Raised when claim ID lists break a metric rule; the message is the reason."""


def _join(ids: Sequence[str]) -> str:
    return ",".join(sorted(ids))


def _check_ids(field: str, ids: Sequence[str]) -> None:
    if any(not claim_id for claim_id in ids):
        raise InvalidClaims(f"{field} contains a blank claim ID")
    repeated = sorted(claim_id for claim_id, n in Counter(ids).items() if n > 1)
    if repeated:
        raise InvalidClaims(f"{field} contains duplicate claim IDs: {_join(repeated)}")


def coverage(
    required_claim_ids: Sequence[str], supported_claim_ids: Sequence[str]
) -> tuple[float, str]:
    """Apply SPEC §1's rules in order; raise InvalidClaims naming the first broken one."""
    required = [claim_id.strip() for claim_id in required_claim_ids]
    supported = [claim_id.strip() for claim_id in supported_claim_ids]
    _check_ids("required_claim_ids", required)
    _check_ids("supported_claim_ids", supported)
    if not required:
        raise InvalidClaims("required_claim_ids must not be empty")
    required_set = set(required)
    unknown = [claim_id for claim_id in supported if claim_id not in required_set]
    if unknown:
        raise InvalidClaims(f"supported_claim_ids contains unknown IDs: {_join(unknown)}")
    missing = required_set.difference(supported)
    reason = (
        f"supported={len(supported)}; required={len(required)}; "
        f"missing={_join(list(missing)) if missing else 'none'}"
    )
    return len(supported) / len(required), reason


@numeric_metric(name=METRIC_NAME, allowed_values=ALLOWED_RANGE)
def evidence_coverage(
    required_claim_ids: list[str], supported_claim_ids: list[str]
) -> MetricResult:
    """|supported ∩ required| / |required| over reviewed claim IDs.

    Invalid rows raise, so Ragas returns them as MetricResult(value=None, reason=...):
    returning value=None ourselves would be replaced by Ragas's range-check message.
    """
    value, reason = coverage(required_claim_ids, supported_claim_ids)
    return MetricResult(value=value, reason=reason)


def score_claims(
    required_claim_ids: Sequence[str], supported_claim_ids: Sequence[str]
) -> MetricResult:
    """The worker's path: the same rules and reasons as evidence_coverage.score().

    Ragas's .score() builds a pydantic model and runs an event loop on every call
    (~0.5 ms); this calls the same rule function and the same range validator directly.
    Inputs must already be lists of str (the message models guarantee it).
    """
    try:
        value, reason = coverage(required_claim_ids, supported_claim_ids)
    except Exception as error:  # mirrors Ragas's own catch-all around the function
        return MetricResult(value=None, reason=f"{RAGAS_ERROR_PREFIX}{error}")
    range_error: str | None = evidence_coverage.validate_result_value(value)  # type: ignore[attr-defined]
    if range_error:
        return MetricResult(value=None, reason=range_error)
    return MetricResult(value=value, reason=reason)
