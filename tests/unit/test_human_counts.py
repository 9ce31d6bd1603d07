"""Counts for people: one spelling of numbers (grouped by commas) and nouns that agree."""

from __future__ import annotations

import pytest

from worker.human_counts import counted, number


@pytest.mark.parametrize(
    ("count", "noun", "said"),
    [
        (0, "row", "0 rows"),
        (1, "row", "1 row"),
        (2, "line", "2 lines"),
        (12_000, "line", "12,000 lines"),
        (100_000, "row", "100,000 rows"),
        (1, "hash", "1 hash"),
        (3, "hash", "3 hashes"),
        (2, "entry", "2 entries"),
        (1, "stored first outcome", "1 stored first outcome"),
        (7, "stored first outcome", "7 stored first outcomes"),
        (2, "new alert", "2 new alerts"),
    ],
)
def test_a_count_and_its_noun_agree(count: int, noun: str, said: str) -> None:
    assert counted(count, noun) == said


def test_numbers_are_grouped_by_commas() -> None:
    assert [number(n) for n in (0, 999, 1_000, 1_234_567)] == ["0", "999", "1,000", "1,234,567"]
