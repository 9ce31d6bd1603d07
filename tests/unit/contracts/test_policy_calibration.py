"""A group's review band and a policy's named observation window (SPEC §12): parsing, the
band's boundaries, the window before, on and after its last day (the clock injected)."""

from __future__ import annotations

import math
from datetime import date

import pytest

from contracts import Outcome, Policy, PolicyError, decide, parse_policy
from contracts.judging import judge
from contracts.messages import ReleaseRow
from contracts.policy import previous_rule, window_ended
from contracts.triage import review_note

GROUP = 'version = "v"\n[groups.default]\n'
BANDED = parse_policy(GROUP + "min_coverage = 0.85\nreview_band = 0.03\n")
PREVIOUS = 'version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.75\n'
OBSERVED = (
    'version = "2026-12-15"\n[groups.default]\nmin_coverage = 0.85\n'
    '[observe]\nprevious = "policy-2026-11.toml"\nuntil = "2026-12-31"\n'
)


def read(name: str) -> Policy:
    """A reader as the worker's: the previous file by name, or why it cannot be read."""
    if name != "policy-2026-11.toml":
        raise PolicyError(f"cannot read {name}: No such file or directory")
    return parse_policy(PREVIOUS, source=f"policy file {name}", previous=True)


def status(value: float, policy: Policy = BANDED) -> str:
    outcome = Outcome(value=value, reason="supported=0; required=1; missing=c")
    return decide(
        outcome, policy, policy_group="default", blocking=True, contract_version="v1"
    ).status


@pytest.mark.parametrize(
    ("rule", "band"),
    [
        ("min_coverage = 0.85\nreview_band = 0.03\n", 0.03),
        ("min_coverage = 0.85\nreview_band = 0.85\n", 0.85),
        ("min_coverage = 0.5\nreview_band = 0.000001\n", 0.000001),
        ("require_all = true\nreview_band = 0.5\n", 0.5),
        ("min_coverage = 0.85\n", None),
    ],
    ids=["typical", "as-wide-as-the-threshold", "tiny", "require_all", "none"],
)
def test_a_good_band_is_read(rule: str, band: float | None) -> None:
    """A band above 0, below 1 and no wider than the threshold is the group's review_band."""
    assert parse_policy(GROUP + rule).groups["default"].review_band == band


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ("review_band = 1.0", "review_band: must be above 0 and below 1 (e.g. 0.03)"),
        ("review_band = 1", "review_band: must be above 0 and below 1 (e.g. 0.03)"),
        ("review_band = 0", "review_band: must be above 0 and below 1 (e.g. 0.03)"),
        ("review_band = -0.01", "review_band: must be above 0 and below 1 (e.g. 0.03)"),
        ("review_band = nan", "review_band: must be a finite number in 0.0..1.0"),
        ("review_band = inf", "review_band: must be a finite number in 0.0..1.0"),
        ('review_band = "0.03"', "review_band: Input should be a valid number"),
        ("review_band = true", "review_band: Input should be a valid number"),
    ],
    ids=["one", "integer-one", "zero", "negative", "nan", "inf", "text", "bool"],
)
def test_a_bad_band_is_one_line(rule: str, error: str) -> None:
    """A band at or beyond 0..1, not finite or not a number: one line naming the key."""
    with pytest.raises(PolicyError) as raised:
        parse_policy(GROUP + "min_coverage = 0.85\n" + rule + "\n")

    assert str(raised.value) == f"policy file: groups.default.{error}"


def test_a_band_wider_than_the_threshold_is_refused() -> None:
    """A band reaching below 0 leaves no value that could fail: refused, naming both."""
    with pytest.raises(PolicyError) as raised:
        parse_policy(GROUP + "min_coverage = 0.02\nreview_band = 0.03\n")

    assert str(raised.value) == (
        "policy file: groups.default: review_band 0.03 is wider than the threshold 0.02: the"
        " band would reach below 0, so no value could fail"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.85, "pass"),  # exactly the threshold
        (0.9, "pass"),
        (math.nextafter(0.85, 0), "review"),  # the float just below the threshold
        (0.83, "review"),
        (math.nextafter(0.82, 1), "review"),  # the float just above the band's edge
        (0.82, "fail"),  # exactly threshold - band: also 41 of 50 claims (41 / 50 == 0.82)
        (math.nextafter(0.82, 0), "fail"),
        (0.0, "fail"),
    ],
)
def test_the_band_s_boundaries(value: float, expected: str) -> None:
    """threshold 0.85, band 0.03: pass at 0.85 and above, review strictly between 0.82 and
    0.85, fail at 0.82 and below (the edge is 0.85 - 0.03 as decimals, rounded once)."""
    assert status(value) == expected


@pytest.mark.parametrize(
    ("threshold", "band", "edge"),
    [("0.9", "0.05", 17 / 20), ("0.7", "0.1", 3 / 5), ("0.3", "0.1", 1 / 5), ("1", "0.5", 1 / 2)],
)
def test_the_edge_is_the_decimal_difference(threshold: str, band: str, edge: float) -> None:
    """Where float subtraction is off by a digit (0.3 - 0.1 is 0.19999999999999998, so 1 of 5
    claims would read as inside the band), a value exactly at threshold - band still fails."""
    policy = parse_policy(GROUP + f"min_coverage = {threshold}\nreview_band = {band}\n")

    assert (status(edge, policy), status(float(threshold) - 1e-9, policy)) == ("fail", "review")


def test_require_all_with_a_band_reviews_rows_just_short_of_everything() -> None:
    """require_all is threshold 1.0: with band 0.2, 9 of 10 is review, 8 of 10 fails."""
    policy = parse_policy(GROUP + "require_all = true\nreview_band = 0.2\n")

    assert [status(v, policy) for v in (1.0, 0.9, 0.8)] == ["pass", "review", "fail"]


def test_a_review_decision_is_owned_by_the_release_rule_and_names_its_band() -> None:
    """A review decision's owner is release-rule, and it carries the band beside the
    threshold; the metric's reason is the metric's, unchanged."""
    outcome = Outcome(value=0.83, reason="supported=83; required=100; missing=c")
    decision = decide(outcome, BANDED, policy_group="default", blocking=True, contract_version="1")

    assert (decision.status, decision.owner, decision.threshold, decision.review_band) == (
        "review",
        "release-rule",
        0.85,
        0.03,
    )
    assert decision.reason == "supported=83; required=100; missing=c"


def test_a_group_without_a_band_decides_with_no_band() -> None:
    """Without review_band a decision's review_band is None, and just below still fails."""
    policy = parse_policy(GROUP + "min_coverage = 0.85\n")
    outcome = Outcome(value=0.84, reason="r")
    decision = decide(outcome, policy, policy_group="default", blocking=True, contract_version="1")

    assert (decision.status, decision.review_band) == ("fail", None)


def test_review_note_names_the_value_band_threshold_and_next_artifact() -> None:
    """The words explain prints for a review row: why it is review, and what to open next."""
    outcome = Outcome(value=5 / 6, reason="supported=5; required=6; missing=c")
    decision = decide(outcome, BANDED, policy_group="default", blocking=True, contract_version="1")

    assert review_note(decision) == (
        "review: value 0.8333 is below threshold 0.85 by less than review_band 0.03 (policy v,"
        " group default): a person decides; open the calibration sheet"
        " (`evidence-worker calibrate`)"
    )


def test_a_review_row_is_triaged_to_the_release_rule() -> None:
    """judge() on a ReleaseRow in the band: status review, owner release-rule, the missing
    claims still listed."""
    row = ReleaseRow(
        case_id="c-1",
        required_claim_ids=[f"c{i}" for i in range(6)],
        supported_claim_ids=[f"c{i}" for i in range(5)],
    )
    judgement = judge(row, BANDED)

    assert (judgement.decision.status, judgement.triage.owner) == ("review", "release-rule")
    assert judgement.triage.missing_claim_ids == ["c5"]


def test_contract_drift_outranks_the_band() -> None:
    """A drifted row in the band is evaluation data's: its number means nothing yet."""
    row = ReleaseRow(
        case_id="c-1",
        required_claim_ids=[f"c{i}" for i in range(6)],
        supported_claim_ids=[f"c{i}" for i in range(5)],
    )

    assert judge(row, BANDED, contract_drift=True).triage.owner == "evaluation-data"


def test_observe_names_the_previous_rule_and_its_last_day() -> None:
    """[observe] reads the previous policy through the reader, and `until` as a date."""
    observe = parse_policy(OBSERVED, read_previous=read).observe

    assert observe is not None
    assert (observe.previous, observe.until, observe.rule.version) == (
        "policy-2026-11.toml",
        date(2026, 12, 31),
        "2026-11-01",
    )


def test_until_may_be_a_toml_date() -> None:
    """until = 2026-12-31 (a TOML date, unquoted) reads as the same day."""
    text = OBSERVED.replace('until = "2026-12-31"', "until = 2026-12-31")
    observe = parse_policy(text, read_previous=read).observe

    assert observe is not None
    assert observe.until == date(2026, 12, 31)


@pytest.mark.parametrize(
    ("table", "error"),
    [
        (
            'previous = "policy-2026-11.toml"\nuntil = "2026-12-31"\nsince = "2026-12-15"\n',
            "observe.since: unknown key",
        ),
        (
            'previous = "policy-2026-11.toml"\nuntil = "31/12/2026"\n',
            "observe.until: '31/12/2026' is not a date: write it as YYYY-MM-DD, e.g."
            ' "2026-12-31"',
        ),
        (
            'previous = "policy-2026-11.toml"\nuntil = 2026-12-31T00:00:00\n',
            "observe.until: 2026-12-31 00:00:00 is not a date: write it as YYYY-MM-DD, e.g."
            ' "2026-12-31"',
        ),
        ('previous = "policy-2026-11.toml"\n', "observe.until: Field required"),
        ('until = "2026-12-31"\n', "observe.previous: Field required"),
        ('previous = ""\nuntil = "2026-12-31"\n', "observe.previous: String should have at"),
        (
            'previous = "policy-2026-10.toml"\nuntil = "2026-12-31"\n',
            "observe.previous: cannot read policy-2026-10.toml: No such file or directory",
        ),
    ],
    ids=["unknown-key", "bad-until", "datetime-until", "no-until", "no-previous", "empty", "gone"],
)
def test_a_bad_observe_table_is_one_line(table: str, error: str) -> None:
    """An unknown key, a bad or missing until, a missing or unreadable previous file: one
    line naming the key (exit 2 at start-up)."""
    text = OBSERVED.split("[observe]", maxsplit=1)[0] + "[observe]\n" + table
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, read_previous=read)

    assert str(raised.value).startswith(f"policy file: {error}")
    assert "\n" not in str(raised.value)


def test_an_invalid_previous_file_is_named_with_its_own_error() -> None:
    """The previous file's own problem follows the key that named it."""

    def bad(name: str) -> Policy:
        return parse_policy('version = "old"\n', source=f"policy file {name}", previous=True)

    with pytest.raises(PolicyError) as raised:
        parse_policy(OBSERVED, read_previous=bad)

    assert str(raised.value) == (
        "policy file: observe.previous: policy file policy-2026-11.toml: groups: Field required"
    )


def test_observe_needs_a_reader() -> None:
    """Text alone cannot name a file relative to itself: refused, saying how to give it."""
    with pytest.raises(PolicyError) as raised:
        parse_policy(OBSERVED)

    assert str(raised.value) == (
        "policy file: observe.previous: 'policy-2026-11.toml' cannot be read here: name the"
        " policy by its file (--policy or EVIDENCE_POLICY_FILE)"
    )


def test_observe_must_be_a_table() -> None:
    """observe = 3 is not a window."""
    with pytest.raises(PolicyError) as raised:
        parse_policy('version = "v"\nobserve = 3\n[groups.a]\nmin_coverage = 0.5\n')

    assert str(raised.value) == (
        "policy file: observe: must be a table ([observe] with previous and until)"
    )


def test_the_previous_policy_s_own_window_is_not_followed() -> None:
    """A previous file with an [observe] of its own is read as its groups alone."""
    rule = parse_policy(OBSERVED, previous=True)

    assert (rule.version, rule.observe) == ("2026-12-15", None)


@pytest.mark.parametrize(
    ("today", "open_"),
    [(date(2026, 12, 1), True), (date(2026, 12, 31), True), (date(2027, 1, 1), False)],
    ids=["before", "on-until", "after"],
)
def test_the_window_is_open_through_its_last_day(today: date, open_: bool) -> None:
    """previous_rule() gives the previous policy while today <= until, then None."""
    policy = parse_policy(OBSERVED, read_previous=read)
    rule = previous_rule(policy, today)

    assert (rule.version if rule else None) == ("2026-11-01" if open_ else None)


def test_no_window_no_previous_rule() -> None:
    """Without [observe] (or without a policy) there is no previous rule."""
    assert (previous_rule(BANDED, date(2026, 12, 1)), previous_rule(None, date(2026, 12, 1))) == (
        None,
        None,
    )


@pytest.mark.parametrize(
    ("today", "warned"),
    [(date(2026, 12, 31), False), (date(2027, 1, 1), True)],
    ids=["on-until", "day-after"],
)
def test_the_warning_comes_the_day_after_until(today: date, warned: bool) -> None:
    """window_ended() says nothing through the last day, then names the window and file."""
    policy = parse_policy(OBSERVED, read_previous=read)
    warning = window_ended(policy, today, previous_path="contracts/examples/policy-2026-11.toml")

    assert warning == (
        "WARNING: the observation window of policy 2026-12-15 ended on 2026-12-31: decisions"
        " no longer carry policy 2026-11-01; remove [observe] from the policy file and delete"
        " contracts/examples/policy-2026-11.toml"
        if warned
        else None
    )


def test_a_row_decided_in_the_window_carries_the_previous_decision() -> None:
    """judge() with the window's previous rule as baseline: 0.8 fails now, passed before, so
    the release rule owns it."""
    policy = parse_policy(OBSERVED, read_previous=read)
    row = ReleaseRow(
        case_id="c-1",
        required_claim_ids=["a", "b", "c", "d", "e"],
        supported_claim_ids=["a", "b", "c", "d"],
    )
    judgement = judge(row, policy, baseline=previous_rule(policy, date(2026, 12, 31)))

    assert judgement.baseline is not None
    assert (judgement.decision.status, judgement.baseline.status, judgement.triage.owner) == (
        "fail",
        "pass",
        "release-rule",
    )
