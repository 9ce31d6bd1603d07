"""Adopting a gate (SPEC §12): the old score beside the new decision, and the review sheet.

Pure: judged rows in, classes and sheet rows out.

`compare` puts every row in exactly one class. A new row whose status is `invalid` is
`new_invalid` whatever the legacy said (matched or not: invalid rows are counted apart
first); a case in only one of the two is `unmatched`; otherwise the new metric passes only
when its status is `pass` (`fail` and `review` are "new fails") and the legacy passes when its
`passed` says so, else when its score is at least the legacy threshold.

The review sheet: per candidate, the valid rows of one policy group whose value lies in
[candidate − band, candidate + band) (the edges computed in decimal from the numbers as
written, so 0.85 − 0.05 is exactly the float 0.8), side `below` when the value is under the
candidate, `above` when at or over it (the candidate's own decision: value ≥ candidate
passes). Of each candidate and side at most `sample` rows are kept: those with the smallest
sample point (SPEC §10, contracts.sampling.sample_point) of the key
"calibrate:<candidate>:<input_hash>" (the candidate as Python's repr of the float writes it,
e.g. 0.85), ties by input hash; the rows come in that order, candidates ascending, `below`
before `above`. So the same rows give the same sheet, and a larger sample only adds rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from contracts.outcomes import Owner
from contracts.sampling import sample_point

CompareClass = Literal[
    "both_pass",
    "both_fail",
    "legacy_pass_new_fail",
    "legacy_fail_new_pass",
    "new_invalid",
    "unmatched",
]
CLASSES: tuple[CompareClass, ...] = get_args(CompareClass)
# The classes a person must read row by row: every disagreement, and what could not be compared.
ATTENTION: frozenset[CompareClass] = frozenset(
    {"legacy_pass_new_fail", "legacy_fail_new_pass", "new_invalid", "unmatched"}
)
DISAGREE: frozenset[CompareClass] = frozenset({"legacy_pass_new_fail", "legacy_fail_new_pass"})
Side = Literal["below", "above"]
SIDES: tuple[Side, ...] = get_args(Side)
SAMPLE_PREFIX = "calibrate:"
INVALID_ROWS_NOTE = (
    "counted apart: a threshold chosen before they are repaired is chosen on the wrong "
    "population (owner evaluation-data)"
)


class JudgedRow(BaseModel):
    """A row as the new metric and policy judged it (a `gate` line, a store's first outcome).

    `case_id` is None for a line too broken to name its case; `input_hash` for a row that has
    none (a ReleaseRow, a broken line); the claim lists for a row that could not be read.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    case_id: str | None
    input_hash: str | None = None
    policy_group: str | None = None
    contract_version: str | None = None
    value: float | None
    # Any status a policy gives (`review` too, SPEC §4): only `pass` is a pass here.
    status: str
    reason: str
    owner: Owner | None
    required_claim_ids: list[str] | None = None
    supported_claim_ids: list[str] | None = None
    missing_claim_ids: list[str] | None = None


class LegacyRow(BaseModel):
    """One row of the old calculation: its case, its score, and its own verdict if it has one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case_id: str
    score: float
    passed: bool | None = None
    line: int


class Compared(BaseModel):
    """One row of `compare`: its class, the legacy score and the new decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case_id: str | None
    verdict: CompareClass
    legacy_score: float | None
    value: float | None
    status: str | None  # as the policy said it: pass, fail, review, invalid; None: no new row
    owner: Owner | None
    missing_claim_ids: list[str] | None
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        """The output line: `class` for the verdict (a Python keyword as a field name)."""
        return {
            "case_id": self.case_id,
            "class": self.verdict,
            "legacy_score": self.legacy_score,
            "value": self.value,
            "status": self.status,
            "owner": self.owner,
            "missing_claim_ids": self.missing_claim_ids,
            "reason": self.reason,
        }


def legacy_passes(row: LegacyRow, threshold: float | None) -> bool:
    """The old verdict: its `passed` when given, else score ≥ threshold; ValueError when it
    has neither."""
    if row.passed is not None:
        return row.passed
    if threshold is None:
        raise ValueError(f"line {row.line} has no passed and no legacy threshold was given")
    return row.score >= threshold


def compare(
    new_rows: Iterable[JudgedRow],
    legacy: Mapping[str, LegacyRow],
    *,
    legacy_threshold: float | None,
) -> list[Compared]:
    """Every row in exactly one class: the new rows in their order (the last row of a case
    stands, at its case's first place, as a store's newest hash does), then the legacy rows no
    new row names, in the legacy file's order."""
    places: dict[str, int] = {}
    rows: list[JudgedRow] = []  # a line without a case ID is its own row
    for row in new_rows:
        if row.case_id is not None and row.case_id in places:
            rows[places[row.case_id]] = row
            continue
        if row.case_id is not None:
            places[row.case_id] = len(rows)
        rows.append(row)
    found = [_classify(row, legacy.get(row.case_id or ""), legacy_threshold) for row in rows]
    named = {row.case_id for row in rows}
    found += [
        Compared(
            case_id=old.case_id,
            verdict="unmatched",
            legacy_score=old.score,
            value=None,
            status=None,
            owner=None,
            missing_claim_ids=None,
            reason="no new row for this case",
        )
        for case_id, old in legacy.items()
        if case_id not in named
    ]
    return found


def _classify(row: JudgedRow, old: LegacyRow | None, threshold: float | None) -> Compared:
    verdict: CompareClass
    if row.status == "invalid":
        verdict = "new_invalid"
    elif old is None:
        verdict = "unmatched"
    else:
        new_pass = row.status == "pass"
        old_pass = legacy_passes(old, threshold)
        verdict = (
            ("both_pass" if new_pass else "legacy_pass_new_fail")
            if old_pass
            else ("legacy_fail_new_pass" if new_pass else "both_fail")
        )
    reason = row.reason
    if verdict == "unmatched":
        reason = f"no legacy row for this case; {reason}"
    return Compared(
        case_id=row.case_id,
        verdict=verdict,
        legacy_score=None if old is None else old.score,
        value=row.value,
        status=row.status,
        owner=row.owner,
        missing_claim_ids=row.missing_claim_ids,
        reason=reason,
    )


def counts(rows: Iterable[Compared]) -> dict[str, int]:
    """How many rows each class holds, every class named (0 included), in CLASSES order."""
    found: dict[str, int] = dict.fromkeys(CLASSES, 0)
    for row in rows:
        found[row.verdict] += 1
    return found


class SheetRow(BaseModel):
    """One row of the review sheet: a judged row placed at one candidate threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: float
    side: Side
    row: JudgedRow


def parse_candidates(text: str) -> tuple[float, ...]:
    """Comma-separated thresholds in 0..1, each once, ascending; ValueError saying what is
    wrong (e.g. "0.8;0.9", "abc", "1.2", a repeat)."""
    found: list[float] = []
    for part in text.split(","):
        spelled = part.strip()
        try:
            value = float(spelled)
        except ValueError:
            raise ValueError(
                f"--candidates {text!r}: {spelled!r} is not a number; give thresholds in "
                "0..1 separated by commas, e.g. 0.8,0.85,0.9"
            ) from None
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"--candidates {text!r}: {spelled} is outside 0..1")
        if value in found:
            raise ValueError(f"--candidates {text!r}: {spelled} is given twice")
        found.append(value)
    return tuple(sorted(found))


def check_band(band: float) -> float:
    """A band strictly between 0 and 1; else ValueError saying so."""
    if not math.isfinite(band) or not 0.0 < band < 1.0:
        raise ValueError(f"--band {band!r} must be more than 0 and less than 1, e.g. 0.05")
    return band


def band_edges(candidate: float, band: float) -> tuple[float, float]:
    """[candidate − band, candidate + band), computed in decimal from the numbers' shortest
    spellings, so the edges are the floats a person writing them would get."""
    c, b = Decimal(repr(candidate)), Decimal(repr(band))
    return float(c - b), float(c + b)


def sample_key(candidate: float, input_hash: str) -> str:
    return f"{SAMPLE_PREFIX}{candidate!r}:{input_hash}"


def select_sheet(
    rows: Sequence[JudgedRow],
    candidates: Sequence[float],
    *,
    band: float,
    sample: int | None,
    group: str,
) -> list[SheetRow]:
    """The review sheet's rows: per candidate (ascending) and side (below, above), the valid
    rows of `group` with an input hash in the band, the `sample` with the smallest sample
    points (None: all), in that order. A hash seen twice is taken once (its first row)."""
    check_band(band)
    pool: dict[str, JudgedRow] = {}
    for row in rows:
        if (
            row.status != "invalid"
            and row.value is not None
            and row.input_hash is not None
            and row.policy_group == group
        ):
            pool.setdefault(row.input_hash, row)
    sheet: list[SheetRow] = []
    for candidate in sorted(candidates):
        low, high = band_edges(candidate, band)
        sides: dict[Side, list[JudgedRow]] = {"below": [], "above": []}
        for row in pool.values():
            value = row.value
            assert value is not None  # the pool holds valid rows only
            if low <= value < high:
                sides["below" if value < candidate else "above"].append(row)
        for side in SIDES:
            chosen = sorted(
                sides[side],
                key=lambda r: (
                    sample_point(sample_key(candidate, r.input_hash or "")),
                    r.input_hash,
                ),
            )
            if sample is not None:
                chosen = chosen[:sample]
            sheet += [SheetRow(candidate=candidate, side=side, row=r) for r in chosen]
    return sheet
