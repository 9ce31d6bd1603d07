"""docs/worker.md's "Run the worker" flow, end to end, with the commands read from that page.

A worker started with the Procfile's command line consumes what `evidence-worker publish`
sends of the example file; then `alerts` and `show` inspect the conflicting hash, as the page
shows. Only where things live differs: DB 9 (no other test uses it), a queue and a key prefix
of this test's own, so it never meets another test's workers or keys. The README's three
commands are the page's (tests/unit/project/test_docs.py).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from contracts import AttributionResult, input_hash
from contracts.record_models import NONDETERMINISM, REJECTED, SCORED
from tests.conftest import EXAMPLES, ROOT
from tests.factories import procfile_worker, without_progress
from tests.integration.worker_harness import REDIS_PORT, Launcher, Worker
from worker.cli import exit_codes as runs
from worker.stores.contract import History

pytestmark = pytest.mark.integration

REDIS_URL = f"redis://127.0.0.1:{REDIS_PORT}/9"
DOC_STORE_URL = "redis://localhost:6379/0"  # what the page's commands name
EXAMPLE = EXAMPLES / "attribution-results.jsonl"
BIN = Path(sys.executable).parent  # the venv's console scripts: celery, evidence-worker
TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Command:
    """One shell line of the page: `VAR=value ... program args...`."""

    env: dict[str, str]
    argv: list[str]


def parse_shell_line(line: str) -> Command:
    words = shlex.split(line, comments=True)
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return Command(env, words)


def page_section_commands() -> tuple[list[Command], list[Command]]:
    """The two sh blocks of docs/worker.md's "## Run the worker": starting the worker;
    publish, alerts, show."""
    page = (ROOT / "docs" / "worker.md").read_text("utf-8")
    section = page.split("\n## Run the worker\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2, section
    start, inspect = (
        [parse_shell_line(line) for line in block.splitlines() if line.strip()] for block in blocks
    )
    return start, inspect


def on_queue(argv: list[str], queue: str) -> list[str]:
    """The same command line consuming `queue` instead of the default queue."""
    position = argv.index("--queues") + 1
    assert argv[position] == "attribution-results"
    return [*argv[:position], queue, *argv[position + 1 :]]


def installed(argv: list[str]) -> list[str]:
    """The program from this venv's bin: what `celery` or `evidence-worker` means in the venv."""
    program = BIN / argv[0]
    assert program.is_file(), f"{argv[0]} is not installed in {BIN}"
    return [str(program), *argv[1:]]


@dataclass(frozen=True)
class Finished:
    code: int
    stdout: str
    stderr: str


def run(command: Command, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        installed(command.argv),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(process: subprocess.Popen[bytes]) -> Finished:
    stdout, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
    return Finished(process.returncode, stdout.decode("utf-8"), stderr.decode("utf-8"))


def hash_of(line: str) -> str:
    return input_hash(AttributionResult.model_validate_json(line))


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    """Workers under a key prefix of this test's own on DB 9; keys and queues cleaned up."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError as error:
        pytest.fail(f"integration tests need Redis at {REDIS_URL}: {error}", pytrace=False)
    started = Launcher(tmp_path, f"test-docs-flow-{uuid.uuid4().hex[:10]}")
    yield started
    started.stop_all()  # SIGTERM to each main process first, then SIGKILL to its group
    keys = list(client.scan_iter(match=f"{started.key_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def test_the_documented_worker_flow(launcher: Launcher) -> None:
    start, (publish, alerts, show) = page_section_commands()
    lines = EXAMPLE.read_text("utf-8").splitlines()
    cases = [json.loads(line)["case_id"] for line in lines]
    sent = [case for case in cases if case != "refund-003"]  # line 7: not a valid message
    reruns = [line for line in lines if '"case_id": "refund-002' in line]
    conflicting = hash_of(reruns[0])
    assert [hash_of(line) for line in reruns] == [conflicting] * 3

    # The page runs the worker exactly as the Procfile does.
    assert [command.argv for command in start] == [procfile_worker()]
    assert start[0].env == {}
    queue = f"test-docs-flow-{uuid.uuid4().hex[:10]}"
    worker: Worker = launcher.start(
        queue,
        broker_url=REDIS_URL,
        store_url=REDIS_URL,  # the worker's default: the broker's Redis
        # One pool process scores in file order, so the three refund-002 messages are
        # recorded in file order and the outcome below is the page's, every time.
        env={"CELERY_WORKER_CONCURRENCY": "1"},
        command=installed(on_queue(procfile_worker(), queue)),
    )
    worker.wait_ready()
    assert len(worker.child_pids()) == 1, "CELERY_WORKER_CONCURRENCY did not apply"
    # The other shell's environment: the same broker, queue and key prefix as the worker's.
    commands_env = {
        name: value
        for name, value in worker.env.items()
        if name not in {"EVIDENCE_STORE_URL", "CELERY_WORKER_CONCURRENCY"}
    }

    # evidence-worker publish contracts/examples/attribution-results.jsonl   # exits 2 ...
    assert publish.env == {}
    assert publish.argv == ["evidence-worker", "publish", str(EXAMPLE.relative_to(ROOT))]
    published = finish(run(publish, commands_env))
    assert published.code == runs.INVALID, published.stderr
    assert without_progress(published.stderr) == [
        "evidence-worker publish: line 7 not sent: schema: supported_claim_ids: Field "
        "required; supported_claims: Extra inputs are not permitted",
        f"publish: sent 9 messages in 9 tasks to queue {queue}; 1 line rejected"
        f" (store {REDIS_URL}, broker {REDIS_URL})",
    ]

    # One JSON record per message and one alert on the worker's stdout.
    worker.wait_until(
        lambda output: (
            sum(line.get("event") in (SCORED, REJECTED) for line in output) >= len(sent)
            and any(line.get("event") == NONDETERMINISM for line in output)
        ),
        timeout=TIMEOUT_SECONDS,
        what=f"{len(sent)} records and an alert",
    )
    records = worker.records()
    assert sorted(record["case_id"] for record in records) == sorted(sent), worker
    assert [record["event"] for record in records] == [SCORED] * len(sent)
    by_case = {record["case_id"]: record for record in records}
    assert Counter(record["cache"] for record in records) == {"miss": 7, "hit": 1, "conflict": 1}
    assert by_case["refund-002-rerun"]["cache"] == "hit"
    retry = by_case["refund-002-retry"]
    assert retry["cache"] == "conflict"
    first = by_case["refund-002"]
    assert (retry["value"], retry["reason"]) == (first["value"], first["reason"])
    assert retry["observed_value"] != first["value"]
    assert [case for case in sent if by_case[case]["status"] == "invalid"] == [
        "warranty-011",
        "warranty-012",
    ]
    assert Counter(record["status"] for record in records) == {"scored": 7, "invalid": 2}
    (alert_line,) = worker.events(NONDETERMINISM)
    assert alert_line["level"] == "error"
    assert alert_line["input_hash"] == conflicting
    assert worker.unparsed() == []

    # EVIDENCE_STORE_URL=redis://localhost:6379/0 evidence-worker alerts  (and show HASH)
    assert alerts.env == show.env == {"EVIDENCE_STORE_URL": DOC_STORE_URL}
    assert alerts.argv == ["evidence-worker", "alerts"]
    assert show.argv == ["evidence-worker", "show", conflicting]
    store_env = {**commands_env, "EVIDENCE_STORE_URL": REDIS_URL}
    listed, shown = (finish(process) for process in [run(alerts, store_env), run(show, store_env)])

    assert listed.code == runs.NONDETERMINISM, listed.stderr
    assert without_progress(listed.stderr) == [
        f"alerts: 1 nondeterminism, 0 contract drift (store {REDIS_URL})"
    ]
    (alert,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert alert["input_hash"] == conflicting
    assert alert["decision"] == "kept_first"
    assert (alert["first"]["case_id"], alert["observed"]["case_id"]) == (
        "refund-002",
        "refund-002-retry",
    )
    assert alert["first"]["task_id"] == first["task_id"]
    assert alert["observed"]["task_id"] == retry["task_id"]

    assert shown.code == runs.OK, shown.stderr
    history = History.model_validate_json(shown.stdout)
    assert history.input_hash == conflicting
    assert [attempt.case_id for attempt in history.attempts] == [
        "refund-002",
        "refund-002-rerun",
        "refund-002-retry",
    ]
    assert history.total_attempts == 3
    # The first outcome is unchanged: the first attempt, as its record reported it.
    assert history.first == history.attempts[0]
    assert (history.first.value, history.first.reason) == (first["value"], first["reason"])
    assert history.first.task_id == first["task_id"]
    observed = history.attempts[2]
    assert (observed.value, observed.reason) == (retry["observed_value"], retry["observed_reason"])
    assert observed.supported_claim_ids == json.loads(reruns[2])["supported_claim_ids"]
