"""`evidence-worker gate PATH`: reviewed ReleaseRows against a policy, for CI release gates."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import add_path, add_store_option, describe
from worker.cli.inputs import JsonLines, source_name
from worker.cli.output import (
    GATE_COLUMNS,
    JSONL,
    TABLE,
    Table,
    add_format_options,
    chosen_format,
    dumps_line,
    located,
)
from worker.cli.policy_options import (
    add_baseline_policy_option,
    add_policy_options,
    previous_rule_today,
    resolve_policy,
)
from worker.cli.progress import over_input
from worker.cli.run_summary import Tally
from worker.cli.store_access import existing_store, store_name
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings

if TYPE_CHECKING:
    from contracts import AttributionResult, Policy, ReleaseRow
    from contracts.drift import Drift
    from worker.stores import ResultStore
    from worker.stores.contract import FirstRequired

DEFAULT_MAX_BYTES = Settings.model_fields["max_message_bytes"].default


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "gate",
        **describe(
            "check reviewed rows against a policy (CI release gate)",
            example="gate contracts/examples/release-rows.jsonl --min-coverage 0.85",
            details="Rows are ReleaseRows, or AttributionResults (a line with schema_version), "
            "which are triaged: missing claims, findings and the owner of each failure. "
            "One JSON line per row on stdout. Exit 0 when every blocking row passes, "
            "1 when a valid blocking row is below policy or in its group's review band "
            "(status review: a person decides), 2 when any blocking row is invalid. "
            "Non-blocking rows are reported and never change the exit code. Needs a policy. "
            "--baseline-policy decides each row under the previous policy too: a row whose "
            "status changed carries policy_change, and a row that fails only because the rule "
            "moved is owned by release-rule. While the policy's [observe] window is open, its "
            "previous policy is the baseline (--baseline-policy wins) and every row carries "
            "previous_policy_version and previous_status. A row whose required claims differ "
            "from the first row's of its contract version and case drifted (owner "
            "evaluation-data, exit 2); with --store, the store's first set is that first row's.",
        ),
    )
    add_path(parser)
    add_policy_options(parser)
    add_baseline_policy_option(parser)
    add_store_option(parser)
    add_format_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.settings import read_policy_file

    policy = resolve_policy(args, settings, required=True)
    assert policy is not None  # required=True raises instead
    baseline = None if args.baseline_policy is None else read_policy_file(args.baseline_policy)
    # An open observation window's previous rule is the baseline, unless --baseline-policy
    # names one: the explicit option wins (and the rows then carry no previous_* fields).
    observing = baseline is None and (baseline := previous_rule_today(policy)) is not None
    source = JsonLines(args.path)
    progress = over_input("gate", source)
    tally = Tally(alerts_drift=False)
    changed = 0
    nonblocking = 0
    nonblocking_review = 0
    chosen = chosen_format(args)
    # A gate row has no cache outcome; whether it gates is what a reader of the table needs.
    table = Table(GATE_COLUMNS) if chosen == TABLE else None
    named = None
    with existing_store(args, settings) if args.store else nullcontext() as store:
        named = None if store is None else store_name(store, args, settings)
        firsts = FirstSets(store)
        for number, body in source:
            row = gate_row(
                number,
                body,
                policy,
                baseline=baseline,
                max_bytes=settings.max_message_bytes,
                firsts=firsts,
                observing=observing,
            )
            if chosen == JSONL:
                print(dumps_line(row))
            elif table is not None:
                table.add(
                    row["case_id"],
                    row["status"],
                    row["value"],
                    row["owner"],
                    row["missing_claim_ids"],
                    {True: "yes", False: "no"}.get(row["blocking"]),
                )
            tally.add(row["status"], blocking=row["blocking"])
            nonblocking += row["blocking"] is False and row["status"] in {"fail", "invalid"}
            nonblocking_review += row["blocking"] is False and row["status"] == "review"
            tally.drifted += row["contract_drift"]
            changed += "policy_change" in row
            progress.tick()
    progress.finish()
    if tally.total == 0:
        raise InputError(f"{source_name(args.path)} contains no rows")
    if table is not None:
        table.print()
    notes = []
    if nonblocking:
        notes.append(
            f"{counted(nonblocking, 'non-blocking row')} failed or invalid (reported, never "
            "the exit code)"
        )
    if nonblocking_review:
        notes.append(
            f"{counted(nonblocking_review, 'non-blocking row')} in review (reported, never the "
            "exit code)"
        )
    if observing:
        assert baseline is not None
        assert policy.observe is not None
        notes.append(
            f"{counted(changed, 'row')} changed status against previous policy"
            f" {baseline.version} (observation window until {policy.observe.until.isoformat()})"
        )
    elif baseline is not None:
        notes.append(
            f"{counted(changed, 'row')} changed status against baseline policy {baseline.version}"
        )
    summary = tally.summary("gate", policy, notes=notes)
    print(summary if named is None else located(summary, store=named), file=sys.stderr)
    return tally.exit_code


def gate_row(
    number: int,
    body: bytes,
    policy: Policy,
    *,
    baseline: Policy | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    firsts: FirstSets | None = None,
    observing: bool = False,
) -> dict[str, Any]:
    """One gate line: a triaged decision for a valid row, or an invalid row naming what is
    wrong; with a baseline, the change of status it makes. `observing`: the baseline is an
    open observation window's previous rule, whose version and status every parsed row
    carries (previous_policy_version, previous_status; SPEC §12). `firsts`: the first required set
    per (contract version, case ID) of the rows before it, which a row with another set
    drifted from, as the store would have it (SPEC §9: owner evaluation-data, exit 2)."""
    from contracts.judging import judge, outcome_of
    from contracts.triage import findings_json
    from worker.pipeline.intake import case_id_of

    try:
        row = _parse(body, max_bytes)
    except InputError as error:
        return _unreadable(number, case_id_of(body), str(error), policy)
    outcome = outcome_of(row)
    drift = None
    if firsts is not None and outcome.value is not None and row.contract_version is not None:
        drift = firsts.drift((row.contract_version, row.case_id), row.required_claim_ids, number)
    _, decision, found, before = judge(
        row, policy, outcome=outcome, baseline=baseline, contract_drift=drift is not None
    )
    fields = decision.model_dump(mode="json")
    if fields["review_band"] is None:  # only a group with a band says it (SPEC §12)
        del fields["review_band"]
    line = {
        "line": number,
        "case_id": row.case_id,
        **fields,
        "owner": found.owner,
        "score": fields["value"],
        "missing_claim_ids": found.missing_claim_ids,
        "findings": findings_json(found.findings),
        "contract_drift": drift is not None,
    }
    if observing and before is not None:
        line["previous_policy_version"] = before.policy_version
        line["previous_status"] = before.status
    if drift is not None:
        line["drift"] = drift.as_json()
    if before is not None and before.status != decision.status:
        line["policy_change"] = {
            "baseline_version": before.policy_version,
            "baseline_status": before.status,
            "baseline_threshold": before.threshold,
        }
    return line


class FirstSets:
    """The first required set per (contract version, case ID) a row is compared with: the
    store's when `--store` keeps one for the pair (read once per pair), else the first of
    gate's own input, so gate sees drift as the store would record it."""

    def __init__(self, store: ResultStore | None = None) -> None:
        from contracts.drift import FirstRequiredSets

        self._store = store
        self._stored: dict[tuple[str, str], FirstRequired | None] = {}
        self._input = FirstRequiredSets()

    def drift(self, pair: tuple[str, str], required: list[str], line: int) -> Drift | None:
        from contracts.drift import drift_from

        if self._store is not None:
            if pair not in self._stored:
                self._stored[pair] = self._store.first_required(*pair)
            first = self._stored[pair]
            if first is not None:
                return drift_from(
                    first.required_claim_ids, required, first_input_hash=first.input_hash
                )
        return self._input.check(pair, required, line=line)


def _parse(body: bytes, max_bytes: int) -> ReleaseRow | AttributionResult:
    """An AttributionResult when the line says it is one (schema_version), else a ReleaseRow."""
    from pydantic import ValidationError

    from contracts import ReleaseRow
    from worker.pipeline.intake import describe_validation_error, not_utf8, parse_message

    if is_attribution_result(body):
        return parse_message(body, max_bytes=max_bytes)
    try:
        return ReleaseRow.model_validate_json(body)
    except ValidationError as error:
        raise InputError(not_utf8(body) or describe_validation_error(error)) from None


def is_attribution_result(body: bytes) -> bool:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False  # the ReleaseRow parse says what is wrong with it
    return isinstance(parsed, dict) and "schema_version" in parsed


def _unreadable(number: int, case_id: str | None, reason: str, policy: Policy) -> dict[str, Any]:
    from contracts.policy import INVALID_OWNER

    return {
        "line": number,
        "case_id": case_id,
        "status": "invalid",
        "value": None,
        "score": None,
        "reason": reason,
        "threshold": None,
        "policy_version": policy.version,
        "policy_group": None,
        "contract_version": None,
        "blocking": None,
        "owner": INVALID_OWNER,
        "missing_claim_ids": None,
        "findings": [],
        "contract_drift": False,
    }
