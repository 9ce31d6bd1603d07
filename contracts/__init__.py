"""What an evidence-coverage score means and what crosses the wire: the metric, messages, input
hash, policy, judging and triage, records and alerts, sampling, grader stability, contract
drift, and their JSON Schemas. No I/O."""

from typing import Any

from contracts.hashing import input_hash
from contracts.judging import Judgement, judge
from contracts.messages import AttributionResult, Citation, Context, Grader, ReleaseRow
from contracts.metric import METRIC_VERSION, RAGAS_VERSION
from contracts.outcomes import Decision, Outcome
from contracts.policy import Policy, PolicyError, decide, parse_policy, policy_from_threshold
from contracts.record_models import (
    Alert,
    AlertRecord,
    Attempt,
    ContractDriftAlert,
    ContractDriftRecord,
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
    "ContractDriftAlert",
    "ContractDriftRecord",
    "CoverageRecord",
    "Decision",
    "Grader",
    "Judgement",
    "Outcome",
    "Policy",
    "PolicyError",
    "ReleaseRow",
    "ScoreRecord",
    "decide",
    "evidence_coverage",
    "input_hash",
    "json_schemas",
    "judge",
    "parse_policy",
    "policy_from_threshold",
    "score_claims",
]


# The Ragas objects load on first use: `import contracts` must not import Ragas.
_RAGAS_NAMES = frozenset({"evidence_coverage", "score_claims"})


def __getattr__(name: str) -> Any:
    if name in _RAGAS_NAMES:
        from contracts import ragas_metric

        return getattr(ragas_metric, name)
    raise AttributeError(f"module 'contracts' has no attribute {name!r}")
