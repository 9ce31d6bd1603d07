"""The policy a command decides under: --policy or --min-coverage, else the environment, and
--baseline-policy; an observation window is open or not by the CLI's clock (utc_today)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from worker.cli.arguments import nonempty

if TYPE_CHECKING:
    from contracts import Policy
    from worker.settings import Settings


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """--policy or --min-coverage: one of them at most (choosing silently would hide a typo)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--policy",
        metavar="FILE",
        type=nonempty(Path, "name a policy TOML file"),
        help="policy TOML file (default: $EVIDENCE_POLICY_FILE)",
    )
    group.add_argument(
        "--min-coverage",
        metavar="X",
        help="one-group policy with this threshold, versioned cli:X "
        "(default: $MIN_EVIDENCE_COVERAGE, versioned env:X)",
    )


def add_baseline_policy_option(parser: argparse.ArgumentParser) -> None:
    """--baseline-policy, for `gate` and `explain`: the release rule is named alike by both."""
    parser.add_argument(
        "--baseline-policy",
        metavar="OLD.toml",
        type=nonempty(Path, "name the baseline policy TOML file"),
        help="also decide under this policy (e.g. the released one): a row that fails now "
        "and passed under it is owned by release-rule; never changes the exit code "
        "(default: no baseline)",
    )


def resolve_policy(
    args: argparse.Namespace, settings: Settings, *, required: bool
) -> Policy | None:
    """--policy, else --min-coverage, else the environment; gate requires one.

    A policy file whose observation window ([observe], SPEC §12) has ended prints one WARNING
    line on stderr naming the file to remove (window_warning())."""
    from contracts import policy_from_threshold
    from worker.settings import read_policy_file, window_warning

    policy: Policy | None
    if args.policy is not None:
        policy, path = read_policy_file(args.policy), args.policy
    elif args.min_coverage is not None:
        return policy_from_threshold(args.min_coverage, name="--min-coverage", origin="cli")
    else:
        policy, path = settings.load_policy(required=required), settings.policy_file
    warning = window_warning(policy, path, utc_today())
    if warning is not None:
        print(warning, file=sys.stderr)
    return policy


def utc_today() -> date:
    """Today's UTC date, the CLI's clock for a policy's observation window (tests replace it)."""
    return datetime.now(UTC).date()


def previous_rule_today(policy: Policy | None) -> Policy | None:
    """The previous rule of the policy's observation window when it is open today (UTC)."""
    from contracts.policy import previous_rule

    return previous_rule(policy, utc_today())
