"""`evidence-worker report`'s aggregation: per-version, per-group statistics of record files
(SPEC §7), which lines count and which are skipped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.report.factories import (
    FAQ,
    PAYMENTS,
    alert,
    group,
    invalid,
    record,
    rejected,
    report_of,
    version,
)
from worker.report.text import render_text


def test_mean_min_max_are_exact_over_valid_rows() -> None:
    """Mean, min and max are computed over the valid values exactly."""
    report = report_of(
        record(value=0.25, status="fail"), record(value=0.5, status="fail"), record(value=1.0)
    )

    stats = group(report, FAQ, "default").valid
    assert (stats.count, stats.mean, stats.min, stats.max) == (3, 1.75 / 3, 0.25, 1.0)


def test_invalid_rows_never_become_zero() -> None:
    """An invalid row leaves mean and min untouched: it is not a 0."""
    report = report_of(record(value=1.0), invalid(), invalid("supported_claim_ids contains x"))

    stats = group(report, FAQ, "default").valid
    assert (stats.count, stats.mean, stats.min, stats.max) == (1, 1.0, 1.0, 1.0)


def test_group_of_only_invalid_rows_has_no_statistics() -> None:
    """With no valid row, mean, min and max are None rather than 0."""
    stats = group(report_of(invalid(), invalid()), FAQ, "default").valid

    assert (stats.count, stats.mean, stats.min, stats.max) == (0, None, None, None)


def test_invalid_rows_are_counted_apart_from_valid_ones() -> None:
    """Statuses are counted per kind, invalid among them, and valid rows separately."""
    report = report_of(record(), record(value=0.5, status="fail"), invalid(), invalid())

    summary = group(report, FAQ, "default")
    assert summary.statuses == {"pass": 1, "fail": 1, "invalid": 2, "scored": 0}
    assert (summary.invalid.count, summary.valid.count, summary.records) == (2, 2, 4)


def test_report_only_rows_count_as_scored_and_valid() -> None:
    """Rows scored without a policy (status scored) are valid and enter the mean."""
    report = report_of(
        record(status="scored", value=0.5, policy_version=None, threshold=None),
        record(status="scored", value=1.0, policy_version=None, threshold=None),
    )

    summary = group(report, FAQ, "default")
    assert summary.statuses["scored"] == 2
    assert (summary.valid.count, summary.valid.mean) == (2, 0.75)


def test_contract_versions_are_never_mixed() -> None:
    """Two versions with the same group name get separate aggregates."""
    report = report_of(
        record(value=1.0), record(contract_version=PAYMENTS, value=0.5, status="fail")
    )

    assert [v.contract_version for v in report.contract_versions] == [PAYMENTS, FAQ]
    assert group(report, FAQ, "default").valid.mean == 1.0
    assert group(report, PAYMENTS, "default").valid.mean == 0.5


def test_policy_groups_are_aggregated_separately() -> None:
    """Within a version each policy group is its own aggregate, in name order."""
    report = report_of(record(policy_group="disclosure", value=0.5, status="fail"), record())

    assert [g.policy_group for g in version(report, FAQ).groups] == ["default", "disclosure"]
    assert group(report, FAQ, "disclosure").valid.mean == 0.5


def test_rejected_records_get_their_own_bucket_last() -> None:
    """Records rejected before scoring form a clearly named bucket after every version."""
    report = report_of(rejected(), record(), rejected())

    last = report.contract_versions[-1]
    assert (last.contract_version, last.label, last.records) == (
        None,
        "(rejected before scoring)",
        2,
    )
    assert group(report, None, None).invalid.count == 2


def test_top_reasons_are_ordered_by_count_then_text_and_limited_to_five() -> None:
    """The five most frequent invalid reasons, most frequent first, ties in text order."""
    counts = {"r-g": 1, "r-e": 2, "r-f": 1, "r-d": 1, "r-c": 2, "r-b": 3, "r-a": 1}
    report = report_of(*(invalid(reason) for reason, n in counts.items() for _ in range(n)))

    reasons = group(report, FAQ, "default").invalid.top_reasons
    assert [(r.reason, r.count) for r in reasons] == [
        ("r-b", 3),
        ("r-c", 2),
        ("r-e", 2),
        ("r-a", 1),
        ("r-d", 1),
    ]


def test_ragas_prefix_is_stripped_from_reasons_and_the_rest_kept_exact() -> None:
    """Reasons with and without the Ragas prefix group together, otherwise verbatim."""
    report = report_of(
        invalid("supported_claim_ids contains unknown IDs: old-c1"),
        record(
            value=None, status="invalid", reason="supported_claim_ids contains unknown IDs: old-c1"
        ),
        invalid("Supported_claim_ids contains unknown IDs: old-c1"),
    )

    reasons = group(report, FAQ, "default").invalid.top_reasons
    assert [(r.reason, r.count) for r in reasons] == [
        ("supported_claim_ids contains unknown IDs: old-c1", 2),
        ("Supported_claim_ids contains unknown IDs: old-c1", 1),
    ]


def test_several_policy_versions_in_a_group_are_flagged() -> None:
    """A group decided under two policy versions says so, with the count of each."""
    report = report_of(
        record(), record(policy_version="env:0.8"), record(), record(policy_version=None)
    )

    summary = group(report, FAQ, "default")
    assert summary.mixed_policy_versions is True
    assert [(p.policy_version, p.count) for p in summary.policy_versions] == [
        ("2026-12-01", 2),
        ("env:0.8", 1),
        (None, 1),
    ]


def test_one_policy_version_is_not_flagged() -> None:
    """A group decided under one policy version carries no warning."""
    summary = group(report_of(record(), record()), FAQ, "default")

    assert summary.mixed_policy_versions is False
    assert "WARNING" not in render_text(report_of(record(), record()))


def test_mixed_policy_versions_warning_appears_in_the_table_output() -> None:
    """The text report prints a warning line naming both policy versions."""
    text = render_text(report_of(record(), record(policy_version="env:0.8")))

    assert "  default: WARNING: 2 policy versions in one group: 2026-12-01 (1), env:0.8 (1)" in (
        text.splitlines()
    )


def test_cache_outcomes_and_conflicts_are_counted() -> None:
    """Cache outcomes are counted per group; conflicts are the nondeterminism count."""
    report = report_of(record(), record(cache="hit"), record(cache="conflict"), record(cache="hit"))

    summary = group(report, FAQ, "default")
    assert summary.cache == {"miss": 1, "hit": 2, "conflict": 1}
    assert summary.nondeterminism_conflicts == 1


def test_owners_are_counted_and_unrouted_rows_left_out() -> None:
    """Owners are counted per group; passing rows have no owner and are counted apart."""
    report = report_of(record(), record(value=0.5, status="fail", owner="product"), invalid())

    summary = group(report, FAQ, "default")
    assert summary.owners == {
        "attribution": 0,
        "retrieval": 0,
        "product": 1,
        "evaluation-data": 1,
        "release-rule": 0,
    }
    assert summary.no_owner == 1


def test_histogram_bins_valid_values_only() -> None:
    """Ten bins over 0..1, 1.0 in the last bin, invalid rows not drawn."""
    values = [0.0, 0.05, 0.1, 0.5, 0.95, 1.0, 1.0]
    report = report_of(*(record(value=v, status="fail") for v in values), invalid())

    assert version(report, FAQ).histogram == [2, 1, 0, 0, 0, 1, 0, 0, 0, 3]


def test_ecs_documents_are_read_by_their_event_action() -> None:
    """With EVIDENCE_LOG_SCHEMA=ecs the event name is event.action: records and alerts count
    as in the default schema, and ECS's envelope is ignored."""

    def ecs(line: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in line.items() if k not in ("timestamp", "level", "event")}
        return {
            "@timestamp": line.get("timestamp", "2026-12-02T18:15:50.505Z"),
            "log.level": line["level"],
            "message": line["event"],
            **fields,
            "event": {"action": line["event"], "dataset": "evidence_coverage"},
            "log": {"logger": "evidence_coverage"},
        }

    report = report_of(ecs(record()), ecs(invalid()), ecs(alert("a" * 64)), ecs(rejected()))

    assert report.records == 3
    faq = group(report, FAQ, "default")
    assert (faq.valid.count, faq.valid.mean, faq.invalid.count) == (1, 1.0, 1)
    assert report.nondeterminism_alerts == 1
    assert report.skipped == {"evidence_coverage.nondeterminism": 1}


def test_other_lines_of_ours_are_skipped_and_counted_by_event() -> None:
    """Alerts and objects with no event are not records: skipped, counted per event name."""
    report = report_of(record(), alert("a" * 64), {"no": "event"})

    assert report.records == 1
    assert report.skipped == {"(no event)": 1, "evidence_coverage.nondeterminism": 1}
    assert report.log_lines == 0


def test_celery_s_own_lines_are_log_lines_not_skipped_ones() -> None:
    """A worker's stdout is full of Celery's lines: counted apart, never as skipped lines."""
    ready = {"level": "info", "event": "celery@host ready.", "logger": "celery.apps.worker"}
    connected = {"level": "info", "event": "Connected to redis://localhost:6379/0"}
    report = report_of(record(), ready, connected, ready)

    assert report.records == 1
    assert report.skipped == {}
    assert report.log_lines == 3


def test_alerts_are_counted_per_contract_version_through_their_hash() -> None:
    """An alert belongs to the version of the record with the same input hash."""
    report = report_of(
        record(input_hash="f" * 64, cache="conflict"),
        record(contract_version=PAYMENTS, input_hash="b" * 64),
        alert("f" * 64),
        alert("f" * 64),
        alert("0" * 64),
        rejected(),
    )

    assert (
        version(report, FAQ).nondeterminism_alerts,
        version(report, PAYMENTS).nondeterminism_alerts,
    ) == (2, 0)
    assert version(report, None).nondeterminism_alerts == 0
    assert (report.nondeterminism_alerts, report.unmatched_nondeterminism_alerts) == (3, 1)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        pytest.param('{"event": "evidence_coverage.scored",', "invalid JSON: ", id="truncated"),
        pytest.param("celery: worker ready", "invalid JSON: ", id="plain-text"),
        pytest.param("[1, 2]", "not a JSON object but list", id="array"),
        pytest.param(
            json.dumps(record(status="ok")),
            "bad evidence_coverage.scored record: schema: status: ",
            id="unknown-status",
        ),
        pytest.param(
            json.dumps(record(value=1.5)),
            "bad evidence_coverage.scored record: schema: value: ",
            id="value-above-1",
        ),
        pytest.param(
            json.dumps(record(value=float("nan"))),
            "bad evidence_coverage.scored record: schema: value: ",
            id="value-nan",
        ),
        pytest.param(
            json.dumps({k: v for k, v in record().items() if k != "status"}),
            "bad evidence_coverage.scored record: schema: status: Field required",
            id="missing-field",
        ),
    ],
)
def test_unreadable_lines_are_counted_with_their_line_number(line: str, error: str) -> None:
    """A line that is not JSON or not a valid record is counted unreadable, not fatal."""
    report = report_of(record(), line, record())

    assert (report.records, report.unreadable) == (2, 1)
    (unreadable,) = report.unreadable_lines
    assert unreadable.line == 2
    assert unreadable.error.startswith(error), unreadable.error
