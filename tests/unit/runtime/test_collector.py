"""The collector settings of a scoring process (worker/runtime/collector.py)."""

from __future__ import annotations

import gc
import weakref

from worker.runtime.collector import OLDER_THRESHOLDS, YOUNG_THRESHOLD, restore, settle


class Node:
    """An object that can be in a reference cycle and be watched by a weak reference."""

    other: object = None


def test_settle_freezes_what_is_alive_and_spaces_collections_out() -> None:
    before = gc.get_threshold()
    thresholds = settle()
    try:
        assert thresholds == before
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS) == (100_000, 50, 50)
        assert gc.get_freeze_count() > 1000  # the modules imported so far
    finally:
        restore(thresholds)
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, 0)


def test_a_cycle_made_after_settle_is_still_collected() -> None:
    thresholds = settle()
    try:
        first, second = Node(), Node()
        first.other, second.other = second, first
        watched = weakref.ref(first)
        del first, second
        assert watched() is not None
        # A young collection runs once allocations outnumber deallocations by the threshold.
        kept: list[list[int]] = [[] for _ in range(YOUNG_THRESHOLD + 1)]
        assert watched() is None
        del kept
    finally:
        restore(thresholds)
