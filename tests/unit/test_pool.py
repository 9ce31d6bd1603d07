"""The worker's pool, without forking: what it sets up before the children start."""

from __future__ import annotations

import gc

import pytest
from celery.concurrency.prefork import TaskPool

from worker.pool import FIRST_COME_FIRST_SERVED, GC_YOUNG_THRESHOLD, PrefetchingTaskPool


def test_the_pool_sets_the_collector_up_before_it_forks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When Celery's prefork start-up (the fork) runs, the imported objects are frozen and
    the young generation is collected every 20,000 allocations instead of 700."""
    at_fork: list[tuple[int, int]] = []
    monkeypatch.setattr(
        TaskPool,
        "on_start",
        lambda _: at_fork.append((gc.get_freeze_count(), gc.get_threshold()[0])),
    )
    pool = PrefetchingTaskPool(limit=1)
    threshold = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    assert threshold[0] == 700
    try:
        pool.on_start()
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)

    # Ragas, langchain and pydantic alone leave well over 100,000 objects alive.
    assert len(at_fork) == 1
    assert at_fork[0][0] > 100_000
    assert at_fork[0][1] == GC_YOUNG_THRESHOLD == 20_000
    assert pool.options["sched_strategy"] == FIRST_COME_FIRST_SERVED
