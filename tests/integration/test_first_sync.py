"""`score` on a master whose fresh replica is still in its first sync (the master holds a
diskless transfer back for repl-diskless-sync-delay: the replica waits in wait_bgsave), and on
that replica itself: the automatic count does not wait for a replica that cannot acknowledge
anything yet, a set count says the replica is syncing rather than blaming the URL, and the
replica at the address is named. The servers are the test's own, on free ports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.integration.worker_harness import POLL_SECONDS, RedisServer, free_port
from worker.cli import main
from worker.cli.exit_codes import INVALID, OK

pytestmark = pytest.mark.integration

SYNC_DELAY_S = 60  # the first sync does not start before the test is over
TIMEOUT_MS = 200


@pytest.fixture
def syncing(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A master and a fresh replica in its first sync (state wait_bgsave on the master); the
    replica serves no stale data (MASTERDOWN) meanwhile."""
    master = RedisServer(
        free_port(),
        tmp_path,
        options=("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", str(SYNC_DELAY_S)),
    )
    master.start()
    replica = RedisServer(
        free_port(), tmp_path, options=("--replicaof", "127.0.0.1", str(master.port))
    )
    replica.start()
    redis.Redis(port=replica.port).config_set("replica-serve-stale-data", "no")
    client = redis.Redis(port=master.port)
    deadline = time.monotonic() + 15
    while client.info("replication").get("slave0", {}).get("state") != "wait_bgsave":
        assert time.monotonic() < deadline, "the replica never started its first sync"
        time.sleep(POLL_SECONDS)
    client.close()
    yield master, replica
    replica.kill()
    master.kill()


def score(
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    message: dict[str, Any],
    env: dict[str, str] | None = None,
) -> tuple[int, list[str], list[str]]:
    """`evidence-worker score` of one message on the store at `url`: exit code, stdout
    lines, stderr lines."""
    lines = tmp_path / "one.jsonl"
    lines.write_text(json.dumps(message) + "\n", "utf-8")
    monkeypatch.setenv("EVIDENCE_STORE_REPLICA_TIMEOUT_MS", str(TIMEOUT_MS))
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    code = main(["score", str(lines), "--store", url])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_the_automatic_count_records_while_the_replica_is_in_its_first_sync(
    syncing: tuple[RedisServer, RedisServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """Unset EVIDENCE_STORE_MIN_REPLICAS: the syncing replica is not waited for, and the
    run records its row (it would have failed after the wait, exit 2, before)."""
    master, _ = syncing

    code, out, err = score(master.url, tmp_path, monkeypatch, capsys, message_dict())

    assert (code, len(out)) == (OK, 1), err
    assert json.loads(out[0])["cache"] == "miss"


def test_a_set_count_says_the_replica_is_in_its_first_sync(
    syncing: tuple[RedisServer, RedisServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """EVIDENCE_STORE_MIN_REPLICAS=1: exit 2 with one line that names the syncing replica and
    says to run again, not to check the URL."""
    master, replica = syncing

    code, out, err = score(
        master.url,
        tmp_path,
        monkeypatch,
        capsys,
        message_dict(),
        env={"EVIDENCE_STORE_MIN_REPLICAS": "1"},
    )

    assert (code, out) == (INVALID, [])
    assert err == [
        f"evidence-worker: store unavailable: store {master.url}: the write reached 0 of 1 "
        f"replica in {TIMEOUT_MS} ms (EVIDENCE_STORE_MIN_REPLICAS); still in its first sync: "
        f"replica 127.0.0.1:{replica.port} (wait_bgsave): not acknowledged until the replicas "
        "have it; run again once it takes writes"
    ]


def test_the_syncing_replica_itself_says_masterdown(
    syncing: tuple[RedisServer, RedisServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """The replica's own URL: its MASTERDOWN reply, said as Redis says it (a replica at the
    address: the URL is what to check), no traceback."""
    _, replica = syncing

    code, out, err = score(replica.url, tmp_path, monkeypatch, capsys, message_dict())

    assert (code, out) == (INVALID, [])
    assert err == [
        "evidence-worker: store unavailable: Redis refuses writes for now: MASTERDOWN Link "
        "with MASTER is down and replica-serve-stale-data is set to 'no'; check --store or "
        "EVIDENCE_STORE_URL"
    ]
