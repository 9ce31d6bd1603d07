"""`evidence-worker dead-letters` and `explain --case` of a rejected row, on SQLite, a real
Redis and the test Redis Cluster: what each action prints, what it leaves in the store, and
every bad input as one line, exit 2, nothing lost. The worker's replays through a real broker
and worker are in test_dead_letters_replay.py."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import AttributionResult, input_hash
from tests.conftest import BASE_MESSAGE, FIXED_NOW
from tests.integration.worker_harness import BROKER_URL, queue_length
from worker.audit.letters import aware, origin
from worker.cli import main
from worker.cli.exit_codes import INVALID, OK
from worker.settings import Settings
from worker.stores import DeadLetter, ResultStore, describe, open_store

pytestmark = pytest.mark.integration

PROG = "evidence-worker"
EXTRA = "schema: bogus: Extra inputs are not permitted"
JUNK = {**BASE_MESSAGE, "case_id": "junk-1", "bogus": 1}
VALID_TEXT = json.dumps(BASE_MESSAGE)
HASH = input_hash(AttributionResult.model_validate(BASE_MESSAGE))


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in io.StringIO(self.stdout)]


@dataclass
class Where:
    """A store of the test's own: its URL and key prefix, and a way to open it."""

    url: str
    prefix: str

    def open(self) -> ResultStore:
        return open_store(self.url, Settings(key_prefix=self.prefix))


@pytest.fixture(params=["sqlite", "redis", "cluster"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """Every store kind a URL can name, each empty, under a prefix of its own."""
    if request.param == "sqlite":
        return Where(f"sqlite:///{tmp_path / 'letters.sqlite3'}", "evidence")
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        return Where(cluster.url, request.getfixturevalue("cluster_prefix"))
    return Where(request.getfixturevalue("redis_url"), request.getfixturevalue("key_prefix"))


@pytest.fixture
def store(where: Where) -> Iterator[ResultStore]:
    opened = where.open()
    yield opened
    opened.close()


@pytest.fixture
def cli(
    where: Where, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Run]:
    """`evidence-worker ARGS --store URL` in this process, on the test's store."""

    def run(*args: str) -> Run:
        monkeypatch.setenv("EVIDENCE_KEY_PREFIX", where.prefix)
        monkeypatch.setenv("EVIDENCE_STORE_URL", where.url)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


@pytest.fixture
def named(where: Where, store: ResultStore) -> str:
    """How the commands' summary lines name the test's store."""
    return describe(store, where.url)


def score_file(cli: Callable[..., Run], tmp_path: Path) -> Run:
    """`score` on a valid row (line 1) and a row with an unknown field (line 2)."""
    path = tmp_path / "rows.jsonl"
    path.write_text(f"{VALID_TEXT}\n{json.dumps(JUNK)}\n")
    return cli("score", str(path))


def only_letter(store: ResultStore) -> tuple[str, DeadLetter]:
    (found,) = list(store.letters_newest_first())
    return found


def score_letter(body: str, *, line: int = 3, minutes: int = 0) -> DeadLetter:
    """A letter as `score` writes one, received `minutes` after FIXED_NOW."""
    return DeadLetter(
        received_at=FIXED_NOW + timedelta(minutes=minutes),
        error=EXTRA,
        body=body,
        task_id=f"score-old-{line}",
        line=line,
    )


def test_list_prints_the_letter_of_a_row_score_rejected(
    named: str, cli: Callable[..., Run], store: ResultStore, tmp_path: Path
) -> None:
    """One JSON line: the letter's id, time, reason, case ID, origin, task and line."""
    assert score_file(cli, tmp_path).code == INVALID
    letter_id, letter = only_letter(store)

    run = cli("dead-letters", "list")

    assert (run.code, run.stderr) == (OK, f"dead-letters list: 1 letter (store {named})\n")
    assert run.lines == [
        {
            "id": letter_id,
            "time": aware(letter.received_at).isoformat(),
            "reason": EXTRA,
            "case_id": "junk-1",
            "origin": "score",
            "task_id": letter.task_id,
            "line": 2,
        }
    ]
    assert (letter.task_id or "").startswith("score-")


def test_list_filters_by_time_and_reason_and_keeps_the_newest_of_a_limit(
    cli: Callable[..., Run], store: ResultStore
) -> None:
    """--since, --reason and --limit choose letters; they print oldest first."""
    store.dead_letter(score_letter("a", minutes=0))
    store.dead_letter(score_letter("b", minutes=10).model_copy(update={"error": "too big"}))
    store.dead_letter(score_letter("c", minutes=20))
    ids = {each.body: letter_id for letter_id, each in store.letters_newest_first()}

    def listed(*options: str) -> list[str]:
        return [line["id"] for line in cli("dead-letters", "list", *options).lines]

    assert listed() == [ids["a"], ids["b"], ids["c"]]
    assert listed("--since", "2026-12-01T12:05:00Z") == [ids["b"], ids["c"]]
    assert listed("--reason", "bogus") == [ids["a"], ids["c"]]
    assert listed("--limit", "2") == [ids["b"], ids["c"]]
    assert listed("--reason", "bogus", "--limit", "1") == [ids["c"]]


def test_list_says_null_for_the_case_of_a_body_that_is_not_json(
    cli: Callable[..., Run], store: ResultStore
) -> None:
    """A body that is not a JSON object has no readable case ID."""
    store.dead_letter(score_letter("not json {"))

    (line,) = cli("dead-letters", "list").lines

    assert line["case_id"] is None


def test_show_prints_the_body_exactly_as_received(
    named: str, cli: Callable[..., Run], store: ResultStore
) -> None:
    """Spacing, key order and non-ASCII text as they came, then a newline; the letter and
    its store named on stderr."""
    body = '{ "case_id":"junk-é",   "bogus": [1, 2.50] }'
    store.dead_letter(score_letter(body))
    letter_id, _ = only_letter(store)

    run = cli("dead-letters", "show", letter_id)

    assert (run.code, run.stdout, run.stderr) == (
        OK,
        body + "\n",
        f"dead-letters show: letter {letter_id} (store {named})\n",
    )


def test_show_of_an_unknown_id_is_one_line_and_exit_2(
    cli: Callable[..., Run], store: ResultStore, where: Where
) -> None:
    """No such letter: one line naming the id and the store; the letters stay."""
    store.dead_letter(score_letter("kept"))

    run = cli("dead-letters", "show", "nope")

    assert (run.code, run.stdout) == (INVALID, "")
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"{PROG}: dead-letters show: no dead letter 'nope' in ")
    assert line.endswith(" (`dead-letters list` shows the ids)")
    assert [each.body for _, each in store.letters_newest_first()] == ["kept"]


def test_replay_of_a_body_still_invalid_dead_letters_it_again_then_removes_the_old_letter(
    named: str, cli: Callable[..., Run], store: ResultStore, tmp_path: Path
) -> None:
    """score's letter goes through the pipeline again: rejected with its reason, kept as a
    new letter (same body, reason and line), the old one removed; exit 2, one line."""
    score_file(cli, tmp_path)
    old_id, old = only_letter(store)

    run = cli("dead-letters", "replay", old_id)

    assert run.code == INVALID
    assert run.stderr == (
        f"dead-letters replay: 1 letter: 1 still invalid (dead-lettered again: letter {old_id}:"
        f" {EXTRA}) (store {named})\n"
    )
    (record,) = run.lines
    assert (record["event"], record["case_id"], record["reason"], record["line"]) == (
        "evidence_coverage.rejected",
        "junk-1",
        EXTRA,
        2,
    )
    new_id, new = only_letter(store)
    assert new_id != old_id
    assert (new.body, new.error, new.line, new.body_sha256) == (
        old.body,
        EXTRA,
        2,
        old.body_sha256,
    )


def test_replay_of_a_score_letter_now_valid_records_it_and_removes_the_letter(
    named: str, cli: Callable[..., Run], store: ResultStore
) -> None:
    """A body an earlier version rejected is scored now: its record printed, its attempt
    stored under the replay's task id, the letter gone; replaying that id again is unknown."""
    store.dead_letter(score_letter(VALID_TEXT, line=3))
    letter_id, _ = only_letter(store)

    run = cli("dead-letters", "replay", letter_id)

    assert (run.code, run.stderr) == (
        OK,
        f"dead-letters replay: 1 letter: 1 recorded (store {named})\n",
    )
    (record,) = run.lines
    assert (record["event"], record["case_id"], record["input_hash"], record["line"]) == (
        "evidence_coverage.scored",
        "refund-001",
        HASH,
        3,
    )
    history = store.history(HASH)
    assert history is not None
    assert (history.total_attempts, history.first.task_id) == (1, record["task_id"])
    assert record["task_id"].startswith("replay-")
    assert list(store.letters_newest_first()) == []
    again = cli("dead-letters", "replay", letter_id)
    assert again.code == INVALID
    assert f"no dead letter {letter_id!r}" in again.stderr


def test_replay_all_with_a_reason_replays_those_letters_only(
    named: str, cli: Callable[..., Run], store: ResultStore
) -> None:
    """--all --reason TEXT: the letters whose reason contains TEXT; the others stay."""
    store.dead_letter(score_letter(VALID_TEXT, line=1))
    store.dead_letter(score_letter("other").model_copy(update={"error": "too big"}))

    run = cli("dead-letters", "replay", "--all", "--reason", "bogus")

    assert (run.code, run.stderr) == (
        OK,
        f"dead-letters replay: 1 letter: 1 recorded (store {named})\n",
    )
    assert [each.body for _, each in store.letters_newest_first()] == ["other"]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((), "dead-letters replay: give letter ids (see `dead-letters list`) or --all"),
        (("1", "--reason", "x"), "dead-letters replay: --reason goes with --all"),
        (("1", "--wait", "-1"), "dead-letters replay: --wait must be 0 or more seconds, got -1"),
        (("nope",), "dead-letters replay: no dead letter 'nope' in "),
    ],
)
def test_a_replay_asked_for_wrongly_is_one_line_and_touches_nothing(
    cli: Callable[..., Run], store: ResultStore, args: tuple[str, ...], error: str
) -> None:
    """Nothing chosen, --reason without --all, a negative wait, an unknown id: exit 2."""
    store.dead_letter(score_letter(VALID_TEXT))

    run = cli("dead-letters", "replay", *args)

    assert (run.code, run.stdout) == (INVALID, "")
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"{PROG}: {error}")
    assert [each.body for _, each in store.letters_newest_first()] == [VALID_TEXT]
    assert store.history(HASH) is None


def test_purge_asks_for_yes_then_removes_the_letters_received_before_the_time(
    named: str, cli: Callable[..., Run], store: ResultStore
) -> None:
    """Without --yes it says how many it would remove (exit 2, none removed); with it, it
    removes those received before --before and no other."""
    store.dead_letter(score_letter("old", minutes=0), score_letter("new", minutes=60))

    asked = cli("dead-letters", "purge", "--before", "2026-12-01T12:30:00Z")
    assert (asked.code, asked.stderr) == (
        INVALID,
        f"{PROG}: dead-letters purge: would remove 1 letter received before "
        "2026-12-01T12:30:00+00:00; add --yes to remove it\n",
    )
    assert len(list(store.letters_newest_first())) == 2

    done = cli("dead-letters", "purge", "--before", "2026-12-01T12:30:00Z", "--yes")
    assert (done.code, done.stderr) == (
        OK,
        "dead-letters purge: removed 1 letter received before 2026-12-01T12:30:00+00:00"
        f" (store {named})\n",
    )
    assert [each.body for _, each in store.letters_newest_first()] == ["new"]


def test_explain_of_a_rejected_case_says_when_why_and_which_letter(
    named: str, cli: Callable[..., Run], store: ResultStore, tmp_path: Path
) -> None:
    """A case only ever rejected: rejected at the letter's time, its reason, its owner and
    the letter's id; exit 2."""
    score_file(cli, tmp_path)
    letter_id, letter = only_letter(store)

    run = cli("explain", "--case", "junk-1")

    assert (run.code, run.stderr) == (INVALID, f"explain: case junk-1, rejected (store {named})\n")
    assert run.stdout == (
        "case: junk-1\n"
        f"rejected: {aware(letter.received_at).isoformat()} (never scored: no input hash)\n"
        f"reason: {EXTRA}\n"
        "owner: evaluation-data\n"
        f"dead letter: {letter_id} (evidence-worker dead-letters show {letter_id}; fix the "
        f"producer, then dead-letters replay {letter_id})\n"
    )


def test_a_worker_letter_still_invalid_is_dead_lettered_again_and_never_sent(
    named: str, cli: Callable[..., Run], store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked before it is sent: rejected with its reason, kept as a new letter of the same
    task and position, the old one removed, nothing on the queue; exit 2."""
    queue = f"test-queue-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("EVIDENCE_BROKER_URL", BROKER_URL)
    monkeypatch.setenv("EVIDENCE_QUEUE", queue)
    body = json.dumps(JUNK)
    store.dead_letter(
        DeadLetter(received_at=FIXED_NOW, error=EXTRA, body=body, task_id="task-9", position=1)
    )
    old_id, _ = only_letter(store)

    run = cli("dead-letters", "replay", old_id)

    assert run.code == INVALID
    assert run.lines == [{"id": old_id, "case_id": "junk-1", "invalid": EXTRA}]
    assert run.stderr == (
        f"dead-letters replay: 1 letter: 1 still invalid (dead-lettered again: letter {old_id}:"
        f" {EXTRA}) (store {named})\n"
    )
    new_id, new = only_letter(store)
    assert new_id != old_id
    assert (new.body, new.error, new.task_id, new.position, origin(new)) == (
        body,
        EXTRA,
        "task-9",
        1,
        "worker",
    )
    assert queue_length(BROKER_URL, queue) == 0
