"""Contract drift (SPEC §9): a later required set for a (contract version, case ID) than the
first one seen, and what it adds and removes.

Pure: the store keeps the first sets it records (worker/stores), `gate` the ones of its own
input (FirstRequiredSets); both compare with drift_from(), so a row drifts in one exactly when
it drifts in the other. Only a metric-valid row with a contract version and a case ID takes
part (an invalid row's list is not a set), as worker.stores.codec.required_set_json has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

Pair = tuple[str, str]  # (contract version, case ID)


class Drift(NamedTuple):
    """A row's required set against its pair's first: the first set, where it was seen (an
    input hash in a store, or a line of `gate`'s input), and the claim IDs the row's set has
    over it and lacks from it (both sorted)."""

    first_required_claim_ids: list[str]
    first_input_hash: str | None
    first_line: int | None
    added_claim_ids: list[str]
    removed_claim_ids: list[str]

    def as_json(self) -> dict[str, object]:
        """The drift as a gate line carries it: where the first set was seen, and the sets."""
        where: dict[str, object] = (
            {"first_input_hash": self.first_input_hash}
            if self.first_input_hash is not None
            else {"first_line": self.first_line}
        )
        return {
            "first_required_claim_ids": self.first_required_claim_ids,
            **where,
            "added_claim_ids": self.added_claim_ids,
            "removed_claim_ids": self.removed_claim_ids,
        }


def drift_from(
    first: Sequence[str],
    required: Sequence[str],
    *,
    first_input_hash: str | None = None,
    first_line: int | None = None,
) -> Drift | None:
    """The drift of `required` from its pair's `first` set, or None when the sorted sets are
    the same (the store compares the sorted lists, so this does too)."""
    first_sorted, later = sorted(first), sorted(required)
    if first_sorted == later:
        return None
    return Drift(
        first_required_claim_ids=first_sorted,
        first_input_hash=first_input_hash,
        first_line=first_line,
        added_claim_ids=sorted(set(later) - set(first_sorted)),
        removed_claim_ids=sorted(set(first_sorted) - set(later)),
    )


class FirstRequiredSets:
    """The first required set seen per pair, in one input's order (`gate`'s rows), as a store
    keeps it per pair: a later row with another set drifted from it, the first stays."""

    def __init__(self) -> None:
        self._first: dict[Pair, tuple[list[str], int]] = {}

    def check(self, pair: Pair, required: Sequence[str], *, line: int) -> Drift | None:
        """The row at `line`'s drift from its pair's first set; the first for its pair is
        kept and never drifts."""
        first = self._first.get(pair)
        if first is None:
            self._first[pair] = (sorted(required), line)
            return None
        first_set, first_line = first
        return drift_from(first_set, required, first_line=first_line)
