"""Real Celery worker subprocesses for integration tests: start, watch records, kill, clean up.

Test modules re-export its fixtures (`start_worker = worker_harness.start_worker`). Its
factory fixtures clean up after themselves: every worker's whole process group is stopped
(SIGTERM, then SIGKILL), and the broker keys of every queue a test used are flushed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection

from contracts import AttributionResult, input_hash
from contracts.record_models import REJECTED, SCORED
from tests.integration.fault_proxy import FaultProxy
from tests.servers import redis_port
from worker.bench.launch import worker_command
from worker.constants import SCORE
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores.contract import History
from worker.stores.redis.redis_store import RedisStore

ROOT = Path(__file__).resolve().parents[2]
# The Redis of the broker and the store: the machine's, or under pytest-xdist this worker's own.
REDIS_PORT = redis_port()
BROKER_URL = f"redis://127.0.0.1:{REDIS_PORT}/12"
STORE_URL = f"redis://127.0.0.1:{REDIS_PORT}/14"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"
RECORD_EVENTS = (SCORED, REJECTED)
# Generous: the machine may be busy, and a worker imports Ragas before it is ready.
READY_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 5.0
POLL_SECONDS = 0.05
# kombu's Redis transport keeps priority levels in lists named queue + SEP + priority.
PRIORITY_SEP = "\x06\x16"
PIDBOX_BINDINGS = "_kombu.binding.celery.pidbox"

Line = dict[str, Any]


@dataclass
class Worker:
    """One `celery worker` subprocess (leader of its own process group) and its output files."""

    process: subprocess.Popen[bytes]
    queue: str
    hostname: str  # unique, so remote control (inspect) can address this worker alone
    stdout_path: Path
    stderr_path: Path
    env: dict[str, str]
    _offset: int = field(default=0, repr=False)
    _lines: list[Line] = field(default_factory=list, repr=False)
    _unparsed: list[str] = field(default_factory=list, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def lines(self) -> list[Line]:
        """Every complete JSON line on stdout so far (the file is read incrementally)."""
        with self.stdout_path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        for raw in chunk[:end].splitlines():
            text = raw.decode("utf-8", "replace")
            try:
                line = json.loads(text)
            except ValueError:
                self._unparsed.append(text)
                continue
            if isinstance(line, dict):
                self._lines.append(line)
            else:
                self._unparsed.append(text)
        return list(self._lines)

    def unparsed(self) -> list[str]:
        """stdout lines that were not JSON objects (mixed formats: there should be none)."""
        self.lines()
        return list(self._unparsed)

    def events(self, *names: str) -> list[Line]:
        """JSON lines whose event is one of `names`, in output order."""
        return [line for line in self.lines() if line.get("event") in names]

    def records(self) -> list[Line]:
        """The one-per-message records: scored and rejected."""
        return self.events(*RECORD_EVENTS)

    def output(self) -> str:
        """Everything the worker wrote, stdout then stderr."""
        return self.stdout_path.read_text("utf-8", "replace") + self.stderr_path.read_text(
            "utf-8", "replace"
        )

    def wait_until(
        self, condition: Callable[[list[Line]], bool], *, timeout: float, what: str
    ) -> list[Line]:
        """Poll stdout until `condition(lines)` holds; fail with a summary at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if condition(lines):
                return lines
            if not self.alive():
                pytest.fail(f"worker exited ({self.process.returncode}) before {what}\n{self}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{self}")
            time.sleep(POLL_SECONDS)

    def wait_for(
        self, count: int, *, events: Iterable[str] = RECORD_EVENTS, timeout: float = 60.0
    ) -> list[Line]:
        """Wait until at least `count` lines with these events exist; return all of them."""
        wanted = set(events)
        lines = self.wait_until(
            lambda lines: sum(line.get("event") in wanted for line in lines) >= count,
            timeout=timeout,
            what=f"{count} lines with events {sorted(wanted)}",
        )
        return [line for line in lines if line.get("event") in wanted]

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Wait for Celery's own 'celery@host ready.' line."""
        self.wait_until(
            lambda lines: any(
                line.get("logger") == "celery.apps.worker"
                and str(line.get("event", "")).endswith(" ready.")
                for line in lines
            ),
            timeout=timeout,
            what="the worker to be ready",
        )

    def child_pids(self) -> list[int]:
        """PIDs of the pool children (whichever thread of the main process forked them)."""
        pids: set[int] = set()
        for children in Path(f"/proc/{self.pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                pids.update(int(pid) for pid in children.read_text().split())
        return sorted(pids)

    def kill(self) -> None:
        """kill -9 the main process and every pool child at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_SECONDS)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """SIGTERM (warm shutdown), then SIGKILL the whole group whatever state it is in."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)

    def __str__(self) -> str:
        """Counts per event and the tail of stderr, for failure messages."""
        counts = Counter(str(line.get("event"))[:100] for line in self._lines)
        stderr = self.stderr_path.read_text("utf-8", "replace")[-2000:]
        return (
            f"worker pid {self.pid} on {self.queue}: events {dict(counts)}\n"
            f"unparsed: {self._unparsed[-3:]}\nstderr tail: {stderr}"
        )


@dataclass
class Launcher:
    """Starts workers writing to one store prefix; stop_all() ends every one of them."""

    directory: Path
    key_prefix: str
    started: list[Worker] = field(default_factory=list)

    def start(
        self,
        queue: str,
        *,
        broker_url: str = BROKER_URL,
        store_url: str = STORE_URL,
        pool: str = "prefork",
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        command: Sequence[str] | None = None,
        options: Sequence[str] = (),
    ) -> Worker:
        """Start a worker on `queue`; `command` replaces the harness's own command line (which
        sets a unique hostname, pool and concurrency) with a caller's, the Procfile's say;
        `options` are added to the harness's own command line."""
        name = f"worker-{len(self.started) + 1}"
        hostname = f"{queue}-{name}@{socket.gethostname()}"
        worker_env = {
            **{
                key: value
                for key, value in os.environ.items()
                if not key.startswith("EVIDENCE_") and key != "MIN_EVIDENCE_COVERAGE"
            },
            "EVIDENCE_BROKER_URL": broker_url,
            "EVIDENCE_STORE_URL": store_url,
            "EVIDENCE_KEY_PREFIX": self.key_prefix,
            "EVIDENCE_QUEUE": queue,
            "EVIDENCE_LOG_FORMAT": "json",
            **(env or {}),
        }
        stdout_path = self.directory / f"{name}.stdout"
        stderr_path = self.directory / f"{name}.stderr"
        with stdout_path.open("ab") as stdout, stderr_path.open("ab") as stderr:
            process = subprocess.Popen(
                list(command)
                if command is not None
                else worker_command(
                    queue,
                    hostname=hostname,
                    pool=pool,
                    concurrency=concurrency,
                    heartbeat=False,
                    options=options,
                ),
                cwd=ROOT,
                env=worker_env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        worker = Worker(process, queue, hostname, stdout_path, stderr_path, worker_env)
        self.started.append(worker)
        return worker

    def stop_all(self) -> None:
        """Stop every worker, then flush their queues (a warm shutdown requeues what it held)."""
        for worker in self.started:
            worker.stop()
        for worker in self.started:
            broker_url = worker.env["EVIDENCE_BROKER_URL"]
            if broker_url.startswith("redis://"):
                flush_queue(broker_url, worker.queue)


def flush_queue(broker_url: str, queue: str) -> None:
    """Delete a queue's lists and bindings on a Redis broker, and its unacked messages."""
    client = redis.Redis.from_url(broker_url, socket_connect_timeout=2, socket_timeout=5)
    try:
        names = [queue, *(f"{queue}{PRIORITY_SEP}{priority}" for priority in range(1, 10))]
        client.delete(*names, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        client.zrem("_kombu.binding_deadlines", queue)
        # A killed worker leaves its remote-control binding; its hostname names the queue.
        for member in client.smembers(PIDBOX_BINDINGS):
            if queue.encode() in member:
                client.srem(PIDBOX_BINDINGS, member)
        for tag, value in client.hscan_iter("unacked"):
            with contextlib.suppress(ValueError, TypeError, IndexError):
                if json.loads(value)[2] == queue:
                    client.hdel("unacked", tag)
                    client.zrem("unacked_index", tag)
    except redis.ConnectionError:
        pass  # a throwaway server that is already gone has nothing left to flush
    finally:
        client.close()


def unacked_task_ids(broker_url: str, queue: str) -> list[str]:
    """Task ids of `queue`'s messages handed to a worker and not acknowledged (Redis broker)."""
    client = redis.Redis.from_url(broker_url)
    try:
        entries = [json.loads(value) for _, value in client.hscan_iter("unacked")]
    finally:
        client.close()
    return [payload["headers"]["id"] for payload, _, routing_key in entries if routing_key == queue]


def unacked_count(broker_url: str, queue: str) -> int:
    return len(unacked_task_ids(broker_url, queue))


def queue_length(broker_url: str, queue: str) -> int:
    """Messages waiting in `queue` (every priority level) on a Redis broker."""
    client = redis.Redis.from_url(broker_url)
    try:
        names = [queue, *(f"{queue}{PRIORITY_SEP}{priority}" for priority in range(1, 10))]
        return sum(client.llen(name) for name in names)
    finally:
        client.close()


def send_scores(app: Celery, queue: str, messages: Sequence[Any]) -> list[str]:
    """One evidence_coverage.score task per message, over one producer; returns task ids."""
    with app.producer_or_acquire() as producer:
        return [
            app.send_task(SCORE, args=[message], queue=queue, producer=producer).id
            for message in messages
        ]


def publish_raw(
    app: Celery,
    queue: str,
    body: bytes,
    *,
    task: str = SCORE,
    task_id: str | None = None,
    content_type: str = "application/json",
) -> str:
    """Publish `body` as is, under Celery's own task headers: what a foreign producer sends.

    On Redis it travels base64-encoded, kombu's default (our own app sends JSON text): any
    bytes fit, and the worker must read both encodings.
    """
    task_id = task_id or str(uuid.uuid4())
    envelope = app.amqp.create_task_message(task_id, task, [], {})
    with app.connection_for_write(transport_options={"body_encoding": "base64"}) as connection:
        connection.Producer().publish(
            body,
            exchange="",
            routing_key=queue,
            headers=envelope.headers,
            content_type=content_type,
            content_encoding="utf-8",
            **envelope.properties,
        )
    return task_id


def hash_of(message: dict[str, Any]) -> str:
    return input_hash(AttributionResult.model_validate(message))


def check_first_outcomes(
    store: RedisStore, messages: Iterable[dict[str, Any]], records: Iterable[Line]
) -> dict[str, History]:
    """Every message's hash has one first outcome that no later attempt replaced.

    At most one task reports a `miss` per hash (its record may be lost with a killed process,
    or repeated by a redelivery of that same task, which the store recognises as its own
    write), it names the stored first attempt, and every record for the hash reports that
    first outcome. Returns the histories by hash.
    """
    by_hash: dict[str, list[Line]] = defaultdict(list)
    for record in records:
        if record.get("event") == SCORED:
            by_hash[record["input_hash"]].append(record)
    histories: dict[str, History] = {}
    for message in messages:
        key = hash_of(message)
        history = store.history(key)
        assert history is not None, f"{message['case_id']}: no outcome recorded for {key}"
        assert history.attempts[0] == history.first, f"{key}: the first attempt was replaced"
        misses = [record for record in by_hash[key] if record["cache"] == "miss"]
        missing_tasks = {record["task_id"] for record in misses}
        assert len(missing_tasks) <= 1, f"{key}: {len(missing_tasks)} tasks each saw an empty slot"
        if misses:
            assert misses[0]["task_id"] == history.first.task_id
        for record in by_hash[key]:
            assert (record["value"], record["reason"]) == (
                history.first.value,
                history.first.reason,
            )
        histories[key] = history
    return histories


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    """A throwaway redis-server on its own port, with no persistence: killing it loses all."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    options: Sequence[str] = ()  # more redis-server arguments (--maxmemory 2mb, say)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        with (self.directory / f"redis-{self.port}.log").open("ab") as log:
            self.process = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--dir",
                    str(self.directory),
                    *self.options,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                with contextlib.suppress(redis.ConnectionError):
                    client.ping()
                    return
                if time.monotonic() > deadline:
                    pytest.fail(f"redis-server on port {self.port} did not start")
                time.sleep(POLL_SECONDS)
        finally:
            client.close()

    def kill(self) -> None:
        """kill -9: everything only in this server's memory is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_SECONDS)


@pytest.fixture
def make_queue() -> Iterator[Callable[..., str]]:
    """Factory: a fresh queue name; its broker keys are flushed at teardown."""
    made: list[tuple[str, str]] = []

    def make(broker_url: str = BROKER_URL) -> str:
        name = f"test-queue-{uuid.uuid4().hex[:10]}"
        made.append((broker_url, name))
        return name

    yield make
    for broker_url, name in made:
        if broker_url.startswith("redis://"):
            flush_queue(broker_url, name)


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue of this test's own on the Redis broker (DB 12); flushed at teardown."""
    name = f"test-queue-{uuid.uuid4().hex[:10]}"
    yield name
    flush_queue(BROKER_URL, name)


@pytest.fixture
def start_worker(tmp_path: Path, key_prefix: str) -> Iterator[Callable[..., Worker]]:
    """Factory: start a worker subprocess (see Launcher.start); all are stopped at teardown."""
    launcher = Launcher(tmp_path, key_prefix)
    yield launcher.start
    launcher.stop_all()


@pytest.fixture
def publisher() -> Iterator[Callable[..., Celery]]:
    """Factory: a Celery app publishing to `broker_url`; closed at teardown."""
    apps: list[Celery] = []

    def make(broker_url: str = BROKER_URL) -> Celery:
        app = create_app(Settings(broker_url=broker_url))
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture
def store(key_prefix: str) -> Iterator[RedisStore]:
    """The store the harness's workers write to: DB 14 under this test's prefix."""
    opened = RedisStore.from_url(STORE_URL, prefix=key_prefix)
    yield opened
    opened.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A throwaway redis-server on a free port; killed at teardown."""
    server = RedisServer(port=free_port(), directory=tmp_path)
    server.start()
    yield server
    server.kill()


# test_rabbitmq.py restarts the machine's RabbitMQ, which cut the connection of a TLS worker of
# another xdist process (it logged "Connected to" twice and its test failed): the modules that
# use RabbitMQ take turns, a module at a time, across every pytest process on the machine.
RABBITMQ_LOCK = Path("/tmp/evidence-coverage-tests-rabbitmq.lock")


@pytest.fixture(scope="module", autouse=True)
def rabbitmq_turn() -> Iterator[None]:
    """Imported into a module (`rabbitmq_turn = harness.rabbitmq_turn`): its tests hold the
    machine's RabbitMQ alone, from before its first fixture to after its last."""
    with RABBITMQ_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.fixture
def amqp_queue() -> Iterator[str]:
    """A queue of this test's own on RabbitMQ; it and its exchange are deleted afterwards."""
    check_rabbitmq()
    name = f"test-queue-{uuid.uuid4().hex[:10]}"
    yield name
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        channel = connection.default_channel
        channel.queue_delete(name)
        channel.exchange_delete(name)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    """A fault proxy in front of the shared Redis; requested before start_worker, so it
    outlives the workers that use it."""
    started = FaultProxy(REDIS_PORT, lifetime=240).start()
    yield started
    started.stop()


def scored_cases(lines: list[Line]) -> set[str]:
    """The case IDs of the `scored` records among `lines`."""
    return {str(line.get("case_id")) for line in lines if line.get("event") == SCORED}


def check_rabbitmq() -> None:
    """Fail loudly when RabbitMQ is missing: CI must never turn these tests into skips."""
    try:
        with Connection(AMQP_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as error:  # any failure to connect means the same here
        pytest.fail(f"these tests need RabbitMQ at {AMQP_URL}: {error!r}", pytrace=False)
