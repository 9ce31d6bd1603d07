"""A metric outcome and the policy decision built on it."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

# `review`: a valid value within its group's review_band below the threshold (SPEC §12):
# neither pass nor fail until a person decides; a gate treats a blocking one as blocking.
Status = Literal["pass", "fail", "invalid", "scored", "review"]
# Who a row goes to (SPEC §9): invalid rows to evaluation data, a failed one by its findings.
Owner = Literal["evaluation-data", "attribution", "retrieval", "product", "release-rule"]
CacheOutcome = Literal["miss", "hit", "conflict"]


class Outcome(BaseModel):
    """What the metric said: a value in 0..1 with its reason, or None and why it is invalid.

    Two attempts agree exactly when their (value, reason) pairs are equal.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float | None
    reason: str


class Decision(BaseModel):
    """An outcome judged by a policy, with everything needed to explain the judgement."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status
    value: float | None
    reason: str
    contract_version: str | None
    policy_group: str
    policy_version: str | None
    threshold: float | None
    blocking: bool
    owner: Owner | None
    # The group's review_band (SPEC §12), None when it sets none: with the threshold, what
    # makes a `review` row one. Records and gate lines carry it only when set.
    review_band: float | None = None


def value_json(value: float | None) -> str:
    """A metric value as the definition of "same outcome" spells it (the stores'
    outcome_json(), contracts.grader_stability's outcome_key()): repr, exact, so 0.5 and
    0.50000000001 differ and -0.0 is not 0.0; None and non-finite values alike as null, as
    the stores keep them. Also valid JSON for an attempt's `value`."""
    if value is None or not math.isfinite(value):
        return "null"
    return float.__repr__(value)
