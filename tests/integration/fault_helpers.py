"""Messages and waits the fault tests on real workers share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from contracts.record_models import SCORED
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import Line

MessageFactory = Callable[..., dict[str, Any]]


def distinct(message_dict: MessageFactory, tag: str, count: int, **fields: Any) -> list[dict]:
    """`count` messages with inputs (and so input hashes) of their own."""
    return [
        message_dict(
            case_id=f"{tag}-{n:05d}",
            answer=f"Returns are accepted within 30 days. [{tag} {n}]",
            **fields,
        )
        for n in range(count)
    ]


def case_ids(lines: list[Line], event: str = SCORED) -> set[str]:
    """The case IDs of the lines of one event (scored records by default)."""
    return {line["case_id"] for line in lines if line.get("event") == event}


def all_scored(messages: list[dict], *also: set[str]) -> Callable[[list[Line]], bool]:
    """A wait condition: every message scored, in these lines or among the case IDs `also`."""
    wanted = {message["case_id"] for message in messages}
    return lambda lines: wanted <= case_ids(lines).union(*also)


def wait_for_value(read: Callable[[], int], expected: int, *, timeout: float) -> None:
    """Poll `read` until it gives `expected`; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected:
        assert time.monotonic() < deadline, f"still {value} after {timeout}s, expected {expected}"
        time.sleep(harness.POLL_SECONDS)
