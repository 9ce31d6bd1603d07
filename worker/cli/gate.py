"""`evidence-worker gate PATH`: reviewed ReleaseRows against a policy, for CI release gates."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from worker.cli.common import (
    Tally,
    add_path,
    add_policy_options,
    describe,
    dumps_line,
    resolve_policy,
    source_name,
)
from worker.errors import InputError
from worker.inputs import JsonLines
from worker.progress import over_input
from worker.settings import Settings

if TYPE_CHECKING:
    from contracts import Policy


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "gate",
        **describe(
            "check reviewed ReleaseRows against a policy (CI release gate)",
            example="gate contracts/examples/release-rows.jsonl --min-coverage 0.85",
            details="One JSON line per row on stdout. Exit 0 when every blocking row passes, "
            "1 when a valid blocking row is below policy, 2 when any blocking row is invalid. "
            "Non-blocking rows are reported and never change the exit code. Needs a policy.",
        ),
    )
    add_path(parser)
    add_policy_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    policy = resolve_policy(args, settings, required=True)
    assert policy is not None  # required=True raises instead
    source = JsonLines(args.path)
    progress = over_input("gate", source)
    tally = Tally()
    for number, body in source:
        row = gate_row(number, body, policy)
        print(dumps_line(row))
        tally.add(row["status"], blocking=row["blocking"])
        progress.tick()
    progress.finish()
    if tally.total == 0:
        raise InputError(f"{source_name(args.path)} contains no rows")
    print(tally.summary("gate", policy), file=sys.stderr)
    return tally.exit_code


def gate_row(number: int, body: bytes, policy: Policy) -> dict[str, Any]:
    """One gate line: a decision for a valid row, or an invalid row naming what is wrong."""
    from pydantic import ValidationError

    from contracts import Outcome, ReleaseRow, decide
    from contracts.metric import score_pair
    from contracts.policy import INVALID_OWNER
    from worker.intake import case_id_of, describe_validation_error, not_utf8

    try:
        row = ReleaseRow.model_validate_json(body)
    except ValidationError as error:
        return {
            "line": number,
            "case_id": case_id_of(body),
            "status": "invalid",
            "value": None,
            "score": None,
            "reason": not_utf8(body) or describe_validation_error(error),
            "threshold": None,
            "policy_version": policy.version,
            "policy_group": None,
            "contract_version": None,
            "blocking": None,
            "owner": INVALID_OWNER,
        }
    value, reason = score_pair(row.required_claim_ids, row.supported_claim_ids)
    decision = decide(
        Outcome(value=value, reason=reason),
        policy,
        policy_group=row.policy_group,
        blocking=row.blocking,
        contract_version=row.contract_version,
    )
    fields = decision.model_dump(mode="json")
    return {"line": number, "case_id": row.case_id, **fields, "score": fields["value"]}
