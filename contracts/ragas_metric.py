"""The Ragas numeric metric `evidence_coverage` (SPEC §1), wrapping the rules in metric.py."""

from __future__ import annotations

from collections.abc import Sequence

from ragas.metrics import MetricResult, numeric_metric

from contracts.metric import ALLOWED_RANGE, METRIC_NAME, InvalidClaims, score_pair


@numeric_metric(name=METRIC_NAME, allowed_values=ALLOWED_RANGE)
def evidence_coverage(
    required_claim_ids: list[str], supported_claim_ids: list[str]
) -> MetricResult:
    """|supported ∩ required| / |required| over reviewed claim IDs.

    Invalid rows raise, so Ragas returns them as MetricResult(value=None, reason=...):
    returning value=None ourselves would be replaced by Ragas's range-check message.
    """
    value, reason = score_pair(required_claim_ids, supported_claim_ids, invalid_prefix="")
    if value is None:
        raise InvalidClaims(reason)
    return MetricResult(value=value, reason=reason)


def score_claims(
    required_claim_ids: Sequence[str], supported_claim_ids: Sequence[str]
) -> MetricResult:
    """score_pair() as a Ragas MetricResult, for callers that want the Ragas shape."""
    value, reason = score_pair(required_claim_ids, supported_claim_ids)
    return MetricResult(value=value, reason=reason)
