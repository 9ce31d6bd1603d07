"""The publish time a task message's header carries (worker/runtime/tasks.py): a number of
seconds since the epoch is one; anything else a foreign publisher might send is not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.runtime.tasks import _published_at


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (1_796_000_000.25, datetime(2026, 11, 30, 0, 53, 20, 250000, tzinfo=UTC)),
        (1_796_000_000, datetime(2026, 11, 30, 0, 53, 20, tzinfo=UTC)),
        (None, None),
        ("1796000000", None),
        (True, None),
        (1e300, None),
        (float("nan"), None),
    ],
)
def test_published_at_reads_only_a_number_of_seconds(
    header: object, expected: datetime | None
) -> None:
    assert _published_at(header) == expected
