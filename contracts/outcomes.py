"""A metric outcome and the policy decision built on it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["pass", "fail", "invalid", "scored"]
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
