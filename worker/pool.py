"""The worker's pool: Celery's prefork pool, writing tasks to busy children as well."""

from __future__ import annotations

import gc

from celery.concurrency.prefork import TaskPool

# Celery's name for writing a task to any child whose pipe is free (asynpool.SCHED_STRATEGIES).
FIRST_COME_FIRST_SERVED = "fcfs"
# Allocations between two collections of the young generation (CPython's default: 700). A
# batch message allocates hundreds of objects that reference counting frees; at 700 the
# collector ran every few messages: ~10 µs of a batch message's ~100 µs of CPU (in-process,
# 80,000 messages, gc.callbacks timing), ~4 µs at 20,000.
GC_YOUNG_THRESHOLD = 20_000


class PrefetchingTaskPool(TaskPool):  # type: ignore[misc]  # celery has no type hints
    """prefork, where a child's pipe holds its next task while it runs the current one.

    Celery's default (-Ofair since 4.0) writes a task only to an idle child, so each child
    waits for the main process between tasks: right for long tasks, which would otherwise
    queue behind a slow one, but it cost short, uniform tasks like ours ~20% of their
    throughput in `evidence-worker bench`. The command line offers only `default` and `fair`
    (both fair), so the pool sets it; an explicit `-O fair` is kept.
    """

    def on_start(self) -> None:
        if self.options.get("sched_strategy") in (None, "default"):
            self.options["sched_strategy"] = FIRST_COME_FIRST_SERVED
        prepare_collector()
        super().on_start()


def prepare_collector() -> None:
    """Set the cyclic collector up for many short tasks, just before the children are forked
    (they inherit it).

    Every object alive now (imports: Ragas, langchain, pydantic schemas, ~280,000 objects)
    lives as long as the process anyway: frozen, full collections stop re-scanning them
    (~100 ms a time; in-process, 15-20 µs a batch message on average) and stop writing to
    their pages, which the forked children then keep sharing with the main process.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
