"""Drain throughput of noop, score and score_batch, as ratios against the no-op floor.

Each phase starts its own worker subprocess with the same settings, warms it up on a few tasks
of the phase, pre-fills its own queue, points the worker at it and times the drain from the
first message taken to the last one acknowledged: steady state, without start-up. Ratios within
one run are what we report; absolute numbers depend on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from prometheus_client.parser import text_string_to_metric_families

from contracts import AttributionResult
from worker.bench.launch import worker_command
from worker.constants import NOOP, SCORE, SCORE_BATCH
from worker.observability.metrics import MULTIPROC_ENV
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores import open_store
from worker.upstream.publishing import NOTE_CHUNK, Outgoing, ledger_entry, new_task_id, send_noted

PHASES = ("noop", "score", "batch")
RATIOS = {"ratio_score_to_noop": ("score", "noop"), "ratio_batch_to_score": ("batch", "score")}
TASKS = {"noop": NOOP, "score": SCORE, "batch": SCORE_BATCH}
DEFAULT_BENCH_BROKER = "redis://localhost:6379/15"
MAX_QUEUED_MESSAGES = 50_000  # the feeder keeps at most this many messages waiting
LATENCY_RECORD_LIMIT = 200_000  # beyond this, records go to /dev/null (memory runs)
POLL_SECONDS = 0.01  # ±10 ms on drains of seconds; rarer checks leave the broker to the worker
RSS_SAMPLE_SECONDS = 0.25
WARM_UP_TASKS_PER_PROCESS = 8  # twice the prefetch: every pool process has run tasks before timing
WORKER_START_SECONDS = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class PhaseResult:
    """One phase's drain: throughput, latency from publish to record, and memory."""

    phase: str
    messages: int
    seconds: float
    msgs_per_s: float
    us_per_msg: float
    p50_latency_ms: float | None
    p99_latency_ms: float | None
    peak_rss_mb: float
    # What the phase added to a Redis store (None for SQLite): bytes of its keys (MEMORY
    # USAGE) and the servers' CPU (INFO cpu), per message; on the broker's own Redis the CPU
    # includes the broker's.
    store_bytes_per_msg: float | None = None
    store_cpu_us_per_msg: float | None = None
    # CPU the worker's main process (consumer, acks) and its pool children (scoring, the
    # store's writes, the lines) used over the drain, per message: beside throughput, what a
    # change cost where, less at the mercy of the machine's other load than time.
    worker_main_cpu_us_per_msg: float | None = None
    worker_pool_cpu_us_per_msg: float | None = None
    # With --metrics: what the worker's /metrics counted by the end (warm-up included), so a
    # run shows its counters were on: messages by any label, re-grades by any grader.
    metrics_messages: float | None = None
    metrics_regrades: float | None = None
    rss_samples_mb: list[float] = field(default_factory=list, repr=False)
    rss_samples_by_process: list[dict[int, float]] = field(default_factory=list, repr=False)


def sample_messages(count: int, *, seed: int = 7) -> Iterator[dict[str, Any]]:
    """Realistic, varied AttributionResults: ~85% unique valid, ~8% repeats of earlier inputs
    (some judged differently: conflicts), ~5% metric-invalid, ~2% schema-invalid. Each cites
    its supported claims in retrieved documents and every other missing claim in a document
    that was not retrieved, so triage (SPEC §9) has citations to read."""
    rng = random.Random(seed)
    claims = [f"claim-{n}" for n in range(12)]
    produced: list[dict[str, Any]] = []
    for index in range(count):
        roll = rng.random()
        if roll < 0.08 and produced:
            message = dict(rng.choice(produced))
            if rng.random() < 0.25:
                required = message["required_claim_ids"]
                message["supported_claim_ids"] = required[: rng.randint(0, len(required))]
        else:
            required = rng.sample(claims, rng.randint(2, 8))
            supported = required[: rng.randint(0, len(required))]
            contexts = [
                {"document_id": f"doc-{rng.randint(0, 999)}", "text": "passage " * 60}
                for _ in range(3)
            ]
            missing = [claim for claim in required if claim not in supported]
            citations = [
                {
                    "claim_id": claim,
                    "document_id": contexts[n % 3]["document_id"],
                    "answer_span": [10 * n, 10 * n + 9],
                }
                for n, claim in enumerate(supported)
            ] + [
                {"claim_id": claim, "document_id": f"moved-{index}", "answer_span": [0, 9]}
                for claim in missing[::2]
            ]
            message = {
                "schema_version": 1,
                "case_id": f"bench-{index}",
                "contract_version": rng.choice(["support-faq/2026-10", "payments/2026-11"]),
                "required_claim_ids": required,
                "supported_claim_ids": supported,
                "answer": f"Answer {index}: " + " ".join(rng.choices(claims, k=40)),
                "contexts": contexts,
                "citations": citations,
                "grader": {
                    "name": "claim-attributor",
                    "version": "3.2.0",
                    "model": "gpt-4o-mini",
                    "prompt": "Say which required claims the contexts support.",
                    "params": {"temperature": 0.0},
                },
            }
            if roll > 0.98:
                message["unexpected_field"] = True
            elif roll > 0.93:
                message["supported_claim_ids"] = [*supported, "claim-from-old-set"]
            produced.append(message)
        message = {**message, "case_id": f"bench-{index}"}
        yield message


class Rss:
    """Resident memory of a process and its children, from /proc (Linux)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def _pids(self) -> list[int]:
        pids, pending = [], [self.pid]
        while pending:
            pid = pending.pop()
            pids.append(pid)
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            pending.extend(int(child) for child in children)
        return pids

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds (user and system) each process of the worker has used so far."""
        used: dict[int, float] = {}
        for pid in self._pids():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            # Fields after the command name (which may hold spaces) in parentheses; utime and
            # stime are the 14th and 15th of the whole line.
            fields = stat[stat.rindex(")") + 2 :].split()
            used[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        return used

    def by_process(self) -> dict[int, float]:
        """MB resident per process of the worker (main process and pool children)."""
        sizes: dict[int, float] = {}
        for pid in self._pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        sizes[pid] = int(line.split()[1]) / 1024
            except OSError:
                continue
        return sizes


@dataclass
class BenchConfig:
    """What one bench run measures, and how the worker under test is started."""

    messages: int = 20_000
    batch_size: int = 100
    repeat: int = 1
    pool: str = "prefork"
    concurrency: int = 2
    broker_url: str = DEFAULT_BENCH_BROKER
    phases: tuple[str, ...] = PHASES
    store_url: str | None = None  # None: the broker's Redis
    # Another checkout whose worker is run on this checkout's messages (None: this one's).
    worker_checkout: Path | None = None
    # Workers export Prometheus metrics as deploy/ runs them (a port and a multiprocess
    # directory): the counters' cost on the hot path, measured against a run without.
    metrics: bool = False


class Bench:
    """Runs the phases against one broker/store, cleaning up its queues and keys after."""

    def __init__(self, config: BenchConfig, *, progress: Callable[[str], None]) -> None:
        self.config = config
        self.progress = progress
        self.run_id = uuid.uuid4().hex[:8]
        self.prefix = f"bench-{self.run_id}"
        self.settings = Settings(
            broker_url=config.broker_url, store_url=config.store_url, key_prefix=self.prefix
        )
        self.app = create_app(self.settings)
        self.messages = list(sample_messages(min(config.messages, MAX_QUEUED_MESSAGES)))
        self.published_at: dict[str, float] = {}
        self._metrics_dirs: list[Path] = []
        self._metrics_port: int | None = None
        self._redis = (
            redis.Redis.from_url(config.broker_url)
            if config.broker_url.startswith(("redis://", "rediss://"))
            else None
        )
        # The workers' store, which keeps the publish ledger (the settings' store URL).
        self.ledger = open_store(self.settings.result_store_url, self.settings)

    def run(self) -> list[PhaseResult]:
        results = []
        try:
            for repetition in range(1, self.config.repeat + 1):
                for phase in self.config.phases:
                    self.progress(f"bench: {phase} run {repetition}/{self.config.repeat}")
                    results.append(self._phase(phase, f"{self.prefix}-{phase}-{repetition}"))
        finally:
            self._cleanup()
        return results

    def _payloads(self, phase: str, start: int, count: int) -> Iterator[Any]:
        """`count` messages from position `start`, stamped with produced_at = now."""
        pool = self.messages
        if phase == "batch":
            size = self.config.batch_size
            for offset in range(start, start + count, size):
                n = min(size, start + count - offset)
                yield [self._stamped(pool, offset + i) for i in range(n)]
            return
        for index in range(start, start + count):
            yield self._stamped(pool, index)

    def _stamped(self, pool: list[dict[str, Any]], index: int) -> str:
        """One message as its JSON text, stamped: what `publish` and the client send."""
        case_id = f"bench-{index}"
        now = time.time()
        if len(self.published_at) < LATENCY_RECORD_LIMIT:
            self.published_at[case_id] = now
        produced_at = datetime.fromtimestamp(now, UTC).isoformat()
        return json.dumps(
            {**pool[index % len(pool)], "case_id": case_id, "produced_at": produced_at}
        )

    def _publish(self, phase: str, queue: str, start: int, count: int) -> None:
        """As `publish` sends: scoring tasks noted in the ledger first (which the worker's
        record then closes), a chunk at a time; no-op tasks bare, as the floor."""
        ledger = self.ledger if phase != "noop" else None
        with self.app.producer_or_acquire() as producer:
            chunk: list[Outgoing] = []
            for payload in self._payloads(phase, start, count):
                chunk.append(self._outgoing(phase, payload))
                if len(chunk) * (self.config.batch_size if phase == "batch" else 1) >= NOTE_CHUNK:
                    send_noted(self.app, chunk, queue=queue, ledger=ledger, producer=producer)
                    chunk = []
            send_noted(self.app, chunk, queue=queue, ledger=ledger, producer=producer)

    def _outgoing(self, phase: str, payload: Any) -> Outgoing:
        """A task and the ledger entries of its messages that `publish` would send (the
        schema-invalid ones it would refuse have none)."""
        task_id = new_task_id()
        texts = payload if isinstance(payload, list) else [payload]
        now = datetime.now(UTC)
        entries = []
        for position, text in enumerate(texts):
            try:
                message = AttributionResult.model_validate_json(text)
            except ValueError:
                continue
            entries.append(ledger_entry(task_id, position, message, text, now=now))
        return Outgoing(task_id, TASKS[phase], payload, entries)

    def _queue_size(self, queue: str) -> int:
        """Tasks waiting in `queue` (unacked ones not included)."""
        if self._redis is not None:
            # kombu keeps a Redis queue as a list named after it (we publish no priorities).
            return int(self._redis.llen(queue))
        with self.app.connection_for_read() as connection:
            try:
                return int(connection.default_channel.queue_declare(queue=queue, passive=True)[1])
            except connection.channel_errors:
                return 0

    def _phase(self, phase: str, queue: str) -> PhaseResult:
        total = self.config.messages
        keep_records = total <= LATENCY_RECORD_LIMIT and phase != "noop"
        with tempfile.NamedTemporaryFile("w+b", suffix=".jsonl", delete=False) as out:
            records_path = Path(out.name)
        node = f"{queue}@bench"
        worker = self._start_worker(
            f"{queue}-warm-up", node, records_path if keep_records else None
        )
        metrics_port = self._metrics_port
        rss = Rss(worker.pid)
        samples: list[dict[int, float]] = []
        try:
            self._warm_up(phase, f"{queue}-warm-up", total)
            before = self._store_usage()
            cpu_before = rss.cpu_seconds()
            prefill = min(total, MAX_QUEUED_MESSAGES)
            self._publish(phase, queue, 0, prefill)
            self._consume(node, queue)
            feeder = self._feeder(phase, queue, prefill, total)
            started, finished = self._drain(queue, phase, total, rss, samples)
            if feeder is not None:
                feeder.join()
            after = self._store_usage()
            cpu_after = rss.cpu_seconds()
            counted = self._scrape(metrics_port) if metrics_port else None
        finally:
            self._stop_worker(worker)
        seconds = max(finished - started, 1e-9)
        grown = (
            None
            if before is None or after is None
            else ((after[0] - before[0]) / total, (after[1] - before[1]) / total * 1e6)
        )
        main_cpu, pool_cpu = _cpu_used(worker.pid, cpu_before, cpu_after)
        latencies = self._latencies(records_path) if keep_records else []
        records_path.unlink(missing_ok=True)
        return PhaseResult(
            phase=phase,
            messages=total,
            seconds=round(seconds, 3),
            msgs_per_s=round(total / seconds, 1),
            us_per_msg=round(seconds / total * 1e6, 1),
            p50_latency_ms=_percentile(latencies, 50),
            p99_latency_ms=_percentile(latencies, 99),
            peak_rss_mb=round(max((sum(s.values()) for s in samples), default=0.0), 1),
            store_bytes_per_msg=None if grown is None else round(grown[0], 1),
            store_cpu_us_per_msg=None if grown is None else round(grown[1], 2),
            worker_main_cpu_us_per_msg=round(main_cpu / total * 1e6, 1),
            worker_pool_cpu_us_per_msg=round(pool_cpu / total * 1e6, 1),
            metrics_messages=None if counted is None else counted[0],
            metrics_regrades=None if counted is None else counted[1],
            rss_samples_mb=[round(sum(sample.values()), 1) for sample in samples],
            rss_samples_by_process=samples,
        )

    def _warm_up(self, phase: str, queue: str, start: int) -> None:
        """Run a few tasks of the phase through the new worker and wait for their acks, so the
        timed drain starts on a worker that is up, connected and past its first tasks."""
        tasks = WARM_UP_TASKS_PER_PROCESS * self.config.concurrency
        per_task = self.config.batch_size if phase == "batch" else 1
        self._publish(phase, queue, start, tasks * per_task)
        self.published_at.clear()  # warm-up records are not part of the latency figures
        deadline = time.monotonic() + WORKER_START_SECONDS
        while self._queue_size(queue) or (self._redis is not None and self._redis.hlen("unacked")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench: {phase}: the worker did not start in time")
            time.sleep(POLL_SECONDS)

    def _consume(self, node: str, queue: str) -> None:
        """Point the warm worker at the pre-filled queue (remote control: add_consumer)."""
        replies = self.app.control.add_consumer(
            queue, destination=[node], reply=True, timeout=WORKER_START_SECONDS
        )
        if not replies:
            raise TimeoutError(f"bench: worker {node} did not answer add_consumer")

    def _feeder(self, phase: str, queue: str, sent: int, total: int) -> threading.Thread | None:
        """For runs larger than the queue cap: top the queue up while the worker drains it."""
        if sent >= total:
            return None

        def feed() -> None:
            position = sent
            step = MAX_QUEUED_MESSAGES // 5
            per_task = self.config.batch_size if phase == "batch" else 1
            while position < total:
                if self._queue_size(queue) * per_task < MAX_QUEUED_MESSAGES - step:
                    count = min(step, total - position)
                    self._publish(phase, queue, position, count)
                    position += count
                else:
                    time.sleep(0.05)

        thread = threading.Thread(target=feed, name="bench-feeder", daemon=True)
        thread.start()
        return thread

    def _drain(
        self, queue: str, phase: str, total: int, rss: Rss, samples: list[dict[int, float]]
    ) -> tuple[float, float]:
        """(first take, last ack): from the queue shrinking to it and the unacked set emptying."""
        client = self._redis
        initial = self._queue_size(queue)
        started: float | None = None
        next_sample = 0.0
        deadline = time.monotonic() + max(120.0, total / 50)
        last_report = time.monotonic()
        while time.monotonic() < deadline:
            size = self._queue_size(queue)
            now = time.monotonic()
            if started is None and size < initial:
                started = now
            if started is not None and now >= next_sample:  # steady state only, not start-up
                samples.append(rss.by_process())
                next_sample = now + RSS_SAMPLE_SECONDS
            if now - last_report > 2.0:
                self.progress(f"bench: {phase}: {size} tasks queued")
                last_report = now
            if started is not None and size == 0 and (client is None or not client.hlen("unacked")):
                return started, time.monotonic()
            time.sleep(POLL_SECONDS)
        raise TimeoutError(f"bench: {phase} did not drain in time")

    def _start_worker(self, queue: str, node: str, records: Path | None) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "EVIDENCE_BROKER_URL": self.config.broker_url,
            "EVIDENCE_STORE_URL": self.settings.result_store_url,
            "EVIDENCE_KEY_PREFIX": self.prefix,
            "EVIDENCE_QUEUE": queue,
            "EVIDENCE_LOG_FORMAT": "json",
        }
        env.pop("EVIDENCE_ALERT_WEBHOOK_URL", None)
        env.pop(MULTIPROC_ENV, None)
        env.pop("EVIDENCE_METRICS_PORT", None)
        self._metrics_port = None
        if self.config.metrics:
            self._metrics_port = free_port()
            env["EVIDENCE_METRICS_PORT"] = str(self._metrics_port)
            env[MULTIPROC_ENV] = tempfile.mkdtemp(prefix=f"{self.prefix}-metrics-")
            self._metrics_dirs.append(Path(env[MULTIPROC_ENV]))
        checkout = self.config.worker_checkout
        if checkout is not None:
            env["PYTHONPATH"] = str(checkout)
        command = worker_command(
            queue,
            hostname=node,
            pool=self.config.pool,
            concurrency=self.config.concurrency,
            loglevel="WARNING",
            heartbeat=False,
        )
        stdout = records.open("wb") if records else subprocess.DEVNULL
        return subprocess.Popen(
            command,
            env=env,
            cwd=checkout,
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    @staticmethod
    def _stop_worker(worker: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()

    def _latencies(self, records: Path) -> list[float]:
        """Milliseconds from publish to the record's timestamp, per message."""
        latencies: list[float] = []
        for line in records.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not a record line
            published = self.published_at.get(record.get("case_id") or "")
            if published is None or not record.get("event", "").startswith("evidence_coverage."):
                continue
            recorded = datetime.fromisoformat(record["timestamp"]).timestamp()
            latencies.append((recorded - published) * 1000)
        self.published_at.clear()
        return latencies

    def _store_usage(self) -> tuple[int, float] | None:
        """The run's keys' bytes and the store servers' CPU seconds so far (Redis only)."""
        url = self.settings.result_store_url
        if not url.startswith(("redis://", "rediss://")):
            return None
        used, cpu = 0, 0.0
        servers = store_servers(url)
        # CPU first: the SCAN and MEMORY USAGE pass below is the bench's, not the worker's.
        for server in servers:
            info = server.info("cpu")
            cpu += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
        for server in servers:
            keys = list(server.scan_iter(match=f"{self.prefix}:*", count=1000))
            pipe = server.pipeline(transaction=False)
            for key in keys:
                pipe.memory_usage(key, samples=0)
            used += sum(size or 0 for size in pipe.execute())
            server.close()
        return used, cpu

    @staticmethod
    def _scrape(port: int) -> tuple[float, float]:
        """(messages, re-grades) the worker on `port` exports, summed over their labels."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        messages, regrades = "evidence_coverage_messages_total", "evidence_coverage_regrades_total"
        totals = {messages: 0.0, regrades: 0.0}
        for family in text_string_to_metric_families(text.decode()):
            for sample in family.samples:
                if sample.name in totals:
                    totals[sample.name] += sample.value
        return totals[messages], totals[regrades]

    def _cleanup(self) -> None:
        self.ledger.close()
        for directory in self._metrics_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        client = self._redis
        if client is not None:
            keys = list(client.scan_iter(match=f"{self.prefix}*", count=1000))
            keys += list(client.scan_iter(match=f"*{self.prefix}*", count=1000))
            if keys:
                client.delete(*set(keys))
        store_url = self.settings.result_store_url
        if store_url != self.config.broker_url and store_url.startswith(("redis://", "rediss://")):
            forget_keys(store_url, self.prefix)


def _cpu_used(main: int, before: dict[int, float], after: dict[int, float]) -> tuple[float, float]:
    """CPU seconds between two readings: the main process's, and its children's summed (a
    child that started in between counts from zero)."""
    main_used = after.get(main, 0.0) - before.get(main, 0.0)
    pool_used = sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items() if pid != main)
    return main_used, pool_used


def free_port() -> int:
    """A TCP port free on this host now, for a worker's metrics endpoint."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def store_servers(url: str) -> list[redis.Redis]:
    """A client per server of the store at `url`: its masters on a Redis Cluster."""
    client = redis.Redis.from_url(url)
    client.connection_pool.connection_kwargs["db"] = 0
    if not int(client.info("cluster").get("cluster_enabled", 0)):
        client.close()
        return [redis.Redis.from_url(url)]
    cluster = redis.RedisCluster.from_url(url)
    servers = [
        redis.Redis(host=node.host, port=node.port)
        for node in cluster.get_primaries()  # type: ignore[no-untyped-call]
    ]
    cluster.close()
    client.close()
    return servers


def forget_keys(url: str, prefix: str) -> None:
    """Delete a run's keys on every server of the store (one at a time: a Redis Cluster
    refuses a DEL across slots)."""
    for server in store_servers(url):
        for key in server.scan_iter(match=f"{prefix}:*", count=1000):
            server.delete(key)
        server.close()


def _percentile(values: list[float], pct: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))
    return round(ordered[index], 2)


def rss_growth_pct(samples: list[float]) -> float | None:
    """Growth from the steady state (after the first 10% of samples) to the end."""
    if len(samples) < 10:
        return None
    steady = samples[len(samples) // 10]
    return round((samples[-1] - steady) / steady * 100, 1) if steady else None


def process_rss_growth_pct(samples: list[dict[int, float]]) -> float | None:
    """The largest growth of any one process (a growing child can hide in a flat total)."""
    pids = {pid for sample in samples for pid in sample}
    growths = [rss_growth_pct([sample[pid] for sample in samples if pid in sample]) for pid in pids]
    known = [growth for growth in growths if growth is not None]
    return max(known) if known else None


def summarize(results: list[PhaseResult]) -> dict[str, Any]:
    """Medians over repeats (min/max beside them) and the ratios the targets are stated in."""
    by_phase: dict[str, list[PhaseResult]] = {}
    for result in results:
        by_phase.setdefault(result.phase, []).append(result)
    summary: dict[str, Any] = {}
    for phase, runs in by_phase.items():
        rates = [run.msgs_per_s for run in runs]
        summary[f"{phase}_msgs_per_s"] = round(statistics.median(rates), 1)
        summary[f"{phase}_msgs_per_s_min"] = min(rates)
        summary[f"{phase}_msgs_per_s_max"] = max(rates)
        summary[f"{phase}_us_per_msg"] = round(1e6 / statistics.median(rates), 1)
        summary[f"{phase}_p50_latency_ms"] = runs[-1].p50_latency_ms
        summary[f"{phase}_p99_latency_ms"] = runs[-1].p99_latency_ms
        summary[f"{phase}_peak_rss_mb"] = max(run.peak_rss_mb for run in runs)
        for figure in (
            "store_bytes_per_msg",
            "store_cpu_us_per_msg",
            "worker_main_cpu_us_per_msg",
            "worker_pool_cpu_us_per_msg",
            "metrics_messages",
            "metrics_regrades",
        ):
            values = [value for run in runs if (value := getattr(run, figure)) is not None]
            if values:
                summary[f"{phase}_{figure}"] = round(statistics.median(values), 2)
    for name, (top, bottom) in RATIOS.items():
        if top in by_phase and bottom in by_phase:
            top_runs, bottom_runs = by_phase[top], by_phase[bottom]
            summary[name] = round(summary[f"{top}_msgs_per_s"] / summary[f"{bottom}_msgs_per_s"], 3)
            # Each repetition's own ratio (its phases ran minutes apart, not half an hour):
            # steadier than the ratio of medians when the machine's speed drifts.
            paired = [
                a.msgs_per_s / b.msgs_per_s for a, b in zip(top_runs, bottom_runs, strict=True)
            ]
            summary[f"{name}_paired"] = round(statistics.median(paired), 3)
            summary[f"{name}_paired_min"] = round(min(paired), 3)
            summary[f"{name}_paired_max"] = round(max(paired), 3)
    summary["peak_rss_mb"] = max(run.peak_rss_mb for run in results)
    batch_runs = by_phase.get("batch")
    if batch_runs:
        summary["batch_rss_growth_pct"] = rss_growth_pct(batch_runs[-1].rss_samples_mb)
        summary["batch_rss_growth_pct_worst_process"] = process_rss_growth_pct(
            batch_runs[-1].rss_samples_by_process
        )
    summary["runs"] = [
        {
            key: value
            for key, value in asdict(run).items()
            if key not in {"rss_samples_mb", "rss_samples_by_process"}
        }
        for run in results
    ]
    return summary
