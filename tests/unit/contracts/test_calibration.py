"""contracts.calibration: compare's six classes and the review sheet's rows (SPEC §12)."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.calibration import (
    CLASSES,
    JudgedRow,
    LegacyRow,
    band_edges,
    check_band,
    compare,
    counts,
    parse_candidates,
    sample_key,
    select_sheet,
)
from contracts.sampling import sample_point


def judged(case_id: str | None, status: str, value: float | None = 0.5, **fields: Any) -> JudgedRow:
    values: dict[str, Any] = {
        "case_id": case_id,
        "status": status,
        "value": None if status == "invalid" else value,
        "reason": "supported=1; required=2; missing=c2" if status != "invalid" else "bad row",
        "owner": {"fail": "product", "invalid": "evaluation-data"}.get(status),
        "policy_group": "default",
        **fields,
    }
    return JudgedRow(**values)


def legacy(*rows: tuple[str, float, bool | None]) -> dict[str, LegacyRow]:
    return {
        case: LegacyRow(case_id=case, score=score, passed=passed, line=number)
        for number, (case, score, passed) in enumerate(rows, start=1)
    }


def test_every_class_is_counted_exactly() -> None:
    """Crafted rows land one per class as the rules say, `review` a new fail, `passed` over the
    threshold, invalid over unmatched; the counts name all six classes."""
    new = [
        judged("both-pass", "pass", 0.9),
        judged("both-fail", "fail", 0.5),
        judged("old-pass", "fail", 0.6),
        judged("old-fail", "pass", 1.0),
        judged("in-review", "review", 0.84),
        judged("invalid-matched", "invalid"),
        judged("invalid-alone", "invalid"),
        judged("new-only", "pass", 1.0),
        judged(None, "invalid"),  # a line too broken to name its case
    ]
    old = legacy(
        ("both-pass", 0.95, None),
        ("both-fail", 0.2, None),
        ("old-pass", 0.1, True),  # passed wins over the score
        ("old-fail", 0.99, False),
        ("in-review", 0.8, None),
        ("invalid-matched", 0.9, None),
        ("old-only", 0.9, None),
    )

    found = compare(new, old, legacy_threshold=0.7)

    assert [(row.case_id, row.verdict) for row in found] == [
        ("both-pass", "both_pass"),
        ("both-fail", "both_fail"),
        ("old-pass", "legacy_pass_new_fail"),
        ("old-fail", "legacy_fail_new_pass"),
        ("in-review", "legacy_pass_new_fail"),
        ("invalid-matched", "new_invalid"),
        ("invalid-alone", "new_invalid"),
        ("new-only", "unmatched"),
        (None, "new_invalid"),
        ("old-only", "unmatched"),
    ]
    assert counts(found) == {
        "both_pass": 1,
        "both_fail": 1,
        "legacy_pass_new_fail": 2,
        "legacy_fail_new_pass": 1,
        "new_invalid": 3,
        "unmatched": 2,
    }
    assert tuple(counts(found)) == CLASSES


def test_a_disagreement_carries_what_a_person_reads() -> None:
    """A disagreeing row's line: case, class, both numbers, status, owner, missing IDs, reason."""
    row = judged("refund-002", "fail", 2 / 3, missing_claim_ids=["refund-method"])

    (found,) = compare([row], legacy(("refund-002", 0.81, None)), legacy_threshold=0.7)

    assert found.as_json() == {
        "case_id": "refund-002",
        "class": "legacy_pass_new_fail",
        "legacy_score": 0.81,
        "value": 2 / 3,
        "status": "fail",
        "owner": "product",
        "missing_claim_ids": ["refund-method"],
        "reason": "supported=1; required=2; missing=c2",
    }


def test_the_last_row_of_a_case_stands_at_its_first_place() -> None:
    """A case judged twice is compared once, with its later row."""
    new = [judged("a", "fail", 0.5), judged("b", "pass", 1.0), judged("a", "pass", 1.0)]

    found = compare(new, legacy(("a", 0.9, None), ("b", 0.9, None)), legacy_threshold=0.7)

    assert [(row.case_id, row.verdict) for row in found] == [("a", "both_pass"), ("b", "both_pass")]


def test_the_legacy_threshold_is_inclusive() -> None:
    """A legacy score equal to the threshold passes, as the new policy's does."""
    (found,) = compare([judged("a", "pass", 1.0)], legacy(("a", 0.7, None)), legacy_threshold=0.7)

    assert found.verdict == "both_pass"


def test_a_legacy_row_without_passed_needs_a_threshold() -> None:
    """No passed and no threshold: an error naming the line, not a guess."""
    with pytest.raises(ValueError, match="line 1 has no passed and no legacy threshold"):
        compare([judged("a", "pass", 1.0)], legacy(("a", 0.7, None)), legacy_threshold=None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.8,0.85,0.9", (0.8, 0.85, 0.9)), (" 0.9, 0.8 ", (0.8, 0.9)), ("0,1", (0.0, 1.0))],
)
def test_candidates_are_read_ascending(text: str, expected: tuple[float, ...]) -> None:
    """Comma-separated numbers in 0..1, sorted."""
    assert parse_candidates(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.8;0.9", "--candidates '0.8;0.9': '0.8;0.9' is not a number; give thresholds in 0..1 "
         "separated by commas, e.g. 0.8,0.85,0.9"),
        ("abc", "--candidates 'abc': 'abc' is not a number; give thresholds in 0..1 separated "
         "by commas, e.g. 0.8,0.85,0.9"),
        ("0.8,", "--candidates '0.8,': '' is not a number; give thresholds in 0..1 separated "
         "by commas, e.g. 0.8,0.85,0.9"),
        ("0.8,1.2", "--candidates '0.8,1.2': 1.2 is outside 0..1"),
        ("-0.1", "--candidates '-0.1': -0.1 is outside 0..1"),
        ("nan", "--candidates 'nan': nan is outside 0..1"),
        ("0.8,0.80", "--candidates '0.8,0.80': 0.80 is given twice"),
    ],
)  # fmt: skip
def test_bad_candidates_say_what_is_wrong(text: str, message: str) -> None:
    """Each bad list is refused with one sentence naming the bad part."""
    with pytest.raises(ValueError, match=r"^--candidates ") as raised:
        parse_candidates(text)

    assert str(raised.value) == message


@pytest.mark.parametrize("band", [0.0, -0.05, 1.0, 1.5, float("nan"), float("inf")])
def test_a_band_outside_0_to_1_is_refused(band: float) -> None:
    """The band is strictly between 0 and 1."""
    with pytest.raises(ValueError, match="must be more than 0 and less than 1"):
        check_band(band)


def test_band_edges_are_the_decimal_ones() -> None:
    """0.85 - 0.05 is the float 0.8 and 0.85 + 0.05 the float 0.9, as a person writes them."""
    assert band_edges(0.85, 0.05) == (0.8, 0.9)


def test_the_band_is_half_open_and_the_candidate_is_above() -> None:
    """[candidate - band, candidate + band): the low edge in, the high edge out; a value equal
    to the candidate is on the side that passes (above)."""
    rows = [
        judged("edge-low", "fail", 0.8, input_hash="1" * 64),
        judged("under-low", "fail", 0.7999, input_hash="2" * 64),
        judged("at-candidate", "pass", 0.85, input_hash="3" * 64),
        judged("under-high", "pass", 0.8999, input_hash="4" * 64),
        judged("edge-high", "pass", 0.9, input_hash="5" * 64),
    ]

    sheet = select_sheet(rows, [0.85], band=0.05, sample=None, group="default")

    assert sorted((r.row.case_id, r.side) for r in sheet) == [
        ("at-candidate", "above"),
        ("edge-low", "below"),
        ("under-high", "above"),
    ]


def test_invalid_rows_other_groups_and_rows_without_a_hash_stay_off_the_sheet() -> None:
    """Only valid rows of the group, each input hash once (its first row)."""
    rows = [
        judged("ok", "fail", 0.8, input_hash="1" * 64),
        judged("again", "fail", 0.8, input_hash="1" * 64),
        judged("invalid", "invalid", input_hash="2" * 64),
        judged("other-group", "fail", 0.8, input_hash="3" * 64, policy_group="disclosure"),
        judged("release-row", "fail", 0.8),
    ]

    sheet = select_sheet(rows, [0.85], band=0.05, sample=None, group="default")

    assert [r.row.case_id for r in sheet] == ["ok"]


def test_the_sample_keeps_the_smallest_sample_points_per_candidate_and_side() -> None:
    """At most N per candidate and side: those with the smallest sha256 point of
    "calibrate:<candidate>:<input_hash>", in that order; a larger N only adds rows."""
    rows = [judged(f"c{i}", "fail", 0.82, input_hash=f"{i:064x}") for i in range(12)]
    rows += [judged(f"p{i}", "pass", 0.87, input_hash=f"{i + 100:064x}") for i in range(12)]

    three = select_sheet(rows, [0.85], band=0.05, sample=3, group="default")
    five = select_sheet(rows, [0.85], band=0.05, sample=5, group="default")

    for side, prefix in (("below", "c"), ("above", "p")):
        ordered = sorted(
            (r for r in rows if r.case_id and r.case_id.startswith(prefix)),
            key=lambda r: sample_point(f"calibrate:0.85:{r.input_hash}"),
        )
        assert [r.row.case_id for r in three if r.side == side] == [r.case_id for r in ordered[:3]]
        assert [r.row.case_id for r in five if r.side == side][:3] == [
            r.case_id for r in ordered[:3]
        ]
    assert sample_key(0.85, "ab") == "calibrate:0.85:ab"


def test_candidates_come_ascending_below_before_above() -> None:
    """The sheet's order: candidate ascending, then side below before above."""
    rows = [
        judged("a", "fail", 0.78, input_hash="1" * 64),
        judged("b", "pass", 0.83, input_hash="2" * 64),
    ]

    sheet = select_sheet(rows, [0.85, 0.8], band=0.05, sample=None, group="default")

    assert [(r.candidate, r.side, r.row.case_id) for r in sheet] == [
        (0.8, "below", "a"),
        (0.8, "above", "b"),
        (0.85, "below", "b"),
    ]
