"""Invalid reasons in `evidence-worker report`: counted on the metric's own words, and those
that differ only in the claim IDs they end with counted as one template."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from contracts.metric import RAGAS_ERROR_PREFIX

TOP_REASONS = 5
# The reasons that end in a list of claim IDs (SPEC §1 rules 2 and 4, SPEC §9's schema error):
# grouped on their words, or each list of IDs would be a reason of its own. The list runs to
# the end of the reason: IDs may hold "," or ";", so nothing after the colon is words.
IDS_REASON = re.compile(
    r"(contains duplicate claim IDs|contains unknown IDs|names unknown claim IDs): .*\Z", re.S
)
IDS_PLACEHOLDER = "<ids>"
EXAMPLES_PER_REASON = 2


class ReasonCount(BaseModel):
    """Invalid rows with one reason; or, when several reasons differ only in the claim IDs
    they end with, their template (`...: <ids>`), with `examples` giving two of them verbatim,
    most frequent first, and `distinct` how many different ones there were."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str
    count: int
    distinct: int = 1
    examples: list[str] = Field(default_factory=list)


def reason_template(reason: str) -> str:
    """The reason with a trailing list of claim IDs as `<ids>`; other reasons as they are."""
    return IDS_REASON.sub(rf"\1: {IDS_PLACEHOLDER}", reason, count=1)


def top_reasons(reasons: Iterable[str], limit: int = TOP_REASONS) -> list[ReasonCount]:
    """Most frequent first; ties in the order of what is shown, so the same records give the
    same report. Reasons that differ only in their list of claim IDs count as one (their
    template), with two of them as examples: "duplicate claim IDs: a,b" and "...: c" are one
    problem."""
    return top_reason_counts(Counter(reasons), limit)


def top_reason_counts(reasons: Mapping[str, int], limit: int = TOP_REASONS) -> list[ReasonCount]:
    """top_reasons() of the rows counted by reason (what the report tallies as rows arrive)."""
    # Grouped on the metric's own words: Ragas's prefix tells a reader of this report nothing.
    counts: Counter[str] = Counter()
    for reason, count in reasons.items():
        counts[reason.removeprefix(RAGAS_ERROR_PREFIX)] += count
    templates: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for reason, count in counts.items():
        templates[reason_template(reason)][reason] = count
    ranked = sorted(
        templates.items(),
        key=lambda item: (-item[1].total(), min(item[1]) if len(item[1]) == 1 else item[0]),
    )
    return [reason_count(template, reasons) for template, reasons in ranked[:limit]]


def reason_count(template: str, reasons: Counter[str]) -> ReasonCount:
    """One reason as it is, or a template standing for several with two examples."""
    if len(reasons) == 1:
        (reason,) = reasons
        return ReasonCount(reason=reason, count=reasons.total())
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return ReasonCount(
        reason=template,
        count=reasons.total(),
        distinct=len(reasons),
        examples=[reason for reason, _ in ranked[:EXAMPLES_PER_REASON]],
    )


def reason_note(reason: ReasonCount) -> str:
    """'invalid x3: required_claim_ids contains duplicate claim IDs: <ids> (2 different; e.g.
    ...: a,b | ...: c)': a template says how many reasons it stands for and shows two."""
    note = f"invalid x{reason.count}: {reason.reason}"
    if reason.examples:
        note += f" ({reason.distinct} different; e.g. {' | '.join(reason.examples)})"
    return note
