"""`evidence-worker explain HASH | --case CASE_ID`: one row's trail, in plain text (SPEC §9)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from contracts.drift import Drift
from contracts.record_models import ContractDriftAlert
from worker.audit.explain import conflicting, explain, judgement_of
from worker.cli.arguments import describe
from worker.cli.exit_codes import INVALID, NONDETERMINISM, OK, POLICY_FAILURE
from worker.cli.output import located
from worker.cli.policy_options import (
    add_baseline_policy_option,
    add_policy_options,
    previous_rule_today,
    resolve_policy,
)
from worker.cli.show import add_lookup_arguments, no_hash_for_case, unknown_hash
from worker.cli.store_access import existing_store, store_name
from worker.settings import Settings
from worker.stores import History, ResultStore


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "explain",
        **describe(
            "say in plain text why a row has its number, who owns it, what to open next",
            example="explain --case refund-001 --policy contracts/examples/policy.toml",
            details="Print, for a person, the first (canonical) outcome recorded for an input "
            "hash (with --case: the newest hash recorded for that case): case, versions, value "
            "and reason, the status under the policy (--policy or --min-coverage, else the "
            "environment's; without one the row is not decided), the owner, and per missing "
            "claim its finding and the artifact to open next. A case only ever rejected is "
            "explained from its dead letter: when, why and the letter's id (exit 2). "
            "--baseline-policy decides it under the previous policy too, as gate does: a row "
            "that fails only because the rule moved is owned by release-rule. "
            "Exit 0, or as for the row: 1 "
            "when it fails the policy, 2 when it is invalid or its contract drifted, 3 when "
            "its kept attempts disagree (the highest applies).",
        ),
    )
    add_lookup_arguments(parser)
    add_policy_options(parser)
    add_baseline_policy_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.settings import read_policy_file

    policy = resolve_policy(args, settings, required=False)
    baseline = None if args.baseline_policy is None else read_policy_file(args.baseline_policy)
    # An open observation window's previous rule, unless --baseline-policy names one (SPEC §12).
    observing = baseline is None and (baseline := previous_rule_today(policy)) is not None
    with existing_store(args, settings) as store:
        named = store_name(store, args, settings)
        if args.case is not None and not store.hashes_for_case(args.case, limit=1):
            code = _rejected(store, args.case)
            print(located(f"explain: case {args.case}, rejected", store=named), file=sys.stderr)
            return code
        history, older = _look_up(store, args)
        drift = _drift_of(store, history) if history.first.contract_drift else None
    sys.stdout.write(
        explain(
            history,
            policy,
            case_id=args.case,
            older=older,
            baseline=baseline,
            drift=drift,
            observing=observing,
        )
    )
    print(located(f"explain: input hash {history.input_hash}", store=named), file=sys.stderr)
    first = history.first
    judgement = judgement_of(first, policy)
    decision = None if judgement is None else judgement.decision
    if conflicting(history):
        return NONDETERMINISM
    if first.value is None or first.contract_drift:
        return INVALID
    if decision is not None and decision.status == "invalid":
        return INVALID
    failed = decision is not None and decision.status in ("fail", "review")
    return POLICY_FAILURE if failed else OK


def _rejected(store: ResultStore, case_id: str) -> int:
    """A case never scored: its newest dead letter says when and why it was rejected."""
    from worker.audit.letters import of_case, rejected_text

    found = of_case(store.letters_newest_first(), case_id)
    if found is None:
        raise no_hash_for_case(case_id)
    sys.stdout.write(rejected_text(case_id, *found))
    return INVALID


def _drift_of(store: ResultStore, history: History) -> Drift | None:
    """The drifted first attempt's drift, from its alert: raised once per (contract version,
    case ID, required set), so the alert of another hash with the same set tells it too.
    None when the bounded alert stream has let it go."""
    from contracts.drift import drift_from

    first = history.first
    required = sorted(first.required_claim_ids)
    for alert in reversed(store.alerts(store.alert_count(), kind="contract_drift")):
        if (
            isinstance(alert, ContractDriftAlert)
            and (alert.case_id, alert.contract_version) == (first.case_id, first.contract_version)
            and sorted(alert.required_claim_ids) == required
        ):
            return drift_from(
                alert.first_required_claim_ids, required, first_input_hash=alert.first_input_hash
            )
    return None


def _look_up(store: ResultStore, args: argparse.Namespace) -> tuple[History, int]:
    """The history asked for, and (with --case) how many older hashes the case has."""
    if args.case is None:
        history = store.history(args.input_hash)
        if history is None:
            raise unknown_hash(args.input_hash, "explain")
        return history, 0
    hashes = store.hashes_for_case(args.case)
    for newest, input_hash in enumerate(hashes):
        history = store.history(input_hash)
        if history is not None:  # else it expired since the index was read
            return history, len(hashes) - newest - 1
    raise no_hash_for_case(args.case)
