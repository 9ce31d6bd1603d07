"""A Redis Cluster store URL naming several seed nodes (`redis://a:7000,b:7001/0`): a worker
started while the first node it names is down finds the cluster through the next one, and the
URLs the store cannot use are one line and exit 2. The cluster is the session's
(tests/integration/conftest.py); the node that is down is a free port nothing listens on.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from celery import Celery

from tests.bad_input import clean_env
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import MessageFactory, all_scored, distinct
from tests.integration.redis_cluster import Cluster, free_ports
from tests.integration.worker_harness import Worker, check_first_outcomes, send_scores
from worker.settings import Settings
from worker.stores import open_store
from worker.stores.redis.redis_cluster import RedisClusterStore

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher

MESSAGES = 20


def seeds_with_a_dead_node_first(cluster: Cluster) -> tuple[str, int]:
    """A seed list whose first node does not answer, then two of the cluster's; its dead port."""
    (down,) = free_ports(1)
    live = ",".join(node.address for node in cluster.nodes[:2])
    return f"redis://127.0.0.1:{down},{live}/0", down


def test_the_store_opens_on_the_cluster_through_the_next_seed_node(
    redis_cluster: Cluster, cluster_prefix: str
) -> None:
    """open_store() tries the seeds in turn: the cluster store, all three masters known."""
    url, _ = seeds_with_a_dead_node_first(redis_cluster)

    store = open_store(url, Settings(key_prefix=cluster_prefix))
    try:
        assert isinstance(store, RedisClusterStore)
        assert (store.masters, store.description) == (3, f"{url} (Redis Cluster, 3 masters)")
    finally:
        store.close()


@pytest.mark.timeout(180)
def test_a_worker_whose_first_seed_node_is_down_records_on_the_cluster(
    start_worker: Callable[..., Worker],
    redis_cluster: Cluster,
    cluster_prefix: str,
    publisher: Callable[..., Celery],
    queue: str,
    message_dict: MessageFactory,
) -> None:
    """The node a one-node URL would have named is down at start: with seeds, the worker
    finds the cluster and records every message once there."""
    url, _ = seeds_with_a_dead_node_first(redis_cluster)
    messages = distinct(message_dict, "seeds", MESSAGES)
    worker = start_worker(queue, store_url=url, env={"EVIDENCE_KEY_PREFIX": cluster_prefix})
    worker.wait_ready()

    send_scores(publisher(), queue, messages)
    worker.wait_until(all_scored(messages), timeout=120, what="every message scored")

    records = worker.records()
    assert sorted(record["case_id"] for record in records) == sorted(
        message["case_id"] for message in messages
    )
    store = RedisClusterStore.from_url(redis_cluster.url, prefix=cluster_prefix)
    try:
        histories = check_first_outcomes(store, messages, records)
        assert [history.total_attempts for history in histories.values()] == [1] * MESSAGES
    finally:
        store.close()


def score_on(url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", "score", "-", "--store", url],
        cwd=tmp_path,
        env=clean_env({}),
        input='{"case_id": "x"}\n',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_seed_nodes_none_of_which_answers_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """Nothing to find the cluster with: said once, naming each node's failure."""
    first, second = free_ports(2)
    url = f"redis://127.0.0.1:{first},127.0.0.1:{second}/0"

    run = score_on(url, tmp_path)

    assert (run.returncode, run.stderr.splitlines()) == (
        2,
        [
            f"evidence-worker: configuration error: store {url}: none of its 2 seed nodes "
            f"answers (Error 111 connecting to 127.0.0.1:{first}. Connection refused.; Error "
            f"111 connecting to 127.0.0.1:{second}. Connection refused.): start the worker "
            "once one of them is up, or name one that is"
        ],
    )


def test_seed_nodes_that_lead_to_a_single_redis_are_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """Several nodes name a cluster: a single Redis answering is a mistake, said at once."""
    (down,) = free_ports(1)
    url = f"redis://127.0.0.1:{down},127.0.0.1:{harness.REDIS_PORT}/0"

    run = score_on(url, tmp_path)

    assert (run.returncode, run.stderr.splitlines()) == (
        2,
        [
            f"evidence-worker: configuration error: store URL {url} names several seed "
            "nodes, which only a Redis Cluster has, but its server is a single Redis: name "
            "that one server alone"
        ],
    )
