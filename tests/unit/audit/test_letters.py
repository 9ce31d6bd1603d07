"""worker/audit/letters.py: which letters a listing shows, the line it prints, where a letter
came from, its replay's task id; and worker/upstream/replay.py's wait for the ledger."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import FIXED_NOW
from worker.audit.letters import (
    listing_line,
    of_case,
    origin,
    received_before,
    rejected_text,
    replay_task_id,
    select,
)
from worker.stores import DeadLetter
from worker.upstream.replay import POLL_SECONDS, wait_closed


def letter(
    body: str = '{"case_id": "junk-1"}',
    *,
    minutes: int = 0,
    error: str = "schema: bogus",
    **fields: Any,
) -> DeadLetter:
    return DeadLetter(
        received_at=FIXED_NOW + timedelta(minutes=minutes), error=error, body=body, **fields
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"task_id": "3f2c-uuid", "position": 0}, "worker"),
        ({"task_id": None}, "worker"),
        ({"task_id": "replay-5b3c", "position": 0}, "worker"),
        ({"task_id": "score-ab12-7", "line": 7}, "score"),
        ({"task_id": "score-ab12-7"}, "score"),  # written before DeadLetter.line existed
        ({"task_id": "replay-5b3c", "line": 7}, "score"),  # score's, replayed and rejected again
    ],
)
def test_a_letter_comes_from_score_when_it_has_a_line_or_a_score_task(
    fields: dict[str, Any], expected: str
) -> None:
    """origin(): `score` by its line (or its task's name), else the worker."""
    assert origin(letter(**fields)) == expected


@pytest.mark.parametrize(
    ("body", "case_id"),
    [
        ('{"case_id": "junk-1", "bogus": 1}', "junk-1"),
        ("not json {", None),
        ('["a list"]', None),
        ('{"case_id": 7}', None),
        ('{"case_id": ""}', None),
    ],
)
def test_the_listing_line_names_the_case_only_when_the_body_is_readable(
    body: str, case_id: str | None
) -> None:
    """listing_line(): id, time (UTC), reason, case_id or null, origin, task."""
    assert listing_line("17", letter(body, task_id="t-1")) == {
        "id": "17",
        "time": "2026-12-01T12:00:00+00:00",
        "reason": "schema: bogus",
        "case_id": case_id,
        "origin": "worker",
        "task_id": "t-1",
    }


def test_the_listing_line_of_a_cut_score_letter_says_its_line_and_that_it_is_cut() -> None:
    line = listing_line("3", letter("{", task_id="score-x-4", line=4, truncated=True))
    assert (line["line"], line["truncated"], line["origin"]) == (4, True, "score")


NEWEST_FIRST = [
    ("4", letter(minutes=30, error="too big")),
    ("3", letter(minutes=20)),
    ("2", letter(minutes=10, error="too big")),
    ("1", letter(minutes=0)),
]


@pytest.mark.parametrize(
    ("options", "ids"),
    [
        ({}, ["1", "2", "3", "4"]),
        ({"limit": 2}, ["3", "4"]),
        ({"reason": "bogus"}, ["1", "3"]),
        ({"reason": "Bogus"}, []),  # case-sensitive
        ({"since": FIXED_NOW + timedelta(minutes=10)}, ["2", "3", "4"]),
        ({"since": FIXED_NOW + timedelta(minutes=5), "reason": "big", "limit": 1}, ["4"]),
        ({"limit": 0}, []),
    ],
)
def test_select_keeps_the_newest_matching_letters_and_returns_them_oldest_first(
    options: dict[str, Any], ids: list[str]
) -> None:
    """select(): --since (at or after), --reason (contains), --limit (the newest N)."""
    assert [letter_id for letter_id, _ in select(NEWEST_FIRST, **options)] == ids


def test_purge_chooses_the_letters_received_strictly_before_the_time() -> None:
    assert list(received_before(NEWEST_FIRST, FIXED_NOW + timedelta(minutes=20))) == ["2", "1"]


def test_a_case_is_found_in_its_newest_letter() -> None:
    letters = [("9", letter('{"case_id": "other"}')), *NEWEST_FIRST]
    assert of_case(letters, "junk-1") == NEWEST_FIRST[0]
    assert of_case(letters, "nobody") is None


def test_the_rejected_case_text_names_the_time_the_reason_and_the_letter() -> None:
    assert rejected_text("junk-1", "17", letter()) == (
        "case: junk-1\n"
        "rejected: 2026-12-01T12:00:00+00:00 (never scored: no input hash)\n"
        "reason: schema: bogus\n"
        "owner: evaluation-data\n"
        "dead letter: 17 (evidence-worker dead-letters show 17; fix the producer, then "
        "dead-letters replay 17)\n"
    )


def test_a_replay_task_id_is_the_same_for_one_letter_and_differs_between_letters() -> None:
    """Derived from the letter's id, time and body digest: a second replay is the same write."""
    one = letter().bounded(1000)
    assert replay_task_id("17", one) == replay_task_id("17", one)
    assert replay_task_id("17", one).startswith("replay-")
    others = {
        replay_task_id("18", one),
        replay_task_id("17", letter(minutes=1).bounded(1000)),
        replay_task_id("17", letter('{"case_id": "junk-2"}').bounded(1000)),
    }
    assert replay_task_id("17", one) not in others
    assert len(others) == 3


class Ledger:
    """still_open() answers from a script: one set per call, the last one repeated."""

    def __init__(self, *answers: set[str]) -> None:
        self.answers = list(answers)
        self.asked: list[list[str]] = []

    def still_open(self, write_ids: Sequence[str]) -> set[str]:
        self.asked.append(list(write_ids))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_wait_closed_polls_until_every_entry_is_closed() -> None:
    """Each poll asks only for the entries still open; it stops once none is."""
    ledger = Ledger({"a:0", "b:0"}, {"b:0"}, set())
    clock = Clock()

    still = wait_closed(
        ledger, ["a:0", "b:0"], wait_seconds=60, sleep=clock.sleep, clock=lambda: clock.now
    )

    assert still == set()
    assert ledger.asked == [["a:0", "b:0"], ["a:0", "b:0"], ["b:0"]]
    assert clock.slept == [POLL_SECONDS, POLL_SECONDS]


@pytest.mark.parametrize(("wait_seconds", "polls"), [(0, 1), (0.5, 4)])
def test_wait_closed_gives_up_after_the_wait_and_returns_what_is_still_open(
    wait_seconds: float, polls: int
) -> None:
    """--wait 0 asks once; otherwise it asks until the wait has passed."""
    ledger = Ledger({"a:0"})
    clock = Clock()

    still = wait_closed(
        ledger, ["a:0"], wait_seconds=wait_seconds, sleep=clock.sleep, clock=lambda: clock.now
    )

    assert still == {"a:0"}
    assert len(ledger.asked) == polls
