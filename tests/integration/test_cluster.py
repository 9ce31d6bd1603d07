"""The store on a real Redis Cluster (3 masters, 3 replicas, started by the tests): a real
worker, a master killed mid-stream, a slot migration mid-stream, a worker that dies between
the record's steps, and the configurations the store refuses.

The store suite (store_factories.make_store and the alert, dead-letter and drift fixtures) runs
every store case on the cluster too; these are the cases only a cluster has.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from contracts.record_models import REJECTED
from tests import factories
from tests.bad_input import clean_env
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import MessageFactory, all_scored, distinct
from tests.integration.redis_cluster import Cluster, free_ports, running_cluster
from tests.integration.worker_harness import (
    REDIS_PORT,
    ROOT,
    Line,
    Worker,
    check_first_outcomes,
    send_scores,
)
from worker.bench.launch import worker_command
from worker.constants import SCORE_BATCH
from worker.errors import TransientError
from worker.stores import LedgerEntry
from worker.stores.redis.redis_cluster import RedisClusterStore
from worker.stores.redis.redis_store import RECORD_LUA

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
FUTURE = datetime(2100, 1, 1, tzinfo=UTC)
THREE = ["refund-window", "refund-method", "support-channel"]
BATCH = 50
PACE_S = 0.05  # between two published batches: ~1,000 messages a second


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own: the test breaks it (kills a master, moves slots)."""
    with running_cluster() as cluster:
        yield cluster


def cluster_store(cluster: Cluster, prefix: str) -> RedisClusterStore:
    return RedisClusterStore.from_url(cluster.url, prefix=prefix)


def on_cluster(cluster: Cluster, prefix: str) -> dict[str, str]:
    return {"EVIDENCE_STORE_URL": cluster.url, "EVIDENCE_KEY_PREFIX": prefix}


def scored_by_case(lines: list[Line]) -> dict[str, list[Line]]:
    found: dict[str, list[Line]] = {}
    for line in lines:
        if line.get("event") == "evidence_coverage.scored":
            found.setdefault(line["case_id"], []).append(line)
    return found


def send_batches(app: Celery, queue: str, messages: list[dict[str, Any]]) -> None:
    with app.producer_or_acquire() as producer:
        for start in range(0, len(messages), BATCH):
            batch = messages[start : start + BATCH]
            app.send_task(SCORE_BATCH, args=[batch], queue=queue, producer=producer)


def rerun_is_all_hits(
    first: Worker,
    start_worker: Callable[..., Worker],
    queue: str,
    app: Celery,
    env: dict[str, str],
    messages: list[dict[str, Any]],
) -> list[Line]:
    """A second worker scores the same messages again: every one is a hit on its first
    outcome (none was lost, none replaced); returns its records. The first worker stops: the
    second has the queue to itself."""
    first.stop()
    again = start_worker(queue, env=env)
    send_batches(app, queue, messages)
    again.wait_until(all_scored(messages), timeout=180, what="the re-run scored")
    records = again.records()
    assert sorted({line["cache"] for line in records}) == ["hit"]
    assert [line for line in records if line["event"] == REJECTED] == []
    return records


@pytest.mark.timeout(300)
def test_a_worker_on_the_cluster_records_every_message_once_over_every_master(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    redis_cluster: Cluster,
    cluster_prefix: str,
    message_dict: MessageFactory,
) -> None:
    """Every message scored once, its first outcome kept; re-runs are hits; the keys are on
    all three masters; the start line names the cluster."""
    messages = distinct(message_dict, "cluster", 300)
    env = on_cluster(redis_cluster, cluster_prefix)
    worker = start_worker(queue, env=env)
    app = publisher()
    ids = send_scores(app, queue, messages) + send_scores(app, queue, messages[:30])
    worker.wait_ready()
    worker.wait_until(
        lambda lines: (
            len(scored_by_case(lines)) == 300
            and sum(map(len, scored_by_case(lines).values())) == 330
        ),
        timeout=180,
        what="330 records",
    )

    records = worker.records()
    assert sorted(line["task_id"] for line in records) == sorted(ids)
    assert sorted(line["cache"] for line in records) == ["hit"] * 30 + ["miss"] * 300
    (starting,) = worker.events("evidence_coverage.worker_starting")
    assert starting["store"] == f"{redis_cluster.url} (Redis Cluster, 3 masters)"
    store = cluster_store(redis_cluster, cluster_prefix)
    check_first_outcomes(store, messages, records)
    assert store.alerts() == []
    held = [
        redis.Redis(port=node.port).eval(
            "return #redis.call('KEYS', ARGV[1])", 0, f"{cluster_prefix}:*"
        )
        for node in redis_cluster.masters()
    ]
    assert len(held) == 3
    assert min(held) > 0, held
    store.close()


class Stream:
    """Publishes batches of new messages, one every PACE_S, from a thread, until stopped: a
    fault can then land while the worker writes, however fast it is."""

    def __init__(self, app: Celery, queue: str, message_dict: MessageFactory, tag: str) -> None:
        self.app, self.queue, self.message_dict, self.tag = app, queue, message_dict, tag
        self.sent: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        with self.app.producer_or_acquire() as producer:
            while not self._stop.is_set():
                batch = distinct(self.message_dict, f"{self.tag}-{len(self.sent)}", BATCH)
                self.app.send_task(SCORE_BATCH, args=[batch], queue=self.queue, producer=producer)
                self.sent += batch
                time.sleep(PACE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def scored_during(lines: list[Line], start: datetime, end: datetime) -> int:
    """Records whose line was written between `start` and `end`."""
    return sum(
        1
        for line in lines
        if line.get("event") == "evidence_coverage.scored"
        and start <= datetime.fromisoformat(line["timestamp"]) <= end
    )


@pytest.mark.timeout(420)
def test_a_master_killed_mid_stream_loses_no_acknowledged_outcome(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    own_cluster: Cluster,
    message_dict: MessageFactory,
) -> None:
    """kill -9 of a master while the worker writes: its replica takes over, every message is
    recorded, and a re-run of the same messages is all hits (no first outcome lost or
    replaced), with no alert."""
    prefix = "kill"
    env = on_cluster(own_cluster, prefix)
    worker = start_worker(queue, env={**env, "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "60"})
    app = publisher()
    worker.wait_ready()
    with Stream(app, queue, message_dict, "master-kill") as stream:
        worker.wait_until(
            lambda lines: len(scored_by_case(lines)) >= 300, timeout=120, what="300 scored"
        )
        own_cluster.kill(own_cluster.masters()[0])
        killed_at = datetime.now(UTC)
        own_cluster.wait_ok()
        worker.wait_until(
            lambda lines: scored_during(lines, killed_at, datetime.now(UTC)) >= 300,
            timeout=120,
            what="300 scored after the failover",
        )
    messages = stream.sent
    worker.wait_until(all_scored(messages), timeout=240, what="every message scored")

    records = worker.records()
    assert [line for line in records if line["event"] == REJECTED] == []
    assert len(own_cluster.masters()) == 3
    store = cluster_store(own_cluster, prefix)
    check_first_outcomes(store, messages, records)
    # The killed node was the one the URL named: a new worker is given a live one.
    rerun_is_all_hits(worker, start_worker, queue, app, on_cluster(own_cluster, prefix), messages)
    assert store.alerts() == []
    store.close()


def reshard(cluster: Cluster, slots: int) -> subprocess.CompletedProcess[str]:
    """Move `slots` slots from the first master to the second, keys and all."""
    source, target = cluster.masters()[:2]
    return subprocess.run(
        [
            "redis-cli",
            "--cluster",
            "reshard",
            source.address,
            "--cluster-from",
            source.cli("CLUSTER", "MYID").strip(),
            "--cluster-to",
            target.cli("CLUSTER", "MYID").strip(),
            "--cluster-slots",
            str(slots),
            "--cluster-yes",
            "--cluster-pipeline",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.timeout(420)
def test_a_slot_migration_mid_stream_is_followed(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    own_cluster: Cluster,
    message_dict: MessageFactory,
) -> None:
    """`redis-cli --cluster reshard` moves slots, keys and all, while the worker writes: the
    store follows MOVED and ASK (and waits out TRYAGAIN); every message is recorded once and a
    re-run is all hits."""
    prefix = "moving"
    env = on_cluster(own_cluster, prefix)
    worker = start_worker(queue, env=env)
    app = publisher()
    worker.wait_ready()
    with Stream(app, queue, message_dict, "reshard") as stream:
        worker.wait_until(
            lambda lines: len(scored_by_case(lines)) >= 200, timeout=120, what="200 scored"
        )
        started = datetime.now(UTC)
        moved = reshard(own_cluster, 5_000)
        ended = datetime.now(UTC)
    assert moved.returncode == 0, moved.stdout[-2000:] + moved.stderr[-2000:]
    messages = stream.sent
    worker.wait_until(all_scored(messages), timeout=240, what="every message scored")

    records = worker.records()
    assert scored_during(records, started, ended) > 0, "nothing was written during the move"
    assert [line for line in records if line["event"] == REJECTED] == []
    assert len(records) == len(messages)
    store = cluster_store(own_cluster, prefix)
    check_first_outcomes(store, messages, records)
    rerun_is_all_hits(worker, start_worker, queue, app, env, messages)
    assert store.alerts() == []
    store.close()


def test_a_write_waits_for_its_master_s_replica(
    redis_cluster: Cluster, cluster_prefix: str
) -> None:
    """By default each master's writes wait for its replica: with that replica stopped
    (SIGSTOP, it acknowledges nothing) the record is a transient error naming the master, and
    once it is back the retry is a replay; nothing is recorded twice."""
    store = RedisClusterStore.from_url(
        redis_cluster.url, prefix=cluster_prefix, min_replicas=None, replica_timeout_ms=300
    )
    input_hash = "3" * 64
    # No contract version: no drift step, so the record is the first write and it falls short.
    attempt = factories.attempt(contract_version=None, recorded_at=NOW)
    master = redis_cluster.master_of(store.keys.outcome(input_hash))
    replica = redis_cluster.replica_of(master)
    redis.Redis(port=master.port).script_load(RECORD_LUA)  # no NOSCRIPT round first
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TransientError) as raised:
            store.record(input_hash, attempt, now=NOW, write_id="w:0")
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
    redis_cluster.wait_replicas_synced()

    assert str(raised.value) == (
        f"store {store.name} {master.address}: the write reached 0 of 1 replica in 300 ms "
        "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"
    )
    again = store.record(input_hash, attempt, now=NOW, write_id="w:0")
    assert (again.cache, again.replayed) == ("miss", True)
    history = store.history(input_hash)
    assert history is not None
    assert history.total_attempts == 1
    store.close()


def test_the_reconcile_lease_waits_for_its_master_s_replica(
    redis_cluster: Cluster, cluster_prefix: str
) -> None:
    """The lease's master's replica stopped: taking the lease is a transient error naming
    that master, as for any write; the replica back, it has the lease."""
    store = RedisClusterStore.from_url(
        redis_cluster.url, prefix=cluster_prefix, min_replicas=None, replica_timeout_ms=300
    )
    key = store.keys.lease("reconcile")
    master = redis_cluster.master_of(key)
    replica = redis_cluster.replica_of(master)
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(TransientError) as raised:
            store.take_lease("reconcile", "run-1", 300)
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)
    redis_cluster.wait_replicas_synced()

    assert str(raised.value) == (
        f"store {store.name} {master.address}: the write reached 0 of 1 replica in 300 ms "
        "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"
    )
    on_replica = redis.Redis(port=replica.port, single_connection_client=True)
    on_replica.execute_command("READONLY")  # a cluster replica serves reads once asked
    assert on_replica.get(key) == b"run-1"
    on_replica.close()
    assert store.take_lease("reconcile", "run-2", 300) is False
    store.close()


class Killed(BaseException):
    """The worker's death between two steps of a record (not an Exception: nothing catches
    it on the way out)."""


def dies_after(step: str) -> type[RedisClusterStore]:
    """A store whose worker dies right after `step` (drift, record) wrote."""

    class Dying(RedisClusterStore):
        def _check_drift(self, *args: Any, **kwargs: Any) -> list[str]:
            found = super()._check_drift(*args, **kwargs)
            if step == "drift":
                raise Killed
            return found

        def _record_shards(self, *args: Any, **kwargs: Any) -> list[list[Any]]:
            replies = super()._record_shards(*args, **kwargs)
            if step == "record":
                raise Killed
            return replies

    return Dying


def drifting(n: int, required: list[str]) -> Any:
    return factories.attempt(
        case_id="refund-001",
        task_id=f"task-{n}",
        contract_version="v1",
        required_claim_ids=required,
        supported_claim_ids=required[:1],
        value=1 / len(required),
        reason=f"supported=1; required={len(required)}",
        recorded_at=NOW,
    )


@pytest.mark.parametrize("step", ["drift", "record"])
def test_a_worker_killed_between_record_steps_is_replayed_to_the_same_outcome(
    redis_cluster: Cluster, cluster_prefix: str, step: str
) -> None:
    """The redelivery (same write ids, a fresh worker) finds what the dead one wrote and does
    what it left undone: the same Recorded as an undisturbed write, the drift alerted once,
    the case indexed and the ledger entry closed."""
    first_hash, second_hash = "1" * 64, "2" * 64
    store = cluster_store(redis_cluster, cluster_prefix)
    published = LedgerEntry(
        task_id="t",
        position=0,
        case_id="refund-001",
        input_hash=second_hash,
        published_at=datetime.now(UTC),
        body="{}",
    )
    store.note_published([published])
    assert [entry.write_id for entry in store.unrecorded(published_before=FUTURE)] == ["t:0"]
    store.record(first_hash, drifting(1, THREE), now=NOW, write_id="s:0")
    dying = dies_after(step).from_url(redis_cluster.url, prefix=cluster_prefix)
    with pytest.raises(Killed):
        dying.record(second_hash, drifting(2, THREE[:2]), now=NOW, write_id="t:0")
    dying.close()

    replayed = store.record(second_hash, drifting(2, THREE[:2]), now=NOW, write_id="t:0")

    assert (replayed.cache, replayed.contract_drift) == ("miss", True)
    assert replayed.replayed is (step == "record")
    assert replayed.drift is not None  # the alert this write raised, given back to the worker
    assert [alert.kind for alert in store.alerts()] == ["contract_drift"]
    assert store.hashes_for_case("refund-001") == [second_hash, first_hash]
    assert list(store.unrecorded(published_before=FUTURE)) == []
    history = store.history(second_hash)
    assert history is not None
    assert history.total_attempts == 1
    assert (history.first.contract_drift, history.first.owner) == (True, "evaluation-data")
    memo = store.layout.drift_memo(store.keys.contract("v1", "refund-001"), "t:0")
    assert store.client.exists(memo) == 0
    store.close()


def test_the_store_names_the_cluster_and_score_summarises_on_it(
    redis_cluster: Cluster, cluster_prefix: str, tmp_path: Path
) -> None:
    """`score` on a cluster node's URL: records, exit 3 for the example's conflict, and a
    summary naming the cluster."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "score",
            str(ROOT / "contracts/examples/attribution-results.jsonl"),
            "--store",
            redis_cluster.url,
        ],
        cwd=tmp_path,
        env=clean_env({"EVIDENCE_KEY_PREFIX": cluster_prefix}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert run.returncode == 3, run.stderr
    assert len(run.stdout.splitlines()) == 11
    assert run.stderr.rstrip().endswith(f"store {redis_cluster.url} (Redis Cluster, 3 masters))")
    assert "Traceback" not in run.stderr


# Configurations the store refuses: one line, exit 2, for `score` and for the worker.


@pytest.fixture
def lonely_node(tmp_path: Path) -> Iterator[str]:
    """A cluster-enabled redis-server that was never given a slot: cluster_state:fail."""
    cluster = Cluster(tmp_path)
    (port,) = free_ports(1)  # its bus port, port + 10000, free too
    node = cluster.start_node(port)
    yield f"redis://127.0.0.1:{port}/0"
    cluster.kill(node)


def refusals(redis_cluster: Cluster, lonely_node: str) -> dict[str, tuple[str, str, bool]]:
    """Per case: the store URL, the one line said, and whether EVIDENCE_STORE_CLUSTER=true."""
    node = redis_cluster.nodes[0].address
    (down,) = free_ports(1)
    return {
        "database other than 0": (
            f"redis://{node}/3",
            f"store URL redis://{node}/3 names database 3, but a Redis Cluster has database 0 "
            "only: drop the /N from the URL (or use /0) and choose the keys with "
            "EVIDENCE_KEY_PREFIX",
            False,
        ),
        "uncovered slots": (
            lonely_node,
            f"store {lonely_node}: the Redis Cluster is not serving every slot "
            "(cluster_state:fail, 0 of 16384 slots assigned): fix it (redis-cli --cluster fix "
            "HOST:PORT) before starting",
            False,
        ),
        # Without the setting, a node that does not answer is a store outage: waited for.
        "declared cluster down": (
            f"redis://127.0.0.1:{down}/0",
            f"store redis://127.0.0.1:{down}/0: the Redis Cluster node does not answer (Error "
            f"111 connecting to 127.0.0.1:{down}. Connection refused.); with "
            "EVIDENCE_STORE_CLUSTER=true the store must be reachable at start: name a node "
            "that is up",
            True,
        ),
        "declared cluster is one Redis": (
            f"redis://127.0.0.1:{REDIS_PORT}/0",
            f"store redis://127.0.0.1:{REDIS_PORT}/0 is a single Redis, not a node of a Redis "
            "Cluster (EVIDENCE_STORE_CLUSTER=true): name a cluster node, or unset it",
            True,
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "database other than 0",
        "uncovered slots",
        "declared cluster down",
        "declared cluster is one Redis",
    ],
)
def test_a_cluster_the_store_cannot_use_is_one_line_and_exit_2(
    redis_cluster: Cluster, lonely_node: str, tmp_path: Path, case: str
) -> None:
    url, problem, declared = refusals(redis_cluster, lonely_node)[case]
    line = f"evidence-worker: configuration error: {problem}"
    declared_env = {"EVIDENCE_STORE_CLUSTER": "true"} if declared else {}
    score = subprocess.run(
        [sys.executable, "-m", "worker.cli", "score", "-", "--store", url],
        cwd=tmp_path,
        env=clean_env(declared_env),
        input='{"case_id": "x"}\n',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    worker = subprocess.run(
        worker_command(f"refused-{tmp_path.name}"),
        cwd=ROOT,
        env=clean_env(
            {"EVIDENCE_BROKER_URL": harness.BROKER_URL, "EVIDENCE_STORE_URL": url, **declared_env}
        ),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert (score.returncode, score.stderr.splitlines()) == (2, [line])
    ours = [text for text in worker.stderr.splitlines() if text.startswith("evidence-worker:")]
    assert (worker.returncode, ours) == (2, [line])
    assert "Traceback" not in score.stderr + worker.stderr + worker.stdout
