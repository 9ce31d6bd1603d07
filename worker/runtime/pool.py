"""The worker's pool: Celery's prefork pool, writing tasks to busy children as well."""

from __future__ import annotations

import gc

from celery.concurrency.prefork import TaskPool

# Celery's name for writing a task to any child whose pipe is free (asynpool.SCHED_STRATEGIES).
FIRST_COME_FIRST_SERVED = "fcfs"


class PrefetchingTaskPool(TaskPool):  # type: ignore[misc]  # celery has no type hints
    """prefork, where a child's pipe holds its next task while it runs the current one.

    Celery's default (-Ofair since 4.0) writes a task only to an idle child, so each child
    waits for the main process between tasks: right for long tasks, which would otherwise
    queue behind a slow one, but short, uniform tasks like ours lose throughput to it (the
    docs/performance.md has the figures). The command line offers only `default` and `fair`
    (both fair), so the pool sets it; an explicit `-O fair` is kept.
    """

    def on_start(self) -> None:
        if self.options.get("sched_strategy") in (None, "default"):
            self.options["sched_strategy"] = FIRST_COME_FIRST_SERVED
        freeze_imported_objects()
        super().on_start()


def forks_pool_processes(pool_cls: type) -> bool:
    """Whether a worker with this pool runs tasks in forked pool processes rather than in its
    main process (solo, threads). Not whether worker_process_init fires: Celery's solo pool
    sends it too, in the main process, as the pool is built; the threads pool never does."""
    return issubclass(pool_cls, TaskPool)


def freeze_imported_objects() -> None:
    """Move every object alive now (the imported modules, pydantic schemas) out of the cyclic
    collector's reach, just before the children are forked.

    They live as long as the process anyway. Unfrozen, each full collection re-scans them and
    writes to their pages, so the forked children stop sharing those pages with the main
    process.
    """
    gc.collect()
    gc.freeze()
