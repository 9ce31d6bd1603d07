"""Versioned pass/fail policy over valid coverage values (SPEC §4). Never touches the metric."""

from __future__ import annotations

import math
import tomllib
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.outcomes import Decision, Outcome, Owner, Status
from contracts.trusted import trusted

DEFAULT_GROUP = "default"
INVALID_OWNER: Final[Owner] = "evaluation-data"
FAIL_OWNER: Final[Owner] = "product"


class PolicyError(ValueError):
    """Raised when a policy file or threshold cannot be used; the message says what to fix."""


class PolicyGroup(BaseModel):
    """One named rule: a minimum coverage, or every required claim supported."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    min_coverage: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    require_all: Literal[True] | None = None

    @model_validator(mode="after")
    def _exactly_one_rule(self) -> PolicyGroup:
        if self.min_coverage is None and self.require_all is None:
            raise ValueError("no threshold: set min_coverage (0.0..1.0) or require_all = true")
        if self.min_coverage is not None and self.require_all is not None:
            raise ValueError("set only one of min_coverage or require_all, not both")
        return self

    @property
    def threshold(self) -> float:
        # require_all passes only when nothing is missing, i.e. coverage 1.0.
        return 1.0 if self.require_all else float(self.min_coverage or 0.0)


class Policy(BaseModel):
    """A versioned set of groups; its version is recorded beside every decision."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    version: str = Field(min_length=1)
    groups: dict[str, PolicyGroup] = Field(min_length=1)

    def decide(
        self,
        outcome: Outcome,
        *,
        policy_group: str,
        blocking: bool,
        contract_version: str | None,
    ) -> Decision:
        """Pass, fail or invalid for one outcome; the metric's range is not a threshold."""
        return decide(
            outcome,
            self,
            policy_group=policy_group,
            blocking=blocking,
            contract_version=contract_version,
        )


# Pydantic's wording where it reads poorly in a policy file.
FRIENDLIER = {
    "extra_forbidden": "unknown key",
    "literal_error": "must be true (for a threshold use min_coverage instead)",
    "too_short": "must define at least one group",
    "model_type": "must be a table (e.g. [groups.default] with min_coverage = 0.85)",
    "finite_number": "must be a finite number in 0.0..1.0",
}


def _first_error(error: ValidationError) -> str:
    details = error.errors()[0]
    where = ".".join(str(part) for part in details["loc"]) or "policy"
    message = FRIENDLIER.get(details["type"], details["msg"].removeprefix("Value error, "))
    return f"{where}: {message}"


def parse_policy(text: str, *, source: str = "policy file") -> Policy:
    """Parse policy TOML; raise PolicyError naming the bad key or value."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PolicyError(f"{source} is not valid TOML: {error}") from None
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise PolicyError(f"{source}: {_first_error(error)}") from None


def policy_from_threshold(
    raw: str, *, name: str = "MIN_EVIDENCE_COVERAGE", origin: str = "env"
) -> Policy:
    """A threshold as a one-group policy versioned <origin>:<raw> (env:0.85 from the
    environment); errors name the variable or option the value came from."""
    try:
        value = float(raw)
    except ValueError:
        raise PolicyError(f"{name}={raw!r} is not a number; set a value in 0.0..1.0") from None
    if not math.isfinite(value):
        raise PolicyError(f"{name}={raw!r} is not a finite number in 0.0..1.0")
    if not 0.0 <= value <= 1.0:
        raise PolicyError(f"{name}={raw!r} is outside 0.0..1.0")
    # The version names the value as configured, minus surrounding whitespace.
    version = f"{origin}:{raw.strip()}"
    return Policy(version=version, groups={DEFAULT_GROUP: PolicyGroup(min_coverage=value)})


def decide(
    outcome: Outcome,
    policy: Policy | None,
    *,
    policy_group: str,
    blocking: bool,
    contract_version: str | None,
) -> Decision:
    """Turn a metric outcome into a decision; with no policy, valid rows are only `scored`."""
    value = outcome.value
    reason = outcome.reason
    threshold = None
    if value is None:
        status: Status = "invalid"
    elif policy is None:
        status = "scored"
    elif (group := policy.groups.get(policy_group)) is None:
        known = ",".join(sorted(policy.groups))
        status, value = "invalid", None
        reason = (
            f"policy_group {policy_group!r} is not defined in policy "
            f"{policy.version} (groups: {known})"
        )
    else:
        threshold = group.threshold
        status = "pass" if value >= threshold else "fail"
    owner: Owner | None = (
        INVALID_OWNER if status == "invalid" else FAIL_OWNER if status == "fail" else None
    )
    # Every value is the outcome's, the caller's (typed) or the policy's, all validated: the
    # decision is built without validating them again (contracts.trusted), once per message.
    return trusted(
        Decision,
        {
            "status": status,
            "value": value,
            "reason": reason,
            "contract_version": contract_version,
            "policy_group": policy_group,
            "policy_version": policy.version if policy else None,
            "threshold": threshold,
            "blocking": blocking,
            "owner": owner,
        },
    )
