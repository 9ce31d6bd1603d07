"""publish_lines with a sample rate: only sampled case IDs are noted and sent, the rest counted;
invalid lines are reported whatever their case ID."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest
from celery import Celery

from contracts.sampling import sampled
from tests.conftest import BASE_MESSAGE
from worker.constants import SCORE, SCORE_BATCH
from worker.stores.contract import LedgerEntry
from worker.upstream.publishing import Published, publish_lines

# Sample points (contracts/sampling.py): case-3 0.022, case-2 0.204, refund-002 0.252,
# refund-001 0.495, case-1 0.727, case-7 0.966.
CASE_IDS = ["case-1", "case-2", "case-3", "refund-001", "refund-002", "case-7"]


class App:
    """What publish_lines uses of a Celery app: a producer, and send_task, kept in memory."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    @contextlib.contextmanager
    def producer_or_acquire(self) -> Iterator[None]:
        yield None

    def send_task(self, name: str, *, args: list[Any], **options: Any) -> None:
        self.sent.append((name, args[0]))


class Ledger:
    """The ledger's writes, kept in memory."""

    def __init__(self) -> None:
        self.noted: list[LedgerEntry] = []

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        assert not sent, "a publisher notes its messages unsent, then confirms them"
        self.noted.extend(entries)

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        assert set(write_ids) <= {entry.write_id for entry in self.noted}


def lines(*rows: str) -> list[tuple[int, bytes]]:
    return [(number, row.encode()) for number, row in enumerate(rows, start=1)]


def message_line(case_id: str) -> str:
    return json.dumps({**BASE_MESSAGE, "case_id": case_id})


def publish(
    rows: list[tuple[int, bytes]], *, sample_rate: float | None, batch_size: int = 1
) -> tuple[Published, App, Ledger]:
    app, ledger = App(), Ledger()
    result = publish_lines(
        rows,
        app=cast(Celery, app),
        queue="q",
        batch_size=batch_size,
        max_message_bytes=100_000,
        max_batch_bytes=1_000_000,
        ledger=ledger,  # type: ignore[arg-type]
        sample_rate=sample_rate,
    )
    return result, app, ledger


def sent_case_ids(app: App) -> list[str]:
    """The case IDs of the messages sent, in order, batches unrolled."""
    found = []
    for task, payload in app.sent:
        for text in payload if task == SCORE_BATCH else [payload]:
            found.append(json.loads(text)["case_id"])
    return found


@pytest.mark.parametrize(
    ("rate", "kept"),
    [
        (0.0, []),
        (0.1, ["case-3"]),
        (0.25, ["case-2", "case-3"]),
        (0.5, ["case-2", "case-3", "refund-001", "refund-002"]),
        (1.0, CASE_IDS),
        (None, CASE_IDS),
    ],
    ids=str,
)
@pytest.mark.parametrize("batch_size", [1, 4])
def test_only_sampled_case_ids_are_noted_and_sent(
    rate: float | None, kept: list[str], batch_size: int
) -> None:
    """In file order; the ledger holds exactly the messages sent, the rest are counted."""
    result, app, ledger = publish(
        lines(*map(message_line, CASE_IDS)), sample_rate=rate, batch_size=batch_size
    )

    assert sent_case_ids(app) == kept
    assert [entry.case_id for entry in ledger.noted] == kept
    assert (result.messages, result.sampled_out, result.rejected) == (
        len(kept),
        len(CASE_IDS) - len(kept),
        [],
    )
    assert {task for task, _ in app.sent} <= {SCORE if batch_size == 1 else SCORE_BATCH}
    assert kept == [case_id for case_id in CASE_IDS if rate is None or sampled(case_id, rate)]


def test_invalid_lines_are_reported_even_when_their_case_would_be_sampled_out() -> None:
    """Validation comes first: a bad line is never hidden by the rate."""
    bad = json.dumps({**BASE_MESSAGE, "case_id": "case-7", "colour": "red"})

    result, app, ledger = publish(
        lines(message_line("case-3"), bad, message_line("case-7"), "not json"), sample_rate=0.1
    )

    assert sent_case_ids(app) == ["case-3"]
    assert [entry.case_id for entry in ledger.noted] == ["case-3"]
    assert result.sampled_out == 1
    assert [number for number, _ in result.rejected] == [2, 4]
