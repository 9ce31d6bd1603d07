"""A run's summary line on stderr and the exit code it implies (SPEC §7): the counts of
`score`, `gate` and `dead-letters replay` (Tally)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from worker.cli.exit_codes import INVALID, NONDETERMINISM, OK, POLICY_FAILURE
from worker.human_counts import counted

if TYPE_CHECKING:
    from contracts import Policy


@dataclass
class Tally:
    """Counts for the summary line, and the exit code they imply (the highest applies)."""

    statuses: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    rejected: int = 0
    alerts: int = 0
    drift_alerts: int = 0
    drifted: int = 0  # rows with contract_drift, alerted now or before
    gating_failures: int = 0
    gating_invalid: int = 0
    # Blocking rows in a group's review band (SPEC §12): not failures of the row, yet a person
    # must decide them before a release, so they gate as a failure does (exit 1).
    gating_review: int = 0
    # An open observation window's previous policy version, when records carried one, and how
    # many records' status differed from their previous_status.
    previous_version: str | None = None
    previous_changed: int = 0
    alerts_drift: bool = True  # False for `gate`: it sees drift in its input, alerts nothing

    def add(self, status: str, *, blocking: bool | None, cache: str | None = None) -> None:
        self.statuses[status] += 1
        if cache:
            self.cache[cache] += 1
        gates = blocking is not False  # unknown (unparsable row) counts as blocking
        self.gating_invalid += status == "invalid" and gates
        self.gating_failures += status == "fail" and gates
        if status == "review" and gates:  # rare: no attribute write on every row
            self.gating_review += 1

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def exit_code(self) -> int:
        # A known conflict is raised once, yet a run that meets it again still met it.
        if self.alerts or self.cache["conflict"]:
            return NONDETERMINISM
        if self.gating_invalid or self.drifted:
            return INVALID
        return POLICY_FAILURE if self.gating_failures or self.gating_review else OK

    def summary(self, label: str, policy: Policy | None, *, notes: Sequence[str] = ()) -> str:
        statuses = ", ".join(f"{name} {n:,}" for name, n in sorted(self.statuses.items()))
        parts = [f"{label}: {counted(self.total, 'row')}: {statuses or 'none'}"]
        if self.rejected:
            parts.append(f"{self.rejected:,} rejected before scoring")
        if self.cache:
            parts.append("cache " + ", ".join(f"{k} {v:,}" for k, v in sorted(self.cache.items())))
        if self.alerts:
            parts.append(counted(self.alerts, "nondeterminism alert"))
        if self.drifted:
            alerted = f" ({counted(self.drift_alerts, 'new alert')})" if self.alerts_drift else ""
            parts.append(f"{counted(self.drifted, 'row')} with contract drift{alerted}")
        if self.gating_review:
            parts.append(
                f"{counted(self.gating_review, 'blocking row')} to review (within a review_band:"
                " a person decides; evidence-worker calibrate)"
            )
        parts.append(f"policy {policy.version}" if policy else "report-only (no policy)")
        if self.previous_version is not None:
            parts.append(
                f"{counted(self.previous_changed, 'row')} changed status against previous"
                f" policy {self.previous_version} (observation window)"
            )
        parts += notes
        parts.append(f"exit {self.exit_code}")
        return "; ".join(parts)
