"""The worker's pool, without forking: what it sets up before the children start."""

from __future__ import annotations

import gc

import pytest
from celery.concurrency.prefork import TaskPool

from worker.pool import FIRST_COME_FIRST_SERVED, PrefetchingTaskPool


def test_the_pool_freezes_what_is_imported_before_it_forks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When Celery's prefork start-up (the fork) runs, the imported objects are frozen."""
    frozen_at_fork: list[int] = []
    monkeypatch.setattr(
        TaskPool, "on_start", lambda _: frozen_at_fork.append(gc.get_freeze_count())
    )
    pool = PrefetchingTaskPool(limit=1)
    assert gc.get_freeze_count() == 0
    try:
        pool.on_start()
    finally:
        gc.unfreeze()

    # Ragas, langchain and pydantic alone leave well over 100,000 objects alive.
    assert len(frozen_at_fork) == 1
    assert frozen_at_fork[0] > 100_000
    assert pool.options["sched_strategy"] == FIRST_COME_FIRST_SERVED
