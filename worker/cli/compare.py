"""`evidence-worker compare`: the old release check beside the new metric, row by row (SPEC §12,
checkpoints 2-4). Also how `calibrate` reads judged rows from a file or a store."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import STORE_URL, describe, nonempty
from worker.cli.exit_codes import OK, POLICY_FAILURE
from worker.cli.inputs import source_name
from worker.cli.output import dumps_line
from worker.cli.policy_options import add_policy_options, resolve_policy
from worker.cli.store_access import existing_store
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings, display_path

if TYPE_CHECKING:
    from contracts import Attempt, Policy
    from contracts.calibration import JudgedRow, LegacyRow

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "compare",
        **describe(
            "run the new metric beside the old release check and list every disagreement",
            example="compare contracts/examples/attribution-results.jsonl "
            "--legacy contracts/examples/legacy-scores.jsonl --legacy-threshold 0.7 "
            "--policy contracts/examples/policy.toml",
            details="Judge ROWS (what gate reads: ReleaseRows or AttributionResults, JSON "
            "lines; nothing is written), or with --store the store's first outcomes (the rows "
            "records prints; a legacy case no first outcome names is looked up by its case "
            "ID: its inputs repeated an earlier case's), under the policy, and put every case "
            "in exactly one class beside the old score of FILE: both_pass, both_fail, "
            "legacy_pass_new_fail, legacy_fail_new_pass, new_invalid (whatever the legacy "
            "said) or unmatched (a case in only one of the two). The new metric passes only "
            "when its status is pass. FILE is JSON lines or CSV (.csv, or content not starting "
            "with '{') with case_id and the old score, optionally passed (true/false), which "
            "wins over --legacy-threshold (the old score passes when at least X). A case "
            "repeated in ROWS: its last line stands (in a store, its newest hash). stdout: one "
            "JSON line per row that needs a person (the two disagreements, new_invalid, "
            "unmatched): case_id, class, legacy_score, value, status, owner, "
            "missing_claim_ids, reason; stderr: the count of every class. Exit 0 when the two "
            "agree on every matched valid row, 1 when any disagree, 2 on bad input.",
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "path",
        nargs="?",
        metavar="ROWS",
        type=nonempty(str, "name a file, or - for stdin"),
        help="JSON-lines ReleaseRows or AttributionResults, or - for stdin",
    )
    source.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help="instead of ROWS, the store's first outcomes, one per input hash "
        "(sqlite:///file or redis://host:port/db; default: read ROWS)",
    )
    add_legacy_options(parser)
    add_policy_options(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one object: the six class counts and rows (the rows stdout would list)",
    )
    parser.set_defaults(handler=run)


def add_legacy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--legacy",
        metavar="FILE",
        required=True,
        type=nonempty(str, "name the legacy scores file"),
        help="the old calculation's scores: JSON lines or CSV with case_id, score and "
        "optionally passed (required: no default)",
    )
    parser.add_argument(
        "--legacy-threshold",
        metavar="X",
        help="the old gate's threshold: a legacy row without passed passes when its score is "
        "at least X (default: none; then every legacy row needs passed)",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    from contracts.calibration import ATTENTION, DISAGREE, compare, counts

    policy = resolve_policy(args, settings, required=True)
    assert policy is not None  # required=True raises instead
    threshold = legacy_threshold(args.legacy_threshold)
    legacy = read_legacy(args.legacy, threshold)
    with judged_rows(args, settings, policy, legacy) as (rows, store_name):
        judged = list(rows)
    if not judged:  # every legacy row unmatched would "agree" on nothing, and exit 0
        raise InputError(
            f"store {store_name} holds no first outcomes: nothing to compare (pass --store the "
            "store score or the worker recorded to)"
            if store_name
            else f"{source_name(args.path)} contains no rows"
        )
    found = compare(judged, legacy, legacy_threshold=threshold)
    shown = [row.as_json() for row in found if row.verdict in ATTENTION]
    tally = counts(found)
    code = POLICY_FAILURE if any(tally[name] for name in DISAGREE) else OK
    if args.json:
        print(dumps_line({**tally, "rows": shown}))
    else:
        for line in shown:
            print(dumps_line(line))
    classes = ", ".join(f"{name} {n:,}" for name, n in tally.items())
    where = f"store {store_name}" if store_name else f"rows {source_name(args.path)}"
    print(
        f"compare: {counted(len(found), 'row')}: {classes}; {where}; legacy "
        f"{display_path(args.legacy)}; policy {policy.version}; exit {code}",
        file=sys.stderr,
    )
    invalid_note("compare", tally["new_invalid"])
    return code


def invalid_note(command: str, invalid: int) -> None:
    """The one line compare and calibrate print when invalid rows were counted apart."""
    from contracts.calibration import INVALID_ROWS_NOTE

    if invalid:
        print(f"{command}: {counted(invalid, 'invalid row')} {INVALID_ROWS_NOTE}", file=sys.stderr)


def legacy_threshold(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--legacy-threshold {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"--legacy-threshold {text!r} is not a finite number")
    return value


@contextmanager
def judged_rows(
    args: argparse.Namespace, settings: Settings, policy: Policy, cases: Collection[str] = ()
) -> Iterator[tuple[Iterator[JudgedRow], str | None]]:
    """The rows to judge and the store they come from (masked; None for ROWS): ROWS judged as
    gate judges them, or the store's first outcomes as records decides them, oldest first.
    The store stays open while the rows are read. `cases`: from a store, also these cases
    where only the case index names them (store_rows())."""
    if args.store is None:
        yield file_rows(args.path, policy, settings, label=args.command), None
        return
    from worker.stores import describe as describe_store

    with existing_store(args, settings) as store:
        yield store_rows(store, policy, cases), describe_store(store, args.store)


def file_rows(
    path: str, policy: Policy, settings: Settings, label: str = "compare"
) -> Iterator[JudgedRow]:
    """ROWS judged in process as `gate` judges them (contracts.judging), with gate's progress
    on stderr for a long file; an AttributionResult also carries its input hash and claim
    lists."""
    from worker.cli.gate import FirstSets, gate_row, is_attribution_result
    from worker.cli.inputs import JsonLines
    from worker.cli.progress import over_input

    firsts = FirstSets()
    source = JsonLines(path)
    progress = over_input(label, source)
    for number, body in source:
        line = gate_row(number, body, policy, max_bytes=settings.max_message_bytes, firsts=firsts)
        input_hash, required, supported = None, None, None
        if line["value"] is not None:  # a valid row: its lines parsed
            parsed = json.loads(body)
            required, supported = parsed["required_claim_ids"], parsed["supported_claim_ids"]
            if is_attribution_result(body):
                input_hash = _input_hash(body, settings)
        yield judged_row(line, input_hash=input_hash, required=required, supported=supported)
        progress.tick()
    progress.finish()


def _input_hash(body: bytes, settings: Settings) -> str:
    from contracts import input_hash
    from worker.pipeline.intake import parse_message

    return input_hash(parse_message(body, max_bytes=settings.max_message_bytes))


def store_rows(store: Any, policy: Policy, cases: Collection[str] = ()) -> Iterator[JudgedRow]:
    """The store's first outcomes, oldest first, decided under `policy` as `records` does;
    then each of `cases` that no first outcome names but the case index does (its inputs
    repeated an earlier case's: a hit or a conflict on that hash), as its newest hash's first
    outcome under its own case ID."""
    named: set[str | None] = set()
    for input_hash, first in store.first_outcomes_by_time():
        named.add(first.case_id)
        yield _judged(input_hash, first, policy)
    for case_id in cases:
        if case_id in named:
            continue
        hashes = store.hashes_for_case(case_id, limit=1)
        history = store.history(hashes[0]) if hashes else None
        if history is not None:  # else expired since the index was read
            yield _judged(hashes[0], history.first, policy, case_id=case_id)


def _judged(
    input_hash: str, first: Attempt, policy: Policy, *, case_id: str | None = None
) -> JudgedRow:
    from worker.audit.record_rows import row_of

    return judged_row(
        row_of(input_hash, first, policy),
        input_hash=input_hash,
        required=list(first.required_claim_ids),
        supported=list(first.supported_claim_ids),
        case_id=case_id,
    )


def judged_row(
    line: Mapping[str, Any],
    *,
    input_hash: str | None,
    required: list[str] | None,
    supported: list[str] | None,
    case_id: str | None = None,
) -> JudgedRow:
    """A row as compare and calibrate read it, from a gate line or a records row (the same
    field names); `case_id` in place of the line's, for a case read through the case index."""
    from contracts.calibration import JudgedRow

    return JudgedRow(
        case_id=case_id or line["case_id"],
        input_hash=input_hash,
        policy_group=line["policy_group"],
        contract_version=line["contract_version"],
        value=line["value"],
        status=line["status"],
        reason=line["reason"],
        owner=line["owner"],
        required_claim_ids=required,
        supported_claim_ids=supported,
        missing_claim_ids=line["missing_claim_ids"],
    )


def read_legacy(path: str, threshold: float | None) -> dict[str, LegacyRow]:
    """The legacy file's rows by case ID; InputError naming the file and line for a row
    without case_id or a numeric score, a passed that is not true/false, a repeated case, or
    a row that has no passed when no --legacy-threshold is given."""
    name = display_path(path)
    try:
        text = Path(path).read_text("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        why = getattr(error, "strerror", None) or "it is not UTF-8 text"
        raise InputError(f"cannot read legacy file {name}: {why}") from None
    found: dict[str, LegacyRow] = {}
    for line, fields in _legacy_fields(name, path, text):
        row = _legacy_row(name, line, fields)
        if row.case_id in found:
            raise InputError(
                f"{name} line {line}: case_id {row.case_id!r} repeats line "
                f"{found[row.case_id].line}: give each case one legacy score"
            )
        if row.passed is None and threshold is None:
            raise InputError(
                f"{name} line {line}: no passed and no --legacy-threshold: give the old "
                "gate's threshold with --legacy-threshold X, or a passed column"
            )
        found[row.case_id] = row
    if not found:
        raise InputError(f"legacy file {name} holds no rows")
    return found


def _legacy_fields(name: str, path: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, fields) of each row: JSON lines, or CSV by extension or content."""
    suffix = Path(path).suffix.lower()
    is_json = suffix in JSON_SUFFIXES or (suffix != ".csv" and text.lstrip().startswith("{"))
    if is_json:
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                fields = json.loads(raw)
            except ValueError:
                raise InputError(f"{name} line {number}: not a JSON object") from None
            if not isinstance(fields, dict):
                raise InputError(f"{name} line {number}: not a JSON object")
            yield number, fields
        return
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = {"case_id", "score"} - set(reader.fieldnames or ())
    if missing:
        raise InputError(
            f"{name}: the CSV header lacks {', '.join(sorted(missing))} "
            "(columns: case_id, score, optionally passed)"
        )
    for fields in reader:
        cells: dict[str, Any] = {"case_id": fields["case_id"]}
        score = (fields.get("score") or "").strip()
        if score:
            try:
                cells["score"] = float(score)
            except ValueError:
                cells["score"] = score  # said below: not a number
        passed = (fields.get("passed") or "").strip().lower()
        if passed:
            cells["passed"] = {"true": True, "false": False}.get(passed, passed)
        yield reader.line_num, cells


def _legacy_row(name: str, line: int, fields: dict[str, Any]) -> LegacyRow:
    from contracts.calibration import LegacyRow

    case_id = fields.get("case_id")
    if not isinstance(case_id, str) or not case_id:
        raise InputError(f"{name} line {line}: no case_id (a non-empty string)")
    if "score" not in fields:
        raise InputError(f"{name} line {line}: no score for case {case_id!r}")
    score = fields["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise InputError(f"{name} line {line}: score {score!r} is not a finite number")
    passed = fields.get("passed")
    if passed is not None and not isinstance(passed, bool):
        raise InputError(f"{name} line {line}: passed {passed!r} is not true or false")
    return LegacyRow(case_id=case_id, score=float(score), passed=passed, line=line)
