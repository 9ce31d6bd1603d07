"""Versioned pass/fail policy over valid coverage values (SPEC §4). Never touches the metric."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from contracts.outcomes import Decision, Outcome, Owner, Status
from contracts.trusted import trusted

DEFAULT_GROUP = "default"
INVALID_OWNER: Final[Owner] = "evaluation-data"
FAIL_OWNER: Final[Owner] = "product"
REVIEW_OWNER: Final[Owner] = "release-rule"


class PolicyError(ValueError):
    """Raised when a policy file or threshold cannot be used; the message says what to fix."""


class PolicyGroup(BaseModel):
    """One named rule: a minimum coverage, or every required claim supported."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    min_coverage: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    require_all: Literal[True] | None = None
    # SPEC §12: a valid value less than this below the threshold is `review`, not `fail`.
    review_band: float | None = Field(default=None, gt=0.0, lt=1.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _exactly_one_rule(self) -> PolicyGroup:
        if self.min_coverage is None and self.require_all is None:
            raise ValueError("no threshold: set min_coverage (0.0..1.0) or require_all = true")
        if self.min_coverage is not None and self.require_all is not None:
            raise ValueError("set only one of min_coverage or require_all, not both")
        if self.review_band is not None and self.review_band > self.threshold:
            raise ValueError(
                f"review_band {self.review_band!r} is wider than the threshold"
                f" {self.threshold!r}: the band would reach below 0, so no value could fail"
            )
        return self

    @property
    def threshold(self) -> float:
        # require_all passes only when nothing is missing, i.e. coverage 1.0.
        return 1.0 if self.require_all else float(self.min_coverage or 0.0)

    @property
    def review_floor(self) -> float | None:
        """The band's lower edge (band_floor()); None without a band."""
        if self.review_band is None:
            return None
        return band_floor(self.threshold, self.review_band)


def band_floor(threshold: float, band: float) -> float:
    """A review band's lower edge, threshold − band, as the decimal numbers a policy file
    writes subtract (0.3 − 0.1 is 0.2, where floats say 0.19999999999999998), rounded once:
    a value exactly there (1 of 5 claims) fails, never decided by a subtraction's last digit.
    Exact for the values a file can hold: each float's repr is the decimal it was read from."""
    return float(Decimal(repr(threshold)) - Decimal(repr(band)))


class Observe(BaseModel):
    """A named observation window (SPEC §12, `[observe]`): the rule this policy replaced,
    decided beside it until `until` (a UTC date, inclusive).

    `previous` is the file as the policy names it (relative to the policy file); `rule` is
    that file's policy, read by whoever read this one (parse_policy()'s `read_previous`).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    previous: str = Field(min_length=1)
    until: date
    rule: Policy

    @field_validator("until", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        """A TOML date (until = 2026-12-31) or its text (until = "2026-12-31")."""
        if isinstance(value, date) and not hasattr(value, "hour"):
            return value
        if isinstance(value, str):
            try:
                return date.fromisoformat(value)
            except ValueError:
                pass
        shown = repr(value) if isinstance(value, str) else str(value)
        raise ValueError(f'{shown} is not a date: write it as YYYY-MM-DD, e.g. "2026-12-31"')


class Policy(BaseModel):
    """A versioned set of groups; its version is recorded beside every decision."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    version: str = Field(min_length=1)
    groups: dict[str, PolicyGroup] = Field(min_length=1)
    observe: Observe | None = None

    def decide(
        self,
        outcome: Outcome,
        *,
        policy_group: str,
        blocking: bool,
        contract_version: str | None,
    ) -> Decision:
        """Pass, fail, review or invalid for one outcome; the metric's range is not a threshold."""
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
    "greater_than": "must be above 0 and below 1 (e.g. 0.03)",
    "less_than": "must be above 0 and below 1 (e.g. 0.03)",
}


def _first_error(error: ValidationError) -> str:
    details = error.errors()[0]
    where = ".".join(str(part) for part in details["loc"]) or "policy"
    message = FRIENDLIER.get(details["type"], details["msg"].removeprefix("Value error, "))
    return f"{where}: {message}"


def parse_policy(
    text: str,
    *,
    source: str = "policy file",
    read_previous: Callable[[str], Policy] | None = None,
    previous: bool = False,
) -> Policy:
    """Parse policy TOML; raise PolicyError naming the bad key or value.

    `read_previous`: how to read the policy an `[observe]` table names (the caller's I/O: a
    path relative to this file); it raises PolicyError when that file is missing or bad. A
    policy with `[observe]` and no reader is refused. `previous`: this is a window's previous
    policy, whose own `[observe]`, if any, is not followed (a window sets one rule beside
    another, not a chain): it is dropped.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PolicyError(f"{source} is not valid TOML: {error}") from None
    observe = data.pop("observe", None) if previous else data.get("observe")
    if observe is not None and not isinstance(observe, dict):
        raise PolicyError(f"{source}: observe: must be a table ([observe] with previous and until)")
    if isinstance(observe, dict) and not previous:
        data["observe"] = {**observe, "rule": _previous(observe, source, read_previous)}
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        raise PolicyError(f"{source}: {_first_error(error)}") from None


def _previous(
    observe: dict[str, Any], source: str, read_previous: Callable[[str], Policy] | None
) -> Policy | None:
    """The policy `[observe] previous` names, or None when the table says none (validation
    then names what is wrong with it); unknown keys and a bad `until` are reported first."""
    previous = observe.get("previous")
    unknown = sorted(set(observe) - {"previous", "until"})
    if unknown:
        raise PolicyError(f"{source}: observe.{unknown[0]}: unknown key")
    if "until" in observe:
        try:
            Observe._iso_date(observe["until"])  # as validation checks it, before any reading
        except ValueError as error:
            raise PolicyError(f"{source}: observe.until: {error}") from None
    if not isinstance(previous, str) or not previous:
        return None
    if read_previous is None:
        raise PolicyError(
            f"{source}: observe.previous: {previous!r} cannot be read here: name the policy"
            " by its file (--policy or EVIDENCE_POLICY_FILE)"
        )
    try:
        return read_previous(previous)
    except PolicyError as error:
        raise PolicyError(f"{source}: observe.previous: {error}") from None


def previous_rule(policy: Policy | None, today: date) -> Policy | None:
    """The rule an open observation window decides beside `policy` on `today` (a UTC date):
    its `[observe]` previous policy while today <= until, else None."""
    if policy is None or (observe := policy.observe) is None or today > observe.until:
        return None
    return observe.rule


def window_ended(policy: Policy | None, today: date, *, previous_path: str) -> str | None:
    """The one WARNING a command prints (and the worker logs) once a policy's observation
    window has ended: decisions no longer carry the previous rule. `previous_path`: the
    previous file as the reader should find it. None while the window runs, or without one."""
    if policy is None or (observe := policy.observe) is None or today <= observe.until:
        return None
    return (
        f"WARNING: the observation window of policy {policy.version} ended on"
        f" {observe.until.isoformat()}: decisions no longer carry policy"
        f" {observe.rule.version}; remove [observe] from the policy file and delete"
        f" {previous_path}"
    )


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
    threshold = band = None
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
        threshold, band = group.threshold, group.review_band
        if value >= threshold:
            status = "pass"
        elif band is not None and value > band_floor(threshold, band):
            status = "review"  # less than review_band below: a person decides (SPEC §12)
        else:
            status = "fail"
    owner: Owner | None = (
        INVALID_OWNER
        if status == "invalid"
        else FAIL_OWNER
        if status == "fail"
        else REVIEW_OWNER
        if status == "review"
        else None
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
            "review_band": band,
        },
    )


Observe.model_rebuild()
