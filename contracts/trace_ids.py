"""A message's `trace_id`, checked as W3C Trace Context defines one: 32 lowercase hex digits,
not all zero. A bad one never rejects the message (the score does not depend on it): the record
drops it and says why in `warnings`."""

from __future__ import annotations

import re
from typing import Final

TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
INVALID_TRACE_ID: Final = "0" * 32  # W3C's "no trace"


def checked_trace_id(trace_id: str | None) -> tuple[str | None, str | None]:
    """The trace ID to record, and the warning when the message's was dropped."""
    if trace_id is None:
        return None, None
    if not TRACE_ID.fullmatch(trace_id):
        return None, (
            f"trace_id dropped: not 32 lowercase hex digits (W3C trace-id), "
            f"got {len(trace_id)} characters"
        )
    if trace_id == INVALID_TRACE_ID:
        return None, "trace_id dropped: all zeros is W3C's invalid trace-id"
    return trace_id, None
