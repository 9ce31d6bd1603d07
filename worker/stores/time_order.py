"""First outcomes in time order from a store without a time index: an external merge sort.

A Redis store (one server or a cluster) keeps no index of its outcomes by time, and SCAN
returns keys in no order. `records` must stream them oldest first, in bounded memory, whatever
their number: so only each outcome's sort key, (recorded milliseconds, input hash), is read
while scanning; keys are sorted a chunk at a time, each sorted chunk spilled to a temporary
file, and the files merged (heapq.merge reads one line of each at a time). Memory is one chunk
while spilling and one line per file while merging; the first attempts themselves are read
after the merge, a batch at a time (the caller's), so they are never all held either.

Per-shard order would not help: a cluster shard's keys are no more ordered than one server's.
"""

from __future__ import annotations

import heapq
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from datetime import datetime
from typing import IO, Final

from worker.stores.contract import utc_ms

SortKey = tuple[int, str]  # (recorded_ms, input hash): base.recorded_ms() of the first attempt

# Keys held before a chunk is spilled: about 150 bytes each in Python, so ~15 MB; 1M outcomes
# make ten files.
CHUNK_KEYS: Final = 100_000


def in_time_order(keys: Iterable[SortKey], chunk_keys: int | None = None) -> Iterator[SortKey]:
    """`keys` sorted (oldest first; ties by input hash), holding at most `chunk_keys` of them
    (default CHUNK_KEYS, read now so a test can make it small) and one per spilled chunk in
    memory. The temporary files are removed when the iterator is exhausted or closed."""
    chunk_keys = chunk_keys or CHUNK_KEYS
    with ExitStack() as files:
        chunk: list[SortKey] = []
        spilled: list[IO[str]] = []
        for key in keys:
            if len(chunk) >= chunk_keys:  # spilled only when more come: the last stays here
                spilled.append(_spill(chunk, files))
                chunk = []
            chunk.append(key)
        chunk.sort()
        if not spilled:  # it all fitted in one chunk: no file
            yield from chunk
            return
        if chunk:
            spilled.append(_spill(chunk, files))
        yield from heapq.merge(*(_read(file) for file in spilled))


def _spill(chunk: list[SortKey], files: ExitStack) -> IO[str]:
    """The chunk sorted into a temporary file (deleted on close), rewound for reading."""
    chunk.sort()
    file = files.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))  # noqa: SIM115 - the ExitStack closes it
    # The time is an integer, so the first space ends it; an input hash (hex) holds no newline.
    file.writelines(f"{ms} {input_hash}\n" for ms, input_hash in chunk)
    file.seek(0)
    return file


def _read(file: IO[str]) -> Iterator[SortKey]:
    for line in file:
        ms, _, input_hash = line.rstrip("\n").partition(" ")
        yield int(ms), input_hash


def ms_bounds(since: datetime | None, until: datetime | None) -> tuple[int, int]:
    """[since, until) in recorded milliseconds (base.utc_ms()); no bound is the widest."""
    low = -(2**63) if since is None else utc_ms(since)
    high = 2**63 - 1 if until is None else utc_ms(until)
    return low, high
