"""The report's running tallies: exact means without a list of values, alerts placed from the
hashes they name alone, and the Graders tally left to a store's caller."""

from __future__ import annotations

import math

from tests.unit.report.factories import FAQ, PAYMENTS, alert, lines, record
from worker.report.aggregate import build_report
from worker.report.tally import ExactSum, ValueTally

A, B, C = "a" * 64, "b" * 64, "c" * 64
GRADER = {"grader_name": "claim-attributor", "grader_version": "3.2.0", "grader_model": "m"}


def test_exact_sum_equals_fsum_where_a_running_float_sum_drifts() -> None:
    """Ten 0.1s and a 1e-16 total what math.fsum gives (1.0000000000000002), not sum()'s."""
    values = [0.1] * 10 + [1e-16, 1e16, -1e16]
    total = ExactSum()
    for value in values:
        total.add(value)

    assert total.total() == math.fsum(values) == 1.0000000000000002
    assert sum(values) != math.fsum(values)


def test_value_tally_keeps_count_mean_and_extremes() -> None:
    """Count, exact mean, min and max of the values added; no mean without values."""
    tally = ValueTally()
    assert tally.mean() is None
    for value in (0.5, 1.0, 0.25):
        tally.add(value)

    assert (tally.count, tally.mean(), tally.low, tally.high) == (3, 1.75 / 3, 0.25, 1.0)


def test_alerts_placed_from_the_hashes_they_name_as_from_every_hash() -> None:
    """Told the alert hashes up front (a store), the report places alerts as when it keeps
    every record's hash (a file)."""
    rows = lines(
        record(input_hash=A, contract_version=PAYMENTS, policy_group="disclosure"),
        record(input_hash=B),
        record(input_hash=C, policy_group="other"),
        alert(C),
        alert(A),
    )

    told = build_report(rows, source="s", alert_hashes={A, C})

    assert told == build_report(rows, source="s")
    placed = {
        (v.contract_version, g.policy_group): g.nondeterminism_alerts
        for v in told.contract_versions
        for g in v.groups
    }
    assert placed == {(PAYMENTS, "disclosure"): 1, (FAQ, "default"): 0, (FAQ, "other"): 1}


def test_graders_false_leaves_the_graders_section_to_the_caller() -> None:
    """With graders=False the lines' graders are not tallied: the section is empty."""
    rows = lines(record(**GRADER), record(input_hash=B, **GRADER))

    assert [g.inputs for g in build_report(rows, source="s").graders] == [2]
    assert build_report(rows, source="s", graders=False).graders == []
