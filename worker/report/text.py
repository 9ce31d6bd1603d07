"""`evidence-worker report` as text: the headline, one table row per group, its notes; the
labels and notes the HTML page (worker/report/html.py) shows as well."""

from __future__ import annotations

from collections.abc import Sequence

from worker.human_counts import counted, number
from worker.report.aggregate import (
    CACHE_OUTCOMES,
    NO_GROUP_LABEL,
    REPORT_ONLY_LABEL,
    REVIEW,
    SPARSE_WARNING,
    GroupReport,
    MissingClaim,
    Report,
    VersionReport,
)
from worker.report.alert_places import alert_hash_lines
from worker.report.calibration_section import calibration_text
from worker.report.days import days_text, span_line
from worker.report.graders import graders_text
from worker.report.reasons import reason_note


def group_label(group: str | None) -> str:
    return NO_GROUP_LABEL if group is None else group


def policy_label(version: str | None) -> str:
    return REPORT_ONLY_LABEL if version is None else version


def threshold_label(threshold: float) -> str:
    """'threshold 0.85': the digits the policy gave (shortest repr), 1 as '1.0'."""
    return f"threshold {threshold!r}"


COLUMNS: tuple[str, ...] = ("group", "rows", "pass", "fail", "scored", "invalid", "valid")
COLUMNS += ("mean", "min", "max", "miss", "hit", "conflict", "policy")
STATUS_COLUMNS: tuple[str, ...] = ("pass", "fail", "scored", "invalid")


def columns(groups: Sequence[GroupReport]) -> list[str]:
    """COLUMNS, with `review` after `fail` when a group has review rows (SPEC §12)."""
    if not any(REVIEW in group.statuses for group in groups):
        return list(COLUMNS)
    return [*COLUMNS[:4], REVIEW, *COLUMNS[4:]]


def group_row(group: GroupReport, *, review: bool = False) -> list[str]:
    """One group as table cells under COLUMNS (shared by the text and HTML renderings), with
    its review count after fail when `review` (columns() added the column)."""
    shown = ("pass", "fail", REVIEW, "scored", "invalid") if review else STATUS_COLUMNS
    counts = [group.records, *(group.statuses.get(s, 0) for s in shown)]
    stats = group.valid
    return [
        group_label(group.policy_group),
        *(number(count) for count in [*counts, stats.count]),
        *("-" if n is None else f"{n:.4f}" for n in (stats.mean, stats.min, stats.max)),
        *(number(group.cache[outcome]) for outcome in CACHE_OUTCOMES),
        ", ".join(policy_label(p.policy_version) for p in group.policy_versions),
    ]


def _alerts_clause(kind: str, total: int, unmatched: int, *, store: bool = False) -> str:
    unmatched_said = (
        "with no first outcome in this store" if store else "with no record in this file"
    )
    return f"{kind} alerts {number(total)}" + (
        f" ({number(unmatched)} {unmatched_said})" if unmatched else ""
    )


def headline(report: Report) -> str:
    """What was read: records, skipped lines by event, Celery's log lines (counted apart: not
    records, and not skipped ones), unreadable lines, alerts of both kinds. Of a store: its
    first outcomes (one per input hash) and the alerts it keeps, which is all a store holds."""
    if report.store is not None:
        return "; ".join(
            [
                f"{report.source}: first outcomes {number(report.records)}",
                _alerts_clause(
                    "nondeterminism",
                    report.nondeterminism_alerts,
                    report.unmatched_nondeterminism_alerts,
                    store=True,
                ),
                _alerts_clause(
                    "contract drift",
                    report.contract_drift_alerts,
                    report.unmatched_contract_drift_alerts,
                    store=True,
                ),
            ]
        )
    skipped = ", ".join(f"{event} {number(n)}" for event, n in report.skipped.items())
    return "; ".join(
        [
            f"{report.source}: records {number(report.records)}",
            f"skipped lines {number(sum(report.skipped.values()))}"
            + (f" ({skipped})" if skipped else ""),
            f"Celery log lines {number(report.log_lines)}",
            f"unreadable lines {number(report.unreadable)}",
            _alerts_clause(
                "nondeterminism",
                report.nondeterminism_alerts,
                report.unmatched_nondeterminism_alerts,
            ),
            _alerts_clause(
                "contract drift",
                report.contract_drift_alerts,
                report.unmatched_contract_drift_alerts,
            ),
        ]
    )


def version_line(version: VersionReport) -> str:
    """'contract version X: records n; nondeterminism alerts a; contract drift alerts d'."""
    return (
        f"contract version {version.label}: records {number(version.records)}; "
        f"nondeterminism alerts {number(version.nondeterminism_alerts)}; "
        f"contract drift alerts {number(version.contract_drift_alerts)}"
    )


def policy_warning(group: GroupReport) -> str | None:
    """Said out loud: a group decided under several policy versions is not one population."""
    if not group.mixed_policy_versions:
        return None
    seen = ", ".join(
        f"{policy_label(p.policy_version)} ({number(p.count)})" for p in group.policy_versions
    )
    return f"WARNING: {len(group.policy_versions)} policy versions in one group: {seen}"


def sparse_warning(group: GroupReport) -> str | None:
    """When every valid row has at most two required claims, a threshold on coverage is a
    coarse rule: say so, and point at the missing IDs."""
    return f"WARNING: {SPARSE_WARNING}" if group.sparse_coverage else None


def owners_note(group: GroupReport) -> str:
    """All five owners with their counts, then the rows routed to nobody."""
    owners = ", ".join(f"{owner} {number(count)}" for owner, count in group.owners.items())
    return f"owners: {owners}; no owner {number(group.no_owner)}"


def finding_label(claim: MissingClaim) -> str:
    """'not_cited (2 of 3 rows)': the dominant finding, and how dominant it is."""
    if claim.finding is None:
        return "no finding recorded"
    return f"{claim.finding} ({claim.finding_count:,} of {counted(claim.rows, 'row')})"


def triage_note(group: GroupReport) -> str | None:
    """Rows that cannot say what is missing (written before triage), when there are any."""
    if not group.rows_without_triage:
        return None
    return (
        f"missing claims not recorded on {counted(group.rows_without_triage, 'valid row')} "
        "(written before triage)"
    )


def group_notes(group: GroupReport) -> list[str]:
    """Warnings, owners, missing claims, alerts and the top invalid reasons of a group."""
    notes = [w for w in (policy_warning(group), sparse_warning(group)) if w is not None]
    notes.append(owners_note(group))
    notes += [
        f"missing x{number(claim.rows)}: {claim.claim_id} "
        f"(dominant finding: {finding_label(claim)})"
        for claim in group.missing_claims
    ]
    if (note := triage_note(group)) is not None:
        notes.append(note)
    if group.thresholds:
        notes.append(", ".join(threshold_label(t) for t in group.thresholds))
    if group.contract_version is not None:  # rejected lines carry no hash an alert could name
        notes.append(
            f"alerts: nondeterminism {number(group.nondeterminism_alerts)}, "
            f"contract drift {number(group.contract_drift_alerts)}"
        )
    return notes + [reason_note(r) for r in group.invalid.top_reasons]


def render_text(report: Report) -> str:
    """The human-readable report: one table per contract version, then notes per group."""
    out = [f"report: {headline(report)}"]
    if (days := span_line(report.span)) is not None:
        out.append(days)
    out += [f"unreadable line {u.line}: {u.error}" for u in report.unreadable_lines]
    if (hidden := report.unreadable - len(report.unreadable_lines)) > 0:
        out.append(f"unreadable lines not shown: {hidden}")
    for version in report.contract_versions:
        out += ["", version_line(version)]
        header = columns(version.groups)
        review = REVIEW in header
        rows = [header, *(group_row(group, review=review) for group in version.groups)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        out += [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        for group in version.groups:
            out += [f"  {group_label(group.policy_group)}: {note}" for note in group_notes(group)]
        out += days_text(version.days, version.undated, report.span.field)
    if report.alert_hashes:
        out += [
            "",
            *alert_hash_lines(report.alert_hashes, report.alert_hashes_not_shown, report.store),
        ]
    out += graders_text(report.graders)
    out += calibration_text(report.calibration)
    return "\n".join(out)
