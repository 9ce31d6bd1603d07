"""The external merge sort that puts a Redis store's outcomes in time order (time_order.py):
the order it gives, and that it holds one chunk, not every key, in memory."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import IO

import pytest

from worker.stores import time_order
from worker.stores.time_order import SortKey, in_time_order, ms_bounds

# Two keys share a time: the hash decides between them.
KEYS: list[SortKey] = [(5, "c" * 64), (1, "b" * 64), (5, "a" * 64), (3, "d" * 64), (0, "e" * 64)]
ORDERED = [(0, "e" * 64), (1, "b" * 64), (3, "d" * 64), (5, "a" * 64), (5, "c" * 64)]


@pytest.mark.parametrize("chunk_keys", [1, 2, 3, 5, 100])
def test_keys_come_out_oldest_first_ties_by_hash(chunk_keys: int) -> None:
    """Whatever the chunk, spilled or not, the order is (time, input hash)."""
    assert list(in_time_order(KEYS, chunk_keys)) == ORDERED


def spy_spills(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every chunk spilled to a file, appended as it is spilled."""
    spills: list[int] = []
    real_spill = time_order._spill

    def spill(chunk: list[SortKey], files: ExitStack) -> IO[str]:
        spills.append(len(chunk))
        return real_spill(chunk, files)

    monkeypatch.setattr(time_order, "_spill", spill)
    return spills


def test_keys_that_fit_one_chunk_are_sorted_without_a_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No temporary file is made when every key fits in one chunk."""
    spills = spy_spills(monkeypatch)

    assert list(in_time_order(KEYS, 5)) == ORDERED
    assert spills == []
    assert list(in_time_order(KEYS, 2)) == ORDERED
    assert spills == [2, 2, 1]


def test_the_default_chunk_is_read_when_sorting(monkeypatch: pytest.MonkeyPatch) -> None:
    """CHUNK_KEYS is read per call, so the store tests can make it small."""
    spills = spy_spills(monkeypatch)
    monkeypatch.setattr(time_order, "CHUNK_KEYS", 4)

    assert list(in_time_order(KEYS)) == ORDERED
    assert spills == [4, 1]


def _shuffled_keys(count: int) -> Iterator[SortKey]:
    """`count` keys in a seeded random order, made as they are read (none held here)."""
    rng = random.Random(7)
    for n in range(count):
        yield rng.randrange(10**12), f"{n:064x}"


def test_memory_stays_bounded_by_the_chunk() -> None:
    """100,000 keys sorted 2,000 at a time: the sort's peak is a fraction of what holding
    every key would take (about 200 bytes each: 20 MB), and every key comes out, in order."""
    count = 100_000
    tracemalloc.start()
    try:
        previous: SortKey = (-1, "")
        seen = 0
        for key in in_time_order(_shuffled_keys(count), 2_000):
            assert key > previous
            previous = key
            seen += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert seen == count
    assert peak < 4_000_000


def test_bounds_are_milliseconds_since_the_epoch_half_open() -> None:
    """--since is the first millisecond in, --until the first one out; a time without an
    offset is UTC; no bound is the widest."""
    since = datetime(2026, 12, 1, tzinfo=UTC)
    until = since + timedelta(seconds=1, microseconds=999)

    assert ms_bounds(since, until) == (1_796_083_200_000, 1_796_083_201_000)
    assert ms_bounds(since.replace(tzinfo=None), None) == (1_796_083_200_000, 2**63 - 1)
    assert ms_bounds(None, None) == (-(2**63), 2**63 - 1)
