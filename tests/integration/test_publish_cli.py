"""`evidence-worker publish` against a real Redis broker: what lands on the queue, what is said.

kombu keeps a Redis queue as a list named after it (LPUSH, so the oldest message is last);
each element is a JSON envelope whose `body` (JSON text: body_encoding utf-8) decodes to
Celery's [args, kwargs, embed] and whose `headers.task` names the task. Each test publishes
to a queue of its own on DB 10, which no other test uses, and deletes it afterwards.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from contracts import AttributionResult, input_hash
from contracts.record_models import NONDETERMINISM, REJECTED, SCORED
from tests.conftest import BASE_MESSAGE, EXAMPLES, ROOT
from tests.integration.worker_harness import (
    PRIORITY_SEP,
    REDIS_PORT,
    STORE_URL,
    Launcher,
    flush_queue,
    free_port,
    queue_length,
)
from worker.cli import main
from worker.cli.exit_codes import INVALID, OK
from worker.constants import SCORE, SCORE_BATCH
from worker.human_counts import counted
from worker.runtime.consumer import ENVELOPE_BYTES
from worker.stores.redis.redis_store import RedisStore
from worker.upstream.publishing import BATCH_ENVELOPE_BYTES

pytestmark = pytest.mark.integration

BROKER_URL = f"redis://127.0.0.1:{REDIS_PORT}/10"
EXAMPLE = EXAMPLES / "attribution-results.jsonl"
CONSOLE_SCRIPT = Path(sys.executable).parent / "evidence-worker"
PROG = "evidence-worker"
# Line 7 of the example file (refund-003) says supported_claims, not supported_claim_ids.
EXAMPLE_REJECTION = (
    f"{PROG} publish: line 7 not sent: schema: supported_claim_ids: Field required; "
    "supported_claims: Extra inputs are not permitted"
)
SMALL_LIMIT = 2_000  # EVIDENCE_MAX_MESSAGE_BYTES for the size tests; a base message is ~700
WORKER_LIMIT = 20_000  # EVIDENCE_MAX_MESSAGE_BYTES of the round-trip test's worker

MessageFactory = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Sent:
    """One task message found on the queue."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    content_type: str
    task_id: str


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


def queued(queue: str) -> list[Sent]:
    """The queue's task messages, oldest (first published) first."""
    client = redis.Redis.from_url(BROKER_URL)
    try:
        other_levels = [f"{queue}{PRIORITY_SEP}{priority}" for priority in range(1, 10)]
        assert sum(client.llen(name) for name in other_levels) == 0, "unexpected priorities"
        raw = client.lrange(queue, 0, -1)
    finally:
        client.close()
    sent = []
    for element in reversed(raw):
        envelope = json.loads(element)
        assert envelope["properties"]["body_encoding"] == "utf-8"  # JSON text, not base64
        args, kwargs, _embed = json.loads(envelope["body"])
        headers = envelope["headers"]
        sent.append(Sent(headers["task"], args, kwargs, envelope["content-type"], headers["id"]))
    return sent


def text_lines(path: Path) -> list[str]:
    """The file's lines as publish reads them: without the terminator."""
    return path.read_text("utf-8").splitlines()


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue of this test's own on DB 10; its keys are deleted afterwards."""
    try:
        redis.Redis.from_url(BROKER_URL, socket_connect_timeout=2).ping()
    except redis.ConnectionError as error:
        pytest.fail(f"integration tests need Redis at {BROKER_URL}: {error}", pytrace=False)
    name = f"test-publish-{uuid.uuid4().hex[:10]}"
    yield name
    flush_queue(BROKER_URL, name)


@pytest.fixture
def publish(
    queue: str,
    key_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Callable[..., Run]:
    """Run `evidence-worker publish ARGS` in this process (cli.main) against the test queue,
    its ledger in the harness's store under the test's prefix."""

    def run(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> Run:
        settings = {
            "EVIDENCE_BROKER_URL": BROKER_URL,
            "EVIDENCE_STORE_URL": STORE_URL,
            "EVIDENCE_KEY_PREFIX": key_prefix,
            "EVIDENCE_QUEUE": queue,
            **(env or {}),
        }
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        capsys.readouterr()
        try:
            code = main(["publish", *args])
        except SystemExit as exit_:  # argparse: usage errors
            code = exit_.code if isinstance(exit_.code, int) else INVALID
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


def run_console(args: Sequence[str], *, queue: str, key_prefix: str, stdin: bytes = b"") -> Run:
    """The installed console script in a subprocess, as a user runs it."""
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("EVIDENCE_")},
        "EVIDENCE_BROKER_URL": BROKER_URL,
        "EVIDENCE_STORE_URL": STORE_URL,
        "EVIDENCE_KEY_PREFIX": key_prefix,
        "EVIDENCE_QUEUE": queue,
    }
    completed = subprocess.run(
        [str(CONSOLE_SCRIPT), "publish", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return Run(
        completed.returncode,
        completed.stdout.decode("utf-8", "replace"),
        completed.stderr.decode("utf-8", "replace"),
    )


# Where publish says it noted and sent the messages, at the end of its summary line.
WHERE = f" (store {STORE_URL}, broker {BROKER_URL})"


def summary(queue: str, messages: int, tasks: int, rejected: int, *, where: str = WHERE) -> str:
    return (
        f"publish: sent {counted(messages, 'message')} in {counted(tasks, 'task')} to queue "
        f"{queue}; {counted(rejected, 'line')} rejected{where}"
    )


def valid_example_lines() -> list[str]:
    lines = text_lines(EXAMPLE)
    assert len(lines) == 10
    assert '"case_id": "refund-003"' in lines[6]
    return lines[:6] + lines[7:]


def sized(message_dict: MessageFactory, size: int, case_id: str) -> str:
    """A valid message line of exactly `size` bytes (the answer is padded)."""
    line = json.dumps(message_dict(case_id=case_id, answer=""))
    line = json.dumps(message_dict(case_id=case_id, answer="x" * (size - len(line))))
    assert len(line.encode()) == size
    return line


# --- the example file, through the installed console script ------------------------------


def test_the_example_file_sends_each_valid_line_as_a_score_task_with_its_json_text(
    queue: str, key_prefix: str
) -> None:
    run = run_console([str(EXAMPLE)], queue=queue, key_prefix=key_prefix)

    assert run.code == INVALID, run.stderr
    assert run.stdout == ""
    assert run.stderr_lines == [EXAMPLE_REJECTION, summary(queue, 9, 9, 1)]
    sent = queued(queue)
    assert [task.task for task in sent] == [SCORE] * 9
    # Each message is its line's JSON text, exactly as in the file, in file order.
    assert [task.args for task in sent] == [[line] for line in valid_example_lines()]
    assert all(isinstance(task.args[0], str) for task in sent)
    assert all(task.kwargs == {} and task.content_type == "application/json" for task in sent)
    # Each is noted in the ledger under its task id before it was sent, with its text.
    assert ledger_entries(key_prefix) == sorted(
        (task.task_id, 0, json.loads(task.args[0])["case_id"], task.args[0]) for task in sent
    )


def test_task_headers_name_messages_by_case_id_and_hash_never_by_their_text(
    publish: Callable[..., Run], queue: str, write_jsonl: Callable[..., Path]
) -> None:
    """What task events, Flower and `celery inspect` show of a task's arguments."""
    messages = [{**BASE_MESSAGE, "case_id": f"quiet-{n}"} for n in range(8)]
    path = write_jsonl(messages)

    single = publish(str(path))
    batched = publish(str(path), "--batch", "7")

    assert (single.code, batched.code) == (OK, OK)
    client = redis.Redis.from_url(BROKER_URL)
    try:
        headers = [json.loads(raw)["headers"] for raw in reversed(client.lrange(queue, 0, -1))]
    finally:
        client.close()
    named = [f"case_id=quiet-{n} input_hash={hash_of_message(m)}" for n, m in enumerate(messages)]
    assert [h["argsrepr"] for h in headers] == [
        *named,
        "7 messages: " + ", ".join(named[:5]) + ", … (+2)",
        "1 message: " + named[7],
    ]
    assert {h["kwargsrepr"] for h in headers} == {"{}"}
    assert not any(BASE_MESSAGE["answer"] in json.dumps(h) for h in headers)


def hash_of_message(message: dict[str, Any]) -> str:
    return input_hash(AttributionResult.model_validate(message))


def ledger_entries(key_prefix: str) -> list[tuple[str, int, str, str]]:
    """The open ledger entries under the test's prefix: (task id, position, case id, body)."""
    store = RedisStore.from_url(STORE_URL, prefix=key_prefix)
    try:
        entries = store.unrecorded(published_before=datetime.now(UTC) + timedelta(hours=1))
        return sorted((e.task_id, e.position, e.case_id, e.body) for e in entries)
    finally:
        store.close()


def test_dash_reads_stdin(queue: str, key_prefix: str, message_dict: MessageFactory) -> None:
    lines = [json.dumps(message_dict(case_id=f"stdin-{n}")) for n in range(3)]

    run = run_console(
        ["-", "--batch", "2"], queue=queue, key_prefix=key_prefix, stdin="\n".join(lines).encode()
    )

    assert run.code == OK, run.stderr
    assert run.stderr_lines == [summary(queue, 3, 2, 0)]
    sent = queued(queue)
    assert [(task.task, task.args) for task in sent] == [
        (SCORE_BATCH, [lines[:2]]),
        (SCORE_BATCH, [lines[2:]]),
    ]
    assert ledger_entries(key_prefix) == sorted(
        [
            (sent[0].task_id, 0, "stdin-0", lines[0]),
            (sent[0].task_id, 1, "stdin-1", lines[1]),
            (sent[1].task_id, 0, "stdin-2", lines[2]),
        ]
    )


# --- batching ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [2, 4, 9, 50])
def test_batch_sends_ceil_n_over_size_score_batch_tasks_in_order(
    publish: Callable[..., Run], queue: str, size: int
) -> None:
    valid = valid_example_lines()
    tasks = math.ceil(len(valid) / size)

    run = publish(str(EXAMPLE), "--batch", str(size))

    assert run.code == INVALID
    assert run.stderr_lines == [EXAMPLE_REJECTION, summary(queue, 9, tasks, 1)]
    sent = queued(queue)
    assert [task.task for task in sent] == [SCORE_BATCH] * tasks
    assert all(len(task.args) == 1 and len(task.args[0]) <= size for task in sent)
    assert [task.args[0] for task in sent] == [
        valid[start : start + size] for start in range(0, len(valid), size)
    ]


def test_a_batch_is_cut_short_before_it_would_pass_the_batch_byte_limit(
    publish: Callable[..., Run], queue: str, write_jsonl: Callable[..., Path]
) -> None:
    """The worker refuses a score_batch body over EVIDENCE_MAX_BATCH_BYTES whole: publish
    never sends one, however large --batch is."""
    messages = [{**BASE_MESSAGE, "case_id": f"sized-{n}"} for n in range(10)]
    path = write_jsonl(messages)
    lines = text_lines(path)
    each = len(json.dumps(lines[0])) + 2
    limit = BATCH_ENVELOPE_BYTES + 3 * each + 10  # room for three messages, not four

    run = publish(str(path), "--batch", "100", env={"EVIDENCE_MAX_BATCH_BYTES": str(limit)})

    assert run.code == OK, run.stderr
    assert [task.args[0] for task in queued(queue)] == [
        lines[0:3],
        lines[3:6],
        lines[6:9],
        lines[9:10],
    ]


def test_batch_1_is_the_default_one_score_task_per_message(
    publish: Callable[..., Run], queue: str, write_jsonl: Callable[..., Path]
) -> None:
    path = write_jsonl([BASE_MESSAGE, {**BASE_MESSAGE, "case_id": "refund-001-b"}])

    run = publish(str(path), "--batch", "1")

    assert run.code == OK
    assert run.stderr_lines == [summary(queue, 2, 2, 0)]
    assert [(task.task, task.args) for task in queued(queue)] == [
        (SCORE, [line]) for line in text_lines(path)
    ]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("0", "argument --batch: must be at least 1, got 0"),
        ("-3", "argument --batch: must be at least 1, got -3"),
        ("two", "argument --batch: 'two' is not an integer"),
    ],
)
def test_a_batch_size_below_1_is_a_usage_error(
    publish: Callable[..., Run], queue: str, value: str, error: str
) -> None:
    run = publish(str(EXAMPLE), "--batch", value)

    assert run.code == INVALID
    assert run.stderr_lines == [
        f"{PROG} publish: error: {error}",
        f"run '{PROG} publish --help' for the options",
    ]
    assert queued(queue) == []


# --- invalid lines -------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2])
def test_invalid_lines_are_reported_one_each_and_the_others_still_sent(
    publish: Callable[..., Run],
    queue: str,
    message_dict: MessageFactory,
    write_jsonl: Callable[..., Path],
    size: int,
) -> None:
    good = [json.dumps(message_dict(case_id=f"good-{n}")) for n in range(3)]
    path = write_jsonl(
        [
            good[0],
            good[1][:40],  # truncated: not JSON
            "",  # blank: skipped, but still counted as a line
            good[1],
            json.dumps(message_dict(case_id="extra", colour="red")),
            json.dumps(message_dict(case_id="big", answer="x" * SMALL_LIMIT)),
            b"\xff" + good[2].encode(),
            "[1, 2]",
            good[2],
        ]
    )

    run = publish(str(path), "--batch", str(size), env={"EVIDENCE_MAX_MESSAGE_BYTES": "2000"})

    big = len(json.dumps(message_dict(case_id="big", answer="x" * SMALL_LIMIT)))
    assert run.code == INVALID
    assert run.stdout == ""
    assert run.stderr_lines == [
        f"{PROG} publish: line 2 not sent: invalid JSON: EOF while parsing a string at line 1 "
        "column 40",
        f"{PROG} publish: line 5 not sent: schema: colour: Extra inputs are not permitted",
        f"{PROG} publish: line 6 not sent: message is {big} bytes, over the 2000-byte limit",
        f"{PROG} publish: line 7 not sent: message is not valid UTF-8 (invalid start byte at "
        "byte 0)",
        f"{PROG} publish: line 8 not sent: schema: message: Input should be an object",
        summary(queue, 3, math.ceil(3 / size), 5),
    ]
    sent = queued(queue)
    if size == 1:
        assert [(task.task, task.args) for task in sent] == [(SCORE, [line]) for line in good]
    else:
        assert [(task.task, task.args) for task in sent] == [
            (SCORE_BATCH, [good[:2]]),
            (SCORE_BATCH, [good[2:]]),
        ]


def test_a_file_of_only_invalid_lines_sends_nothing_and_says_so(
    publish: Callable[..., Run], queue: str, write_jsonl: Callable[..., Path]
) -> None:
    path = write_jsonl(["{", '{"schema_version": 1}'])

    run = publish(str(path))

    assert run.code == INVALID
    assert run.stderr_lines[-1] == summary(queue, 0, 0, 2)
    assert [line.split(": ", 2)[1] for line in run.stderr_lines[:-1]] == [
        "line 1 not sent",
        "line 2 not sent",
    ]
    assert queued(queue) == []


# --- sampling -------------------------------------------------------------------------------


def in_sample(case_id: str, rate: float) -> bool:
    """SPEC §10's rule, written out independently of contracts/sampling.py."""
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def sampled_summary(
    queue: str, messages: int, tasks: int, rejected: int, out: int, rate: str
) -> str:
    sampled_out = f"{counted(out, 'message')} sampled out (--sample-rate {rate})"
    return f"{summary(queue, messages, tasks, rejected, where='')}; {sampled_out}{WHERE}"


SAMPLE_CASES = [f"traffic-{n:03d}" for n in range(40)]


def test_sample_rate_sends_exactly_the_sampled_case_ids_and_notes_only_them(
    queue: str, key_prefix: str, write_jsonl: Callable[..., Path]
) -> None:
    """Through the console script: at 0.25 the queue holds the cases whose hash is below a
    quarter, in file order, each its line's text; the ledger holds an entry for each of them
    and for nothing else; the summary counts the rest."""
    lines = [json.dumps({**BASE_MESSAGE, "case_id": case_id}) for case_id in SAMPLE_CASES]
    path = write_jsonl(lines)
    expected = [case_id for case_id in SAMPLE_CASES if in_sample(case_id, 0.25)]
    assert expected == [
        "traffic-003", "traffic-008", "traffic-013", "traffic-019", "traffic-020",
        "traffic-030", "traffic-035", "traffic-038", "traffic-039",
    ]  # fmt: skip

    run = run_console([str(path), "--sample-rate", "0.25"], queue=queue, key_prefix=key_prefix)

    assert run.code == OK, run.stderr
    assert run.stderr_lines == [sampled_summary(queue, 9, 9, 0, 31, "0.25")]
    sent = queued(queue)
    assert [json.loads(task.args[0])["case_id"] for task in sent] == expected
    assert [task.args for task in sent] == [[lines[SAMPLE_CASES.index(c)]] for c in expected]
    assert ledger_entries(key_prefix) == sorted(
        (task.task_id, 0, json.loads(task.args[0])["case_id"], task.args[0]) for task in sent
    )


def test_a_smaller_rate_sends_a_subset_of_a_larger_one_in_batches_too(
    publish: Callable[..., Run], queue: str, key_prefix: str, write_jsonl: Callable[..., Path]
) -> None:
    """0.1 then 0.25 on the same file, in batches of 4: the first run's cases are among the
    second's, and each batch holds only sampled messages."""
    path = write_jsonl([{**BASE_MESSAGE, "case_id": case_id} for case_id in SAMPLE_CASES])

    tenth = publish(str(path), "--sample-rate", "0.1", "--batch", "4")
    tenth_sent = [json.loads(text)["case_id"] for task in queued(queue) for text in task.args[0]]
    flush_queue(BROKER_URL, queue)
    quarter = publish(str(path), "--sample-rate", "0.25", "--batch", "4")
    quarter_tasks = queued(queue)

    assert (
        tenth_sent
        == [c for c in SAMPLE_CASES if in_sample(c, 0.1)]
        == [
            "traffic-030",
            "traffic-035",
            "traffic-039",
        ]
    )
    assert tenth.stderr_lines == [sampled_summary(queue, 3, 1, 0, 37, "0.1")]
    assert quarter.stderr_lines == [sampled_summary(queue, 9, 3, 0, 31, "0.25")]
    quarter_sent = [json.loads(text)["case_id"] for task in quarter_tasks for text in task.args[0]]
    assert quarter_sent == [c for c in SAMPLE_CASES if in_sample(c, 0.25)]
    assert set(tenth_sent) < set(quarter_sent)
    assert [task.task for task in quarter_tasks] == [SCORE_BATCH] * 3
    assert sorted(case for _, _, case, _ in ledger_entries(key_prefix)) == sorted(
        tenth_sent + quarter_sent
    )


@pytest.mark.parametrize(("rate", "sent"), [("0", 0), ("0.0", 0), ("1", 40), ("1.0", 40)])
def test_rate_0_sends_nothing_and_rate_1_everything_both_fine(
    publish: Callable[..., Run],
    queue: str,
    key_prefix: str,
    write_jsonl: Callable[..., Path],
    rate: str,
    sent: int,
) -> None:
    """Nothing sent at rate 0 is not `contains no messages`: the file had them, the rate
    chose none."""
    path = write_jsonl([{**BASE_MESSAGE, "case_id": case_id} for case_id in SAMPLE_CASES])

    run = publish(str(path), "--sample-rate", rate)

    shown = str(float(rate))
    assert (run.code, run.stderr_lines) == (
        OK,
        [sampled_summary(queue, sent, sent, 0, 40 - sent, shown)],
    )
    assert len(queued(queue)) == sent
    assert len(ledger_entries(key_prefix)) == sent


def test_invalid_lines_are_still_reported_when_sampling(
    publish: Callable[..., Run], queue: str
) -> None:
    """The example file at 0.5: its invalid line 7 is reported (exit 2) whatever the rate."""
    valid_cases = [json.loads(line)["case_id"] for line in valid_example_lines()]
    expected = [case_id for case_id in valid_cases if in_sample(case_id, 0.5)]

    run = publish(str(EXAMPLE), "--sample-rate", "0.5")

    assert run.code == INVALID
    assert run.stderr_lines == [
        EXAMPLE_REJECTION,
        sampled_summary(queue, len(expected), len(expected), 1, 9 - len(expected), "0.5"),
    ]
    assert [json.loads(task.args[0])["case_id"] for task in queued(queue)] == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1.5", "argument --sample-rate: '1.5' is outside 0.0..1.0"),
        ("-0.25", "argument --sample-rate: '-0.25' is outside 0.0..1.0"),
        ("nan", "argument --sample-rate: 'nan' is not a finite number: give one in 0.0..1.0"),
        ("inf", "argument --sample-rate: 'inf' is not a finite number: give one in 0.0..1.0"),
        ("abc", "argument --sample-rate: 'abc' is not a number: give one in 0.0..1.0"),
    ],
)
def test_a_sample_rate_that_is_no_share_is_a_usage_error_and_sends_nothing(
    publish: Callable[..., Run], queue: str, key_prefix: str, value: str, error: str
) -> None:
    run = publish(str(EXAMPLE), "--sample-rate", value)

    assert run.code == INVALID
    assert run.stderr_lines == [
        f"{PROG} publish: error: {error}",
        f"run '{PROG} publish --help' for the options",
    ]
    assert queued(queue) == []
    assert ledger_entries(key_prefix) == []


# --- the size limit -------------------------------------------------------------------------


def test_the_size_limit_is_unchanged_and_escaping_never_pushes_a_line_over_it(
    publish: Callable[..., Run],
    queue: str,
    message_dict: MessageFactory,
    write_jsonl: Callable[..., Path],
) -> None:
    """Lines up to the limit are sent and lines over it are not, as always. The transport's
    JSON escapes a text's quotes once more; a line that the escaping would take over the limit
    goes as the decoded object (so the worker's size check, limit + envelope, still takes it)."""
    small = sized(message_dict, 1_000, "small")
    at_limit = sized(message_dict, SMALL_LIMIT, "at-limit")
    over = sized(message_dict, SMALL_LIMIT + 1, "over")
    assert len(json.dumps(small)) <= SMALL_LIMIT < len(json.dumps(at_limit))
    path = write_jsonl([small, at_limit, over])

    run = publish(str(path), env={"EVIDENCE_MAX_MESSAGE_BYTES": str(SMALL_LIMIT)})

    assert run.code == INVALID
    assert run.stderr_lines == [
        f"{PROG} publish: line 3 not sent: message is 2001 bytes, over the 2000-byte limit",
        summary(queue, 2, 2, 1),
    ]
    sent = queued(queue)
    assert [task.args for task in sent] == [[small], [json.loads(at_limit)]]


# --- no messages, unreadable input, no broker ---------------------------------------------


@pytest.mark.parametrize("content", [b"", b"\n  \n\r\n"], ids=["empty", "blank-lines"])
def test_a_file_without_messages_is_an_error(
    publish: Callable[..., Run], queue: str, tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)

    run = publish(str(path))

    assert (run.code, run.stdout, run.stderr_lines) == (
        INVALID,
        "",
        [f"{PROG}: {path} contains no messages"],
    )
    assert queued(queue) == []


def test_empty_stdin_is_an_error(publish: Callable[..., Run], queue: str) -> None:
    run = publish("-", stdin=b"")

    assert (run.code, run.stderr_lines) == (INVALID, [f"{PROG}: stdin contains no messages"])
    assert queued(queue) == []


def test_an_unreadable_path_is_one_clear_line(
    publish: Callable[..., Run], queue: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.jsonl"

    for path, reason in [(missing, "No such file or directory"), (tmp_path, "it is a directory")]:
        run = publish(str(path))

        assert (run.code, run.stdout, run.stderr_lines) == (
            INVALID,
            "",
            [f"{PROG}: cannot read {path}: {reason}"],
        )
    assert queued(queue) == []


def test_an_unreachable_broker_is_one_clear_line(publish: Callable[..., Run]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"

    run = publish(str(EXAMPLE), env={"EVIDENCE_BROKER_URL": url})  # the ledger is reachable

    assert run.code == INVALID
    assert len(run.stderr_lines) == 1
    assert run.stderr.startswith(f"{PROG}: broker unreachable (")
    assert run.stderr_lines[0].endswith("; check EVIDENCE_BROKER_URL")


def test_a_publish_the_broker_refused_leaves_no_entry_for_reconcile_to_list(
    publish: Callable[..., Run], key_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each message is noted before its task is sent, and published in the ledger only once
    the broker took it: reconcile finds no false loss (and would republish nothing)."""
    url = f"redis://127.0.0.1:{free_port()}/0"

    run = publish(str(EXAMPLE), "--batch", "2", env={"EVIDENCE_BROKER_URL": url})

    assert run.code == INVALID
    assert run.stderr.startswith(f"{PROG}: broker unreachable (")
    store = RedisStore.from_url(STORE_URL, prefix=key_prefix)
    try:
        assert store.count_unrecorded(published_before=datetime.now(UTC) + timedelta(1)) == 0
    finally:
        store.close()
    capsys.readouterr()
    assert main(["reconcile", "--older-than", "0s"]) == OK
    assert capsys.readouterr().out == ""


def test_a_broker_failing_midway_says_what_went_and_the_ledger_keeps_just_that(
    publish: Callable[..., Run], queue: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu.exceptions import OperationalError

    from worker.upstream import publishing

    real_send, calls = publishing.send, []

    def failing_third(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs["task_id"])
        if len(calls) == 3:
            raise OperationalError("Connection reset by peer")
        return real_send(*args, **kwargs)

    monkeypatch.setattr(publishing, "send", failing_third)

    run = publish(str(EXAMPLE), "--batch", "2")

    assert run.code == INVALID
    assert run.stderr_lines[-2:] == [
        f"publish: the broker failed: line 5 and every line after it were not sent, and "
        f"nothing will send them; sent 4 messages to queue {queue} before it; resume with "
        f"`{PROG} publish {EXAMPLE} --from-line 5`",
        f"{PROG}: broker unreachable (Connection reset by peer); check EVIDENCE_BROKER_URL",
    ]
    assert [sent.task_id for sent in queued(queue)] == calls[:2]
    store = RedisStore.from_url(STORE_URL, prefix=key_prefix)
    try:
        open_entries = store.unrecorded(published_before=datetime.now(UTC) + timedelta(1))
        assert sorted(entry.task_id for entry in open_entries) == sorted(calls[:2] * 2)
    finally:
        store.close()


# --- what a worker makes of it ------------------------------------------------------------


def quote_heavy(message_dict: MessageFactory, size: int) -> str:
    """A compact valid line of exactly `size` bytes, a quarter of it quotes (many short IDs)."""
    ids = [f"c{n}" for n in range(size // 9)]

    def line(answer: str) -> str:
        message = message_dict(
            case_id="many-ids", answer=answer, required_claim_ids=ids, supported_claim_ids=ids[:7]
        )
        return json.dumps(message, separators=(",", ":"))

    padded = line("x" * (size - len(line(""))))
    assert len(padded) == size
    return padded


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """Workers on DB 10 under a key prefix of this test's own; keys and queues cleaned up."""
    started = Launcher(tmp_path, f"test-publish-{uuid.uuid4().hex[:10]}")
    yield started
    started.stop_all()  # SIGTERM to each main process first, then SIGKILL to its group
    client = redis.Redis.from_url(BROKER_URL)
    keys = list(client.scan_iter(match=f"{started.key_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def test_a_worker_scores_what_publish_sent_batches_of_text_and_quote_heavy_lines(
    publish: Callable[..., Run],
    queue: str,
    launcher: Launcher,
    message_dict: MessageFactory,
    write_jsonl: Callable[..., Path],
) -> None:
    """score_batch items as JSON text are scored like any message; a line at the limit whose
    escaped text would not fit the worker's transport limit (limit + envelope) still arrives."""
    heavy = quote_heavy(message_dict, WORKER_LIMIT)
    assert len(json.dumps(heavy)) > WORKER_LIMIT + ENVELOPE_BYTES  # as text it is refused
    limit = {"EVIDENCE_MAX_MESSAGE_BYTES": str(WORKER_LIMIT)}
    worker = launcher.start(
        queue, broker_url=BROKER_URL, store_url=BROKER_URL, pool="solo", env=limit
    )

    batched = publish(str(EXAMPLE), "--batch", "4", env=limit)
    single = publish(str(write_jsonl([heavy])), env=limit)

    assert (batched.code, single.code) == (INVALID, OK)
    records = worker.wait_for(10, timeout=60)
    assert [record["case_id"] for record in records] == [
        json.loads(line)["case_id"] for line in [*valid_example_lines(), heavy]
    ]
    assert {record["event"] for record in records} == {SCORED}
    assert [record["cache"] for record in records] == ["miss", "miss", "hit", "conflict"] + [
        "miss"
    ] * 6
    assert records[-1]["value"] == pytest.approx(7 / (WORKER_LIMIT // 9))
    assert len(worker.events(NONDETERMINISM)) == 1
    assert worker.events(REJECTED) == []
    assert queue_length(BROKER_URL, queue) == 0
