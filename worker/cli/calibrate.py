"""`evidence-worker calibrate`: the review sheet of rows around candidate thresholds (SPEC §12);
with --decisions, the reviewers' agreement on filled sheets (calibrate_decisions.py)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import PROG, STORE_URL, describe, nonempty, positive_int
from worker.cli.calibrate_decisions import COLUMNS
from worker.cli.compare import invalid_note, judged_rows
from worker.cli.exit_codes import OK
from worker.cli.policy_options import add_policy_options, resolve_policy
from worker.cli.store_access import store_url
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings, display_path, masked_url

if TYPE_CHECKING:
    from contracts.calibration import SheetRow

DEFAULT_BAND = "0.05"
DEFAULT_SAMPLE = 25


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "calibrate",
        **describe(
            "write the review sheet around candidate thresholds; measure reviewers' agreement",
            example="calibrate --store sqlite:///evidence-coverage.sqlite3 "
            "--policy contracts/examples/policy.toml --candidates 0.6,0.7,0.8 --band 0.1 "
            "--sheet sheet.csv\n"
            f"  {PROG} calibrate --decisions reviewer-a.csv reviewer-b.csv",
            details="Sheet: for each candidate, the valid rows of --group with a value in "
            "[candidate - band, candidate + band), side below or above the candidate, at most "
            "--sample per candidate and side chosen by the sha256 rule of sampling (key "
            "calibrate:<candidate>:<input_hash>, smallest first), one CSV row each with the "
            "command that explains it and an empty decision a reviewer fills with pass or "
            "fail; the same call writes the same file byte for byte, atomically. ROWS must be "
            "AttributionResults (the sheet's key is the input hash); their explain commands "
            "look them up in the store `score` records them in (--store, credentials masked). "
            "Decisions: two or more filled sheets, rows joined by candidate and input_hash; a "
            "row missing or undecided in any sheet is left out and counted, never guessed. Per "
            "candidate: n, percent agreement, Cohen's kappa (Fleiss' for three or more "
            "reviewers) with its 95% interval, and threshold agreement; the recommendation is "
            "the candidate with the highest threshold agreement whose kappa_low is at least "
            "0.6. Exit 0 with a recommendation, 1 without, 2 on bad input.",
        ),
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "path",
        nargs="?",
        metavar="ROWS",
        type=nonempty(str, "name a file, or - for stdin"),
        help="JSON-lines AttributionResults to place on the sheet, or - for stdin",
    )
    source.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help="instead of ROWS, the store's first outcomes (sqlite:///file or "
        "redis://host:port/db; default: read ROWS)",
    )
    source.add_argument(
        "--decisions",
        metavar="SHEET",
        nargs="+",
        type=nonempty(str, "name a filled sheet"),
        help="measure agreement on these filled sheets (two or more) instead of writing one "
        "(default: write a sheet)",
    )
    add_policy_options(parser)
    parser.add_argument(
        "--group",
        metavar="G",
        type=nonempty(str, "name a policy group"),
        help="the policy group whose rows are reviewed (default: the group named default)",
    )
    parser.add_argument(
        "--candidates",
        metavar="LIST",
        help="candidate thresholds in 0..1, separated by commas, e.g. 0.8,0.85,0.9 "
        "(no default: a sheet needs them)",
    )
    parser.add_argument(
        "--band",
        metavar="B",
        help=f"rows within B of a candidate are reviewed; 0 < B < 1 (default: {DEFAULT_BAND})",
    )
    parser.add_argument(
        "--sample",
        metavar="N",
        type=positive_int,
        help=f"at most N rows per candidate and side (default: {DEFAULT_SAMPLE})",
    )
    parser.add_argument(
        "--sheet",
        metavar="OUT.csv",
        type=nonempty(Path, "name the CSV file to write"),
        help="the review sheet to write, replaced whole if it exists (no default: a sheet "
        "needs it)",
    )
    parser.add_argument(
        "--json", action="store_true", help="with --decisions: print one JSON object"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.decisions is not None:
        from worker.cli import calibrate_decisions

        return calibrate_decisions.run(args)
    return _sheet(args, settings)


# The review sheet


def _sheet(args: argparse.Namespace, settings: Settings) -> int:
    from contracts.calibration import check_band, parse_candidates, select_sheet
    from contracts.policy import DEFAULT_GROUP

    if args.path is None and args.store is None:
        raise InputError("give ROWS or --store URL for a sheet, or --decisions SHEET... to measure")
    for option in ("candidates", "sheet"):
        if getattr(args, option) is None:
            raise InputError(f"a sheet needs --{option}")
    if args.json:
        raise InputError("--json applies to calibrate --decisions only")
    try:
        candidates = parse_candidates(args.candidates)
        band = check_band(_number(args.band or DEFAULT_BAND, "--band"))
    except ValueError as error:
        raise InputError(str(error)) from None
    policy = resolve_policy(args, settings, required=True)
    assert policy is not None  # required=True raises instead
    group = args.group or DEFAULT_GROUP
    if group not in policy.groups:
        raise InputError(
            f"--group {group!r} is not a group of policy {policy.version} "
            f"(groups: {', '.join(sorted(policy.groups))})"
        )
    sample = args.sample or DEFAULT_SAMPLE
    with judged_rows(args, settings, policy) as (judged, store_name):
        rows = list(judged)
    if not rows:
        raise InputError("no rows to calibrate on")
    if args.path is not None:
        for number, row in enumerate(rows, start=1):
            if row.value is not None and row.input_hash is None:
                raise InputError(
                    f"row {number} ({row.case_id}) is a ReleaseRow: calibrate needs "
                    "AttributionResults, whose input hash is the sheet's key (or use --store)"
                )
    sheet = select_sheet(rows, candidates, band=band, sample=sample, group=group)
    where = masked_url(store_url(args, settings))
    explain = _explain_command(args, where)
    _write_atomically(args.sheet, [_cells(row, explain) for row in sheet])
    per = "; ".join(
        f"{candidate!r}: "
        + ", ".join(
            f"{sum(r.candidate == candidate and r.side == side for r in sheet)} {side}"
            for side in ("below", "above")
        )
        for candidate in candidates
    )
    source = (
        f"store {store_name}"
        if store_name
        else f"{display_path(args.path)} (explain finds its rows in {where} once score has "
        "recorded them there)"
    )
    print(
        f"calibrate: wrote {display_path(args.sheet)}: {counted(len(sheet), 'row')} ({per}) of "
        f"{counted(len(rows), 'row')} read, group {group}, band {band!r}, at most {sample} per "
        f"side; {source}; policy {policy.version}",
        file=sys.stderr,
    )
    invalid_note(
        "calibrate",
        sum(row.status == "invalid" and row.policy_group in (group, None) for row in rows),
    )
    return OK


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{option} {text!r} is not a number") from None


def _explain_command(args: argparse.Namespace, store: str) -> str:
    """The explain command of a row, {} for its input hash: the store as masked_url() prints
    it (a password is never written: `**` stands for it), the policy as given."""
    parts = [PROG, "explain", "{}", "--store", shlex.quote(store)]
    if args.policy is not None:
        parts += ["--policy", shlex.quote(str(args.policy))]
    elif args.min_coverage is not None:
        parts += ["--min-coverage", shlex.quote(args.min_coverage)]
    return " ".join(parts)


def _cells(sheet_row: SheetRow, explain: str) -> list[str]:
    from contracts.outcomes import value_json

    row = sheet_row.row
    return [
        repr(sheet_row.candidate),
        sheet_row.side,
        row.case_id or "",
        row.input_hash or "",
        row.policy_group or "",
        row.contract_version or "",
        value_json(row.value),
        _ids(row.required_claim_ids),
        _ids(row.supported_claim_ids),
        _ids(row.missing_claim_ids),
        row.owner or "",
        explain.format(row.input_hash),
        "",
    ]


def _ids(ids: Sequence[str] | None) -> str:
    """A claim ID list as JSON text: unambiguous for IDs holding "," or ";"."""
    return "" if ids is None else json.dumps(list(ids), ensure_ascii=False, separators=(",", ":"))


def _write_atomically(path: Path, rows: list[list[str]]) -> None:
    """The sheet, whole or not at all: written beside `path`, then renamed over it."""
    from worker.audit.safe_csv import SafeWriter

    directory = path.parent
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as error:
        raise InputError(f"cannot write {display_path(path)}: {error.strerror}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
            writer = SafeWriter(out)
            writer.writerow(COLUMNS)
            for cells in rows:
                writer.writerow(cells)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"cannot write {display_path(path)}: {error.strerror}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
