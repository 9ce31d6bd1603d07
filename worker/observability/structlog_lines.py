"""A fast path for structlog's record lines: a batch's lines spelled as the configured chain
and WriteLogger would write them, without running them.

A record line ran structlog's whole chain for every message (the bound logger, eight
processors, one write() and flush each): 176K of the worker's 965K instructions a message on
the bench's mix, against about 60K for the dict and orjson here. With the chain
configure_logging() builds for JSON lines in the otel schema without span IDs (the worker's
default, worker/observability/logging.py), a line is spelled here as that chain spells it:
merge_contextvars, add_log_level, TimeStamper(fmt="iso", utc=True), drop_raw_text, OtelFields,
lead_with_when_and_what, exception_fields and JSONRenderer(serializer=dumps), that is the same
keys in the same order with the same values. Any other configuration (ECS, the console, span
IDs, a test's capture_logs), or a field named as a head key or exc_info, takes emit_record()
per line.

The contract test (tests/unit/seams/test_structlog_lines.py) renders every record shape with
every context shape both ways and fails on any byte of difference: run it on upgrading
structlog or orjson (docs/development.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import orjson
import structlog

from contracts import ScoreRecord
from worker.observability.logging import (
    SERVICE_NAME,
    SEVERITY_NUMBERS,
    drop_raw_text,
    emit_record,
    get_logger,
    record_chain,
    record_fields,
)

# The versions the contract test last passed with; it fails, naming the installed ones, until
# they are the locked ones (docs/development.md, "Upgrading kombu, Celery or structlog").
CHECKED_AGAINST: Final = {"structlog": "26.1.0", "orjson": "3.13.0"}

# POSIX: a write of at most PIPE_BUF bytes to a pipe is never interleaved with another
# process's; Linux's is 4,096. Prefork children share stdout.
PIPE_BUF: Final = 4096
# The keys the chain puts at the head of a line (lead_with_when_and_what, OtelFields), and
# exc_info, which exception_fields turns into other fields: a field of such a name would take
# another place, value or spelling there, so such a line takes the chain.
_CHAIN_KEYS: Final = frozenset(
    {"timestamp", "level", "event", "severity_text", "severity_number", "service.name"}
    | {"exc_info"}
)


def write_chunks(writer: structlog.WriteLogger, chunks: Sequence[str]) -> None:
    """What WriteLogger.msg() does for one line (write and flush under the file's lock), for
    each chunk of whole lines (at most PIPE_BUF bytes unless it is one line), so that each is
    one write() to the file descriptor."""
    with writer._lock:
        for chunk in chunks:
            writer._write(chunk)
            writer._flush()


class RecordLines:
    """A batch's record lines, each exactly the line emit_record() writes, written together.

    The context variables are read once per batch, and the batch's lines share one timestamp,
    the time the batch was handed over. Lines are written as few whole-line chunks of at most
    PIPE_BUF bytes each, one write() per chunk.
    """

    def __init__(self) -> None:
        log = get_logger()
        writer = getattr(log, "_logger", None)
        self._writer: structlog.WriteLogger | None = None
        self._chunks: list[str] = []
        self._chunk: list[str] = []
        self._chunk_bytes = 0
        if tuple(structlog.get_config()["processors"]) != record_chain() or not isinstance(
            writer, structlog.WriteLogger
        ):
            return
        context = structlog.contextvars.merge_contextvars(None, "info", {})
        if not _CHAIN_KEYS.isdisjoint(context):
            return
        self._writer = writer
        self._context = drop_raw_text(None, "info", context)
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # as TimeStamper's iso
        self._heads = {
            level: {
                "timestamp": stamp,
                "level": level,
                "severity_text": level.upper(),
                "severity_number": SEVERITY_NUMBERS[level],
                "service.name": SERVICE_NAME,
            }
            for level in ("info", "warning")
        }

    def add(self, record: ScoreRecord, **context: Any) -> None:
        """The record's line, with `context` as emit_record() takes it."""
        if self._writer is None or not _CHAIN_KEYS.isdisjoint(context):
            self.flush()
            emit_record(record, **context)
            return
        head = self._heads[record.log_level]
        line = {"timestamp": head["timestamp"], "level": head["level"], "event": record.event}
        line.update(head)
        line.update(record_fields(record))
        if context:  # a record's own fields never carry raw text; its context may
            line.update(drop_raw_text(None, "", context))
        for key, value in self._context.items():
            line.setdefault(key, value)
        try:
            spelled = orjson.dumps(line, default=repr)
            text, size = spelled.decode(), len(spelled) + 1
        except TypeError:  # as logging.dumps() falls back: ASCII escapes
            text = json.dumps(line, default=repr)
            size = len(text) + 1
        if self._chunk and self._chunk_bytes + size > PIPE_BUF:
            self._chunks.append("".join(self._chunk))
            self._chunk, self._chunk_bytes = [], 0
        self._chunk.append(text + "\n")
        self._chunk_bytes += size

    def flush(self) -> None:
        """Write the lines added so far."""
        if self._chunk:
            self._chunks.append("".join(self._chunk))
            self._chunk, self._chunk_bytes = [], 0
        if self._chunks and self._writer is not None:
            write_chunks(self._writer, self._chunks)
            self._chunks = []
