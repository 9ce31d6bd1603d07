"""Policy: parsing the file or MIN_EVIDENCE_COVERAGE; turning outcomes into decisions (SPEC §4)."""

from __future__ import annotations

from pathlib import Path

import pytest

import contracts
from contracts import (
    Decision,
    Outcome,
    Policy,
    PolicyError,
    decide,
    parse_policy,
    policy_from_threshold,
)

SPEC_POLICY = """\
version = "2026-12-01"
[groups.default]
min_coverage = 0.85
[groups.disclosure]
require_all = true
"""

POLICY = parse_policy(SPEC_POLICY)
ENV_POLICY = policy_from_threshold("0.85")

VALID_REASON = "supported=17; required=20; missing=a,b,c"
INVALID_REASON = (
    "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: old-c1"
)


def test_parse_spec_example_version() -> None:
    """The SPEC §4 example parses with its version string."""
    assert POLICY.version == "2026-12-01"


def test_parse_spec_example_groups() -> None:
    """The SPEC §4 example has exactly its two named groups, in file order."""
    assert list(POLICY.groups) == ["default", "disclosure"]


def test_min_coverage_is_the_threshold() -> None:
    """A min_coverage group's threshold is its min_coverage."""
    assert POLICY.groups["default"].threshold == 0.85


def test_require_all_threshold_is_one() -> None:
    """require_all = true means nothing may be missing, i.e. threshold 1.0."""
    assert POLICY.groups["disclosure"].threshold == 1.0


def test_integer_threshold_is_accepted() -> None:
    """A TOML integer 1 (or 0) is a valid threshold, read as a float."""
    policy = parse_policy('version = "v"\n[groups.default]\nmin_coverage = 1\n')

    assert policy.groups["default"].threshold == 1.0


def test_example_policy_file_parses() -> None:
    """The shipped contracts/examples/policy.toml is a valid policy equal to the SPEC example."""
    text = (Path(contracts.__file__).parent / "examples" / "policy.toml").read_text()

    assert parse_policy(text) == POLICY


GROUP = 'version = "v"\n[groups.default]\n'
NO_THRESHOLD = (
    "policy file: groups.default: no threshold: set min_coverage (0.0..1.0) or require_all = true"
)
BOTH_RULES = "policy file: groups.default: set only one of min_coverage or require_all, not both"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            GROUP + "min_coverage = 1.5\n",
            "policy file: groups.default.min_coverage: Input should be less than or equal to 1",
            id="threshold-above-one",
        ),
        pytest.param(
            GROUP + "min_coverage = -0.1\n",
            "policy file: groups.default.min_coverage: Input should be greater than or equal to 0",
            id="threshold-below-zero",
        ),
        pytest.param(
            GROUP + "min_coverage = nan\n",
            "policy file: groups.default.min_coverage: must be a finite number in 0.0..1.0",
            id="threshold-nan",
        ),
        pytest.param(
            GROUP + "min_coverage = inf\n",
            "policy file: groups.default.min_coverage: must be a finite number in 0.0..1.0",
            id="threshold-inf",
        ),
        pytest.param(
            GROUP + 'min_coverage = "0.85"\n',
            "policy file: groups.default.min_coverage: Input should be a valid number",
            id="threshold-string",
        ),
        pytest.param(
            GROUP + "min_coverage = true\n",
            "policy file: groups.default.min_coverage: Input should be a valid number",
            id="threshold-bool",
        ),
        pytest.param(GROUP, NO_THRESHOLD, id="threshold-missing"),
        pytest.param(
            GROUP + "min_coverage = 0.5\nrequire_all = true\n",
            BOTH_RULES,
            id="both-min_coverage-and-require_all",
        ),
        pytest.param(
            GROUP + "require_all = false\n",
            "policy file: groups.default.require_all: "
            "must be true (for a threshold use min_coverage instead)",
            id="require_all-false",
        ),
        pytest.param(
            'version = "v"\nthreshold = 0.5\n[groups.default]\nmin_coverage = 0.5\n',
            "policy file: threshold: unknown key",
            id="unknown-top-level-key",
        ),
        pytest.param(
            GROUP + "min_coverage = 0.5\nmin_coverge = 0.5\n",
            "policy file: groups.default.min_coverge: unknown key",
            id="unknown-group-key",
        ),
        pytest.param(
            'version = "v"\n',
            "policy file: groups: Field required",
            id="no-groups",
        ),
        pytest.param(
            'version = "v"\ngroups = {}\n',
            "policy file: groups: must define at least one group",
            id="empty-groups",
        ),
        pytest.param(
            "[groups.default]\nmin_coverage = 0.5\n",
            "policy file: version: Field required",
            id="missing-version",
        ),
        pytest.param(
            'version = ""\n[groups.default]\nmin_coverage = 0.5\n',
            "policy file: version: String should have at least 1 character",
            id="empty-version",
        ),
        pytest.param(
            "version = 2026-12-01\n[groups.default]\nmin_coverage = 0.5\n",
            "policy file: version: Input should be a valid string",
            id="unquoted-date-version",
        ),
        pytest.param(
            "version = \n",
            "policy file is not valid TOML: Invalid value (at line 1, column 11)",
            id="invalid-toml",
        ),
    ],
)
def test_parse_policy_error(text: str, error: str) -> None:
    """A bad policy file raises PolicyError with one line naming the bad key."""
    with pytest.raises(PolicyError) as raised:
        parse_policy(text)

    assert str(raised.value) == error


def test_parse_policy_error_names_the_source() -> None:
    """The error starts with the source it was given, so the user knows which file to fix."""
    with pytest.raises(PolicyError) as raised:
        parse_policy('version = "v"\n', source="/etc/evidence/policy.toml")

    assert str(raised.value) == "/etc/evidence/policy.toml: groups: Field required"


def test_policy_from_threshold_version() -> None:
    """MIN_EVIDENCE_COVERAGE=0.85 gives the policy version env:0.85."""
    assert ENV_POLICY.version == "env:0.85"


def test_policy_from_threshold_single_default_group() -> None:
    """MIN_EVIDENCE_COVERAGE defines exactly one group, default, with that threshold."""
    assert {name: group.threshold for name, group in ENV_POLICY.groups.items()} == {"default": 0.85}


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        pytest.param(
            "abc",
            "MIN_EVIDENCE_COVERAGE='abc' is not a number; set a value in 0.0..1.0",
            id="not-a-number",
        ),
        pytest.param(
            "",
            "MIN_EVIDENCE_COVERAGE='' is not a number; set a value in 0.0..1.0",
            id="empty",
        ),
        pytest.param(
            "nan", "MIN_EVIDENCE_COVERAGE='nan' is not a finite number in 0.0..1.0", id="nan"
        ),
        pytest.param(
            "inf", "MIN_EVIDENCE_COVERAGE='inf' is not a finite number in 0.0..1.0", id="inf"
        ),
        pytest.param("1.5", "MIN_EVIDENCE_COVERAGE='1.5' is outside 0.0..1.0", id="above-one"),
        pytest.param("-0.1", "MIN_EVIDENCE_COVERAGE='-0.1' is outside 0.0..1.0", id="below-zero"),
    ],
)
def test_policy_from_threshold_error(raw: str, error: str) -> None:
    """A bad MIN_EVIDENCE_COVERAGE raises PolicyError naming the variable and its value."""
    with pytest.raises(PolicyError) as raised:
        policy_from_threshold(raw)

    assert str(raised.value) == error


@pytest.mark.parametrize(
    ("raw", "threshold"),
    [
        pytest.param("0", 0.0, id="zero"),
        pytest.param("1", 1.0, id="one"),
        pytest.param("1.0", 1.0, id="one-point-zero"),
    ],
)
def test_policy_from_threshold_bounds_are_valid(raw: str, threshold: float) -> None:
    """The bounds 0 and 1 are valid thresholds."""
    assert policy_from_threshold(raw).groups["default"].threshold == threshold


def _decision(**fields: object) -> Decision:
    """The Decision for the SPEC policy, blocking, contract c/1, overridden by fields."""
    base: dict[str, object] = {
        "contract_version": "c/1",
        "policy_group": "default",
        "policy_version": "2026-12-01",
        "blocking": True,
    }
    return Decision.model_validate({**base, **fields})


UNKNOWN_GROUP_REASON = (
    "policy_group 'legal' is not defined in policy 2026-12-01 (groups: default,disclosure)"
)


@pytest.mark.parametrize(
    ("outcome", "policy", "group", "blocking", "expected"),
    [
        pytest.param(
            Outcome(value=0.9, reason=VALID_REASON),
            POLICY,
            "default",
            True,
            _decision(status="pass", value=0.9, reason=VALID_REASON, threshold=0.85, owner=None),
            id="above-threshold-passes",
        ),
        pytest.param(
            Outcome(value=17 / 20, reason=VALID_REASON),
            POLICY,
            "default",
            True,
            _decision(status="pass", value=0.85, reason=VALID_REASON, threshold=0.85, owner=None),
            id="exactly-at-threshold-passes",
        ),
        pytest.param(
            Outcome(value=0.84, reason=VALID_REASON),
            POLICY,
            "default",
            True,
            _decision(
                status="fail", value=0.84, reason=VALID_REASON, threshold=0.85, owner="product"
            ),
            id="below-threshold-fails-to-product",
        ),
        pytest.param(
            Outcome(value=0.0, reason=VALID_REASON),
            POLICY,
            "default",
            True,
            _decision(
                status="fail", value=0.0, reason=VALID_REASON, threshold=0.85, owner="product"
            ),
            id="zero-fails",
        ),
        pytest.param(
            Outcome(value=0.5, reason=VALID_REASON),
            POLICY,
            "default",
            False,
            _decision(
                status="fail",
                value=0.5,
                reason=VALID_REASON,
                threshold=0.85,
                owner="product",
                blocking=False,
            ),
            id="non-blocking-still-fails",
        ),
        pytest.param(
            Outcome(value=1.0, reason=VALID_REASON),
            POLICY,
            "disclosure",
            True,
            _decision(
                status="pass",
                value=1.0,
                reason=VALID_REASON,
                threshold=1.0,
                owner=None,
                policy_group="disclosure",
            ),
            id="require_all-complete-passes",
        ),
        pytest.param(
            Outcome(value=0.95, reason=VALID_REASON),
            POLICY,
            "disclosure",
            True,
            _decision(
                status="fail",
                value=0.95,
                reason=VALID_REASON,
                threshold=1.0,
                owner="product",
                policy_group="disclosure",
            ),
            id="require_all-one-missing-fails",
        ),
        pytest.param(
            Outcome(value=None, reason=INVALID_REASON),
            POLICY,
            "default",
            True,
            _decision(
                status="invalid",
                value=None,
                reason=INVALID_REASON,
                threshold=None,
                owner="evaluation-data",
            ),
            id="metric-invalid-to-evaluation-data",
        ),
        pytest.param(
            Outcome(value=None, reason=INVALID_REASON),
            POLICY,
            "legal",
            True,
            _decision(
                status="invalid",
                value=None,
                reason=INVALID_REASON,
                threshold=None,
                owner="evaluation-data",
                policy_group="legal",
            ),
            id="metric-invalid-reason-beats-unknown-group",
        ),
        pytest.param(
            Outcome(value=0.9, reason=VALID_REASON),
            POLICY,
            "legal",
            True,
            _decision(
                status="invalid",
                value=None,
                reason=UNKNOWN_GROUP_REASON,
                threshold=None,
                owner="evaluation-data",
                policy_group="legal",
            ),
            id="unknown-group-invalid",
        ),
        pytest.param(
            Outcome(value=0.85, reason=VALID_REASON),
            ENV_POLICY,
            "default",
            False,
            _decision(
                status="pass",
                value=0.85,
                reason=VALID_REASON,
                threshold=0.85,
                owner=None,
                policy_version="env:0.85",
                blocking=False,
            ),
            id="env-policy-version-carried",
        ),
        pytest.param(
            Outcome(value=0.5, reason=VALID_REASON),
            None,
            "default",
            True,
            _decision(
                status="scored",
                value=0.5,
                reason=VALID_REASON,
                threshold=None,
                owner=None,
                policy_version=None,
            ),
            id="report-only-scored",
        ),
        pytest.param(
            Outcome(value=0.0, reason=VALID_REASON),
            None,
            "any-group",
            True,
            _decision(
                status="scored",
                value=0.0,
                reason=VALID_REASON,
                threshold=None,
                owner=None,
                policy_version=None,
                policy_group="any-group",
            ),
            id="report-only-knows-no-groups",
        ),
        pytest.param(
            Outcome(value=None, reason=INVALID_REASON),
            None,
            "default",
            True,
            _decision(
                status="invalid",
                value=None,
                reason=INVALID_REASON,
                threshold=None,
                owner="evaluation-data",
                policy_version=None,
            ),
            id="report-only-invalid",
        ),
    ],
)
def test_decide(
    outcome: Outcome,
    policy: Policy | None,
    group: str,
    blocking: bool,
    expected: Decision,
) -> None:
    """decide() records status, value, reason, threshold, owner and both versions exactly."""
    decision = decide(
        outcome,
        policy,
        policy_group=group,
        blocking=blocking,
        contract_version="c/1",
    )

    assert decision == expected


def test_decide_carries_missing_contract_version() -> None:
    """A row without a contract version is decided with contract_version None, not a default."""
    decision = decide(
        Outcome(value=0.9, reason=VALID_REASON),
        POLICY,
        policy_group="default",
        blocking=True,
        contract_version=None,
    )

    assert decision.contract_version is None


@pytest.mark.parametrize(
    "policy", [pytest.param(POLICY, id="policy"), pytest.param(None, id="report-only")]
)
def test_invalid_value_is_never_zero(policy: Policy | None) -> None:
    """An invalid outcome keeps value None in the decision and its JSON, never 0.0."""
    decision = decide(
        Outcome(value=None, reason=INVALID_REASON),
        policy,
        policy_group="default",
        blocking=True,
        contract_version="c/1",
    )

    assert decision.model_dump(mode="json")["value"] is None


def test_policy_decide_method_matches_function() -> None:
    """Policy.decide is the same judgement as decide(outcome, policy, ...)."""
    outcome = Outcome(value=0.84, reason=VALID_REASON)

    method = POLICY.decide(outcome, policy_group="default", blocking=True, contract_version="c/1")
    function = decide(
        outcome, POLICY, policy_group="default", blocking=True, contract_version="c/1"
    )

    assert method == function
    assert method.status == "fail"
