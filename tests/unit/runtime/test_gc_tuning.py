"""The collector settings of a scoring process (worker/runtime/gc_tuning.py)."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest

from worker.runtime import signals
from worker.runtime.celery_app import create_app
from worker.runtime.gc_tuning import OLDER_THRESHOLDS, YOUNG_THRESHOLD, restore, settle
from worker.settings import Settings


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


@pytest.mark.parametrize(
    ("process_name", "spaced"),
    [("ForkPoolWorker-1", True), ("MainProcess", False)],
)
def test_a_pool_process_spaces_collections_out_as_it_starts_and_the_main_process_does_not(
    monkeypatch: pytest.MonkeyPatch, process_name: str, spaced: bool
) -> None:
    """worker_process_init's handler: in a forked pool process, young collections every
    100,000; in the main process (where the solo pool sends the signal too), CPython's."""
    handler = {
        handler.__name__: handler for _, handler in signals._handlers(create_app(Settings()))
    }["space_out_collections_in_pool_process"]
    monkeypatch.setattr(signals, "current_process", lambda: SimpleNamespace(name=process_name))
    before = gc.get_threshold()
    try:
        handler()
        after = gc.get_threshold()
    finally:
        gc.set_threshold(*before)
    assert after == ((YOUNG_THRESHOLD, *OLDER_THRESHOLDS) if spaced else before)
    assert gc.get_freeze_count() == 0  # the parent froze before the fork; nothing here
