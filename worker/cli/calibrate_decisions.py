"""`evidence-worker calibrate --decisions A.csv B.csv ...`: the reviewers' agreement per
candidate on filled review sheets, and the threshold it recommends (SPEC §12)."""

from __future__ import annotations

import argparse
import csv
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from worker.cli.exit_codes import OK, POLICY_FAILURE
from worker.cli.output import dumps_line
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import display_path

if TYPE_CHECKING:
    from contracts.agreement import CandidateAgreement, Recommendation

# The sheet's columns, as calibrate writes them (worker/cli/calibrate.py).
COLUMNS: Final = (
    "candidate",
    "side",
    "case_id",
    "input_hash",
    "group",
    "contract_version",
    "value",
    "required_claim_ids",
    "supported_claim_ids",
    "missing_claim_ids",
    "owner",
    "explain",
    "decision",
)
DECISIONS = {"pass": True, "fail": False}


def run(args: argparse.Namespace) -> int:
    """calibrate --decisions: the agreement per candidate, and the recommendation."""
    from contracts.agreement import ReviewedRow, agreement, recommend

    for option in ("candidates", "sheet", "band", "sample", "group", "policy", "min_coverage"):
        if getattr(args, option) is not None:
            raise InputError(f"--{option.replace('_', '-')} does not apply to --decisions")
    sheets = args.decisions
    if len(sheets) < 2:
        raise InputError("--decisions needs two or more filled sheets, one per reviewer")
    _no_sheet_twice(sheets)
    read = [_read_sheet(path) for path in sheets]
    first_set = sorted({candidate for candidate, _ in read[0]})
    for path, decided in zip(sheets[1:], read[1:], strict=True):
        other = sorted({candidate for candidate, _ in decided})
        if other != first_set:
            raise InputError(
                f"{display_path(path)}: candidates {_spell(other)} differ from "
                f"{display_path(sheets[0])}'s {_spell(first_set)}: give sheets of one "
                "calibrate run"
            )
    keys = sorted({key for decided in read for key in decided})
    per: dict[float, list[ReviewedRow]] = {candidate: [] for candidate in first_set}
    left_out = 0
    for key in keys:
        entries = [entry for decided in read if (entry := decided.get(key)) is not None]
        decisions = tuple(decision for _, decision in entries if decision is not None)
        if len(decisions) < len(read):
            left_out += 1
            continue
        side = entries[0][0]  # the candidate's own decision, as the sheet wrote it
        per[key[0]].append(ReviewedRow(candidate_passes=side == "above", decisions=decisions))
    results = [agreement(candidate, rows) for candidate, rows in per.items()]
    chosen = recommend(results)
    print(
        f"calibrate: {counted(len(sheets), 'sheet')}; {counted(len(keys) - left_out, 'row')} "
        f"decided in every sheet; {counted(left_out, 'row')} left out (missing or undecided "
        "in a sheet: never guessed)",
        file=sys.stderr,
    )
    if args.json:
        print(dumps_line(_as_json(results, chosen)))
    else:
        sys.stdout.write(_table(results, chosen))
    return OK if chosen.recommendation is not None else POLICY_FAILURE


def _no_sheet_twice(sheets: Sequence[str]) -> None:
    seen: list[str] = []
    for path in sheets:
        for earlier in seen:
            try:
                same = os.path.samefile(path, earlier)
            except OSError:
                same = path == earlier
            if same:
                raise InputError(
                    f"{display_path(path)} is given twice: give each reviewer's sheet once"
                )
        seen.append(path)


# (candidate, input_hash) -> (side, decision: True pass, False fail, None undecided)
Decided = dict[tuple[float, str], tuple[str, bool | None]]


def _read_sheet(path: str) -> Decided:
    """A filled sheet's decisions; InputError naming the file and line for anything else."""
    from worker.audit.safe_csv import restored

    name = display_path(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None or tuple(header) != COLUMNS:
                raise InputError(
                    f"{name}: not a calibration sheet (its header is not "
                    f"{','.join(COLUMNS)}; write one with calibrate --sheet)"
                )
            decided: Decided = {}
            for cells in reader:
                if not any(cells):
                    continue
                where = f"{name} line {reader.line_num}"
                if len(cells) != len(COLUMNS):
                    raise InputError(f"{where}: {len(cells)} cells, not {len(COLUMNS)}")
                fields = dict(zip(COLUMNS, map(restored, cells), strict=True))
                try:
                    candidate = float(fields["candidate"])
                except ValueError:
                    raise InputError(
                        f"{where}: candidate {fields['candidate']!r} is not a number"
                    ) from None
                if fields["side"] not in ("below", "above"):
                    raise InputError(f"{where}: side {fields['side']!r} is not below or above")
                raw = fields["decision"]
                spelled = raw.strip().lower()
                if spelled and spelled not in DECISIONS:
                    raise InputError(
                        f"{where}: decision {raw!r} is not pass or fail (leave it empty when "
                        "undecided)"
                    )
                key = (candidate, fields["input_hash"])
                if key in decided:
                    raise InputError(
                        f"{where}: candidate {candidate!r} and input_hash "
                        f"{fields['input_hash']} repeat an earlier row"
                    )
                decided[key] = (fields["side"], DECISIONS.get(spelled))
    except OSError as error:
        raise InputError(f"cannot read {name}: {error.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise InputError(f"cannot read {name}: {error}") from None
    return decided


def _spell(candidates: Sequence[float]) -> str:
    return ",".join(map(repr, candidates)) or "none"


def _as_json(results: Sequence[CandidateAgreement], chosen: Recommendation) -> dict[str, Any]:
    return {
        "candidates": [r.model_dump(mode="json", exclude={"estimator"}) for r in results],
        "estimator": results[0].estimator if results else None,
        "recommendation": chosen.recommendation,
        "message": chosen.message,
    }


HEADINGS: Final = (
    "candidate",
    "n",
    "percent_agreement",
    "kappa",
    "kappa_low",
    "kappa_high",
    "threshold_agreement",
)


def _table(results: Sequence[CandidateAgreement], chosen: Recommendation) -> str:
    """One line per candidate, the estimator, kappa's undefined reasons, the recommendation."""
    lines = [list(HEADINGS)]
    for r in results:
        lines.append(
            [
                repr(r.candidate),
                str(r.n),
                *(
                    "-" if v is None else f"{v:.3f}"
                    for v in (
                        r.percent_agreement,
                        r.kappa,
                        r.kappa_low,
                        r.kappa_high,
                        r.threshold_agreement,
                    )
                ),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADINGS))]
    text = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    ]
    if results:
        text.append(results[0].estimator)
    text += [
        f"{r.candidate!r}: kappa undefined: {r.kappa_reason}" for r in results if r.kappa_reason
    ]
    text.append(chosen.message)
    return "\n".join(text) + "\n"
