"""A named observation window (SPEC §12) through a real Celery worker on Redis: with a policy
whose [observe] is open, every record line and stored first attempt carries the previous
rule's version and status, and a row the switch failed is the release rule's; with one that
has ended, the worker logs one warning at start-up and records carry neither."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from contracts.record_models import SCORED
from tests.conftest import BASE_MESSAGE
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import Worker, hash_of, send_scores
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
publisher = harness.publisher
queue = harness.queue
store = harness.store

PREVIOUS = 'version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.6\n'
CURRENT = (
    'version = "2026-12-15"\n[groups.default]\nmin_coverage = 0.85\nreview_band = 0.1\n'
    '[observe]\nprevious = "policy-2026-11.toml"\nuntil = "{until}"\n'
)
CLAIMS = ["refund-window", "refund-method", "support-channel"]


def policy_file(tmp_path: Path, until: str) -> Path:
    """The current policy beside the previous one it names."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "policy-2026-11.toml").write_text(PREVIOUS, encoding="utf-8")
    current = folder / "policy.toml"
    current.write_text(CURRENT.format(until=until), encoding="utf-8")
    return current


def messages() -> list[dict[str, Any]]:
    """3 of 3 (passes both rules), 2 of 3 (fails now, passed before) and 1 of 3 (fails both),
    three answers so three input hashes."""
    rows = []
    for supported in (3, 2, 1):
        row = copy.deepcopy(BASE_MESSAGE)
        row |= {
            "case_id": f"window-{supported}",
            "supported_claim_ids": CLAIMS[:supported],
            "answer": f"Answer with {supported} claims.",
        }
        rows.append(row)
    return rows


def test_an_open_window_is_on_every_record_line_and_stored_attempt(
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    store: RedisStore,
    tmp_path: Path,
) -> None:
    """Until 2099-12-31: each line says previous_policy_version 2026-11-01 and its status
    then; 2 of 3 is fail now, pass then, owner release-rule; the store's first attempts
    keep the same two fields."""
    policy = policy_file(tmp_path, "2099-12-31")
    worker = start_worker(queue, pool="solo", env={"EVIDENCE_POLICY_FILE": str(policy)})
    sent = messages()
    send_scores(publisher(), queue, sent)
    records = {line["case_id"]: line for line in worker.wait_for(3, events=[SCORED])}

    assert {
        case: (r["status"], r["previous_policy_version"], r["previous_status"], r["owner"])
        for case, r in records.items()
    } == {
        "window-3": ("pass", "2026-11-01", "pass", None),
        "window-2": ("fail", "2026-11-01", "pass", "release-rule"),
        "window-1": ("fail", "2026-11-01", "fail", "attribution"),
    }
    kept = {}
    for message in sent:
        history = store.history(hash_of(message))
        assert history is not None
        kept[message["case_id"]] = (
            history.first.previous_policy_version,
            history.first.previous_status,
        )
    assert kept == {
        "window-3": ("2026-11-01", "pass"),
        "window-2": ("2026-11-01", "pass"),
        "window-1": ("2026-11-01", "fail"),
    }


def test_an_ended_window_logs_one_warning_and_records_no_previous_rule(
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    tmp_path: Path,
) -> None:
    """Until 2000-01-01: one evidence_coverage.observation_window_ended line at start-up, and
    the records carry no previous_* field."""
    policy = policy_file(tmp_path, "2000-01-01")
    worker = start_worker(queue, pool="solo", env={"EVIDENCE_POLICY_FILE": str(policy)})
    send_scores(publisher(), queue, messages()[1:2])
    (record,) = worker.wait_for(1, events=[SCORED])

    (ended,) = worker.events("evidence_coverage.observation_window_ended")
    assert (ended["level"], ended["until"], ended["previous_policy_version"]) == (
        "warning",
        "2000-01-01",
        "2026-11-01",
    )
    assert ended["message"] == (
        "the observation window of policy 2026-12-15 ended on 2000-01-01: decisions no longer"
        f" carry policy 2026-11-01; remove [observe] from the policy file and delete"
        f" {policy.parent / 'policy-2026-11.toml'}"
    )
    assert ("previous_status" in record, record["owner"]) == (False, "attribution")
