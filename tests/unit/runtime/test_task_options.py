"""Delivery settings and task options: what makes a task idempotent under redelivery."""

from __future__ import annotations

import pytest
from celery import Task

from tests.unit.runtime.task_runs import score, score_batch
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.runtime.celery_app import celery_config
from worker.settings import Settings

# Delivery settings and task options (issue 3, deliverable 1)


def test_celery_config_has_the_delivery_settings_for_an_idempotent_task() -> None:
    """Late acks, requeue on worker loss, JSON only, visibility timeout wherever Celery reads it."""
    config = celery_config(Settings(visibility_timeout_seconds=42))

    transport = {
        "visibility_timeout": 42,
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
        "body_encoding": "utf-8",  # JSON bodies as JSON text on Redis, not base64
        # No wait on a Redis broker is unbounded (worker/runtime/celery_app.py
        # redis_connection_options).
        "socket_timeout": 10.0,
        "socket_connect_timeout": 10.0,
        "socket_keepalive": True,
        "socket_keepalive_options": TCP_KEEPALIVE_OPTIONS,
        "health_check_interval": 10,
    }
    assert {
        key: config[key]
        for key in (
            "task_acks_late",
            "task_reject_on_worker_lost",
            "accept_content",
            "result_accept_content",
            "task_serializer",
            "result_serializer",
            "event_serializer",
            "worker_prefetch_multiplier",
            "broker_transport_options",
            "result_backend_transport_options",
            "worker_cancel_long_running_tasks_on_connection_loss",
            "worker_deduplicate_successful_tasks",
        )
    } == {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "worker_prefetch_multiplier": 4,
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_deduplicate_successful_tasks": False,
    }


def test_the_default_visibility_timeout_is_five_minutes() -> None:
    """EVIDENCE_VISIBILITY_TIMEOUT_SECONDS unset: 300 s in broker and result backend options."""
    config = celery_config(Settings())

    assert config["broker_transport_options"]["visibility_timeout"] == 300
    assert config["result_backend_transport_options"]["visibility_timeout"] == 300


def test_the_unacked_restore_sweep_fits_the_redelivery_promise() -> None:
    """kombu's sweep interval times its throttle stays within the promised 30 s after timeout."""
    options = celery_config(Settings())["broker_transport_options"]

    assert options["unacked_restore_interval"] * options["unacked_restore_throttle"] <= 30


@pytest.mark.parametrize("task", [score, score_batch], ids=["score", "score_batch"])
def test_tasks_never_ask_celery_to_retry(task: Task) -> None:
    """No autoretry: Celery's retry publishes a copy and acks the original, which loses the
    message when the broker is the Redis that is down. The store waits out an outage instead."""
    assert getattr(task, "autoretry_for", ()) == ()


@pytest.mark.parametrize("task", [score, score_batch], ids=["score", "score_batch"])
def test_tasks_acknowledge_late_and_are_requeued_when_their_worker_is_lost(task: Task) -> None:
    """The app's late-ack settings reach the registered tasks."""
    assert (task.acks_late, task.reject_on_worker_lost) == (True, True)


def test_the_beat_schedule_runs_reconcile_every_five_minutes_for_ten_minute_old_entries() -> None:
    assert celery_config(Settings())["beat_schedule"] == {
        "evidence-reconcile": {
            "task": "evidence_coverage.reconcile",
            "schedule": 300.0,
            "kwargs": {"older_than_seconds": 600},
        }
    }
    custom = Settings(reconcile_every_seconds=60, reconcile_older_than_seconds=3600)
    assert celery_config(custom)["beat_schedule"]["evidence-reconcile"]["kwargs"] == {
        "older_than_seconds": 3600
    }
