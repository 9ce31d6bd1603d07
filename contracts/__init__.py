"""What an evidence-coverage score means: the metric, messages, input hash and policy. No I/O."""

from contracts.hashing import input_hash
from contracts.messages import AttributionResult, Citation, Context, Grader, ReleaseRow
from contracts.metric import METRIC_VERSION, RAGAS_VERSION, evidence_coverage, score_claims
from contracts.outcomes import Decision, Outcome
from contracts.policy import Policy, PolicyError, decide, parse_policy, policy_from_threshold
from contracts.records import (
    Alert,
    AlertRecord,
    Attempt,
    CoverageRecord,
    ScoreRecord,
    json_schemas,
)

__all__ = [
    "METRIC_VERSION",
    "RAGAS_VERSION",
    "Alert",
    "AlertRecord",
    "Attempt",
    "AttributionResult",
    "Citation",
    "Context",
    "CoverageRecord",
    "Decision",
    "Grader",
    "Outcome",
    "Policy",
    "PolicyError",
    "ReleaseRow",
    "ScoreRecord",
    "decide",
    "evidence_coverage",
    "input_hash",
    "json_schemas",
    "parse_policy",
    "policy_from_threshold",
    "score_claims",
]
