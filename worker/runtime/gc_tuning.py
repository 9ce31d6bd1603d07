"""How a scoring process sets Python's cyclic garbage collector: what is alive at start-up
frozen, and young collections rare.

Scoring allocates several hundred container objects a message (the parsed message, its
citations and findings, the attempt, the record and its log line) and frees nearly all of
them by reference counting before the message is done; it makes almost no reference cycles.
At CPython's default thresholds (700, 10, 10) a young collection runs each time allocations
outnumber deallocations by 700, and walks whatever young object is alive then: with a batch's
messages alive together, a tenth of `score`'s instructions per message went to the collector.
At 100,000 the young generation is walked far less often, which costs the same as turning the
collector off (callgrind, docs/performance.md), while the rare cycles are still collected.

`score` settles so. The worker's pool freezes the start-up heap before it forks
(worker/runtime/pool.py) and spaces collections out in each pool process as it starts
(`space_out`), not in Celery's main process: that one makes many cycles and bounds the
single-message phase, and a young generation of 20,000 set there before the fork took `score`
from 0.93 to 0.83 of the no-op task's rate (f5bffdb). In a process that runs the pool's task
path with the start-up heap frozen, the spacing took 4.5% of the instructions a message
(1,011K to 966K, callgrind; docs/performance.md).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000  # allocations between young collections (CPython's default: 700)
OLDER_THRESHOLDS = (50, 50)  # young and middle collections before the next older one


def settle() -> tuple[int, int, int]:
    """Freeze every object alive now (imported modules, pydantic schemas: they live as long
    as the process), so that no collection walks them again, and space collections out;
    returns the thresholds before."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    space_out()
    return before


def space_out() -> None:
    """Young collections every YOUNG_THRESHOLD net allocations, in this process alone: a pool
    process as it starts, whose start-up heap its parent froze before the fork."""
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)


def restore(thresholds: tuple[int, int, int]) -> None:
    """Undo settle() for a caller that goes on in the same process (the test suite)."""
    gc.unfreeze()
    gc.set_threshold(*thresholds)
