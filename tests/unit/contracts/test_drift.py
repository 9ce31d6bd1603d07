"""Contract drift's pure part (SPEC §9): a required set against its pair's first one."""

from __future__ import annotations

import pytest

from contracts.drift import Drift, FirstRequiredSets, drift_from

PAIR = ("support-faq/2026-10", "refund-drift-104")


@pytest.mark.parametrize(
    ("first", "required", "added", "removed"),
    [
        (["b", "a"], ["a", "b", "c"], ["c"], []),
        (["a", "b", "c"], ["a"], [], ["b", "c"]),
        (["a", "b"], ["a", "c"], ["c"], ["b"]),
    ],
)
def test_drift_names_what_the_later_set_adds_and_removes(
    first: list[str], required: list[str], added: list[str], removed: list[str]
) -> None:
    """Added and removed claim IDs are sorted; the first set is given sorted, as stored."""
    assert drift_from(first, required, first_input_hash="h") == Drift(
        sorted(first), "h", None, added, removed
    )


def test_the_same_set_in_another_order_is_no_drift() -> None:
    """The store compares sorted lists, so order alone never drifts."""
    assert drift_from(["b", "a"], ["a", "b"]) is None


def test_the_first_set_per_pair_stays_and_later_ones_drift_from_it() -> None:
    """Each later row is compared with its pair's first row, never with the one before it."""
    firsts = FirstRequiredSets()

    assert firsts.check(PAIR, ["a", "b"], line=4) is None
    assert firsts.check(PAIR, ["b", "a"], line=5) is None
    assert firsts.check(PAIR, ["a", "b", "c"], line=6) == Drift(["a", "b"], None, 4, ["c"], [])
    assert firsts.check(PAIR, ["a"], line=7) == Drift(["a", "b"], None, 4, [], ["b"])
    assert firsts.check(("support-faq/2026-11", PAIR[1]), ["a"], line=8) is None


def test_a_drift_as_a_gate_line_names_where_the_first_set_was_seen() -> None:
    """A line of gate's input, or a store's input hash."""
    assert Drift(["a"], None, 4, ["c"], []).as_json() == {
        "first_required_claim_ids": ["a"],
        "first_line": 4,
        "added_claim_ids": ["c"],
        "removed_claim_ids": [],
    }
    assert Drift(["a"], "h", None, [], ["a"]).as_json()["first_input_hash"] == "h"
