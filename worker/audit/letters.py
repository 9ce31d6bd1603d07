"""Reading dead letters back (`evidence-worker dead-letters`, `explain --case`): which letters
a listing shows, the line it prints for each, where a letter came from and the task id its
replay is sent under. Pure: letters in, values out; the store is read by the caller."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal

from worker.pipeline.intake import case_id_of
from worker.stores.contract import DeadLetter

Origin = Literal["worker", "score"]
# `score` names its deliveries score-<run>-<line> (worker/cli/score.py); letters written
# before DeadLetter.line existed are known by that alone.
SCORE_TASK_PREFIX = "score-"
# uuid5's namespace for replay task ids: any fixed UUID, this one drawn once.
REPLAY_NAMESPACE = uuid.UUID("5b3c4f0e-2d8a-4c51-9a43-6f1e0c7d2b19")
REPLAY_TASK_PREFIX = "replay-"


def origin(letter: DeadLetter) -> Origin:
    """`score` for a letter `score` wrote (it has an input line), else the worker."""
    if letter.line is not None or (letter.task_id or "").startswith(SCORE_TASK_PREFIX):
        return "score"
    return "worker"


def listing_line(letter_id: str, letter: DeadLetter) -> dict[str, Any]:
    """What `dead-letters list` prints for a letter; case_id is null when the body is not
    a readable JSON object with one."""
    line: dict[str, Any] = {
        "id": letter_id,
        "time": aware(letter.received_at).isoformat(),
        "reason": letter.error,
        "case_id": case_id_of(letter.body),
        "origin": origin(letter),
        "task_id": letter.task_id,
    }
    if letter.line is not None:
        line["line"] = letter.line
    if letter.truncated:
        line["truncated"] = True
    return line


def aware(moment: datetime) -> datetime:
    """A time without an offset is UTC (as the stores write it)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def matches(
    letter: DeadLetter, *, since: datetime | None = None, reason: str | None = None
) -> bool:
    """Received at or after `since`, and its reason contains `reason` (case-sensitive)."""
    if since is not None and aware(letter.received_at) < aware(since):
        return False
    return reason is None or reason in letter.error


def select(
    newest_first: Iterable[tuple[str, DeadLetter]],
    *,
    since: datetime | None = None,
    reason: str | None = None,
    limit: int | None = None,
) -> list[tuple[str, DeadLetter]]:
    """The newest `limit` letters (all, when None) that match, returned oldest first."""
    found: list[tuple[str, DeadLetter]] = []
    for letter_id, letter in newest_first:
        if limit is not None and len(found) >= limit:
            break
        if matches(letter, since=since, reason=reason):
            found.append((letter_id, letter))
    found.reverse()
    return found


def received_before(
    newest_first: Iterable[tuple[str, DeadLetter]], before: datetime
) -> Iterator[str]:
    """The ids of letters received before `before` (what `purge --before` removes)."""
    for letter_id, letter in newest_first:
        if aware(letter.received_at) < aware(before):
            yield letter_id


def of_case(
    newest_first: Iterable[tuple[str, DeadLetter]], case_id: str
) -> tuple[str, DeadLetter] | None:
    """The newest letter whose body names `case_id`, or None."""
    for letter_id, letter in newest_first:
        if case_id_of(letter.body) == case_id:
            return letter_id, letter
    return None


def rejected_text(case_id: str, letter_id: str, letter: DeadLetter) -> str:
    """`explain --case`'s lines for a case that was only ever rejected."""
    return (
        f"case: {case_id}\n"
        f"rejected: {aware(letter.received_at).isoformat()} (never scored: no input hash)\n"
        f"reason: {letter.error}\n"
        f"owner: evaluation-data\n"
        f"dead letter: {letter_id} (evidence-worker dead-letters show {letter_id}; fix the "
        f"producer, then dead-letters replay {letter_id})\n"
    )


def replay_task_id(letter_id: str, letter: DeadLetter) -> str:
    """The task id a letter's replay is sent under, the same each time it is replayed: a
    second replay of a letter whose first was recorded is then the same write (the store
    recognises its write id and records nothing new), never a second attempt."""
    name = f"{letter_id}:{aware(letter.received_at).isoformat()}:{letter.body_sha256}"
    return f"{REPLAY_TASK_PREFIX}{uuid.uuid5(REPLAY_NAMESPACE, name)}"
