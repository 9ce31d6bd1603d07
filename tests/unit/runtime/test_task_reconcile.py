"""The beat's reconcile task: which lost messages it sends again, which it dead-letters, what it
counts and the one line it logs per run.

Runs through `task.run(...)` (task_runs.py) on the fakeredis store of conftest.py; the broker
is a list the sends go to (`sent`), and the ledger's clock is moved with age_ledger().
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

import pytest

from tests.factories import age_ledger, ledger_entry
from tests.unit.runtime.task_runs import APP, FlakyStore, reconcile, run
from worker.observability.metrics import Metrics
from worker.pipeline.service import Service
from worker.settings import Settings
from worker.upstream import publishing
from worker.upstream.reconcile import republish_task_id

pytestmark = pytest.mark.usefixtures("runtime", "no_pause")

MINUTE = timedelta(minutes=1)
WHY = (
    "published and neither recorded nor dead-lettered: lost on the way. Those older than "
    "republish_after_seconds were sent again (records are idempotent), or dead-lettered after "
    "EVIDENCE_MAX_REPUBLISHES copies went unrecorded; `evidence-worker reconcile` lists the rest"
)
LIMIT_REASON = "republished 3 times without a record (limit EVIDENCE_MAX_REPUBLISHES=3)"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """The broker: (task id, payload) of each task the task sends."""
    taken: list[tuple[str, Any]] = []

    def send(app: Any, task: str, payload: Any, *, task_id: str, **_: Any) -> str:
        taken.append((task_id, payload))
        return task_id

    monkeypatch.setattr(publishing, "send", send)
    monkeypatch.setattr(APP, "producer_or_acquire", lambda: nullcontext(None))
    return taken


class CountingMetrics(Metrics):
    """The calls the task makes, as values."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.calls: list[tuple[str, Any]] = []

    def healed(self, *, republished: int, dead_lettered: int) -> None:
        self.calls.append(("healed", (republished, dead_lettered)))

    def ledger_unrecorded(self, count: int) -> None:
        self.calls.append(("ledger_unrecorded", count))


@pytest.fixture
def metrics(runtime: Service) -> CountingMetrics:
    runtime.metrics = CountingMetrics()
    return runtime.metrics


def noted(store: FlakyStore, ages: list[tuple[str, int, int]]) -> None:
    """Note (case ID, minutes old, times republished) entries, oldest first."""
    ordered = sorted(ages, key=lambda age: -age[1])
    for index, (case_id, minutes, republished) in enumerate(ordered):
        store.note_published([ledger_entry(case_id, case_id=case_id, republished=republished)])
        following = ordered[index + 1][1] if index + 1 < len(ordered) else 0
        age_ledger(store, (minutes - following) * MINUTE)


def open_case_ids(store: FlakyStore) -> list[tuple[str, int]]:
    now = store.ledger_now() + MINUTE
    return [(e.case_id, e.republished) for e in store.unrecorded(published_before=now)]


def test_messages_older_than_the_republish_age_are_sent_again_and_the_rest_counted(
    store: FlakyStore, sent: list[tuple[str, Any]], metrics: CountingMetrics
) -> None:
    """20 min old: sent again (900 s); 12 min: left to a later run, so not counted (the
    self-heal will take care of it); 1 min: neither."""
    noted(store, [("lost-20", 20, 0), ("lost-12", 12, 0), ("young", 1, 0)])

    result, logs = run(reconcile, 600)

    copy_id = republish_task_id(ledger_entry("lost-20", case_id="lost-20"))
    assert sent == [(copy_id, '{"case_id": "case-lost-20-0"}')]
    assert result == {"unrecorded": 0, "republished": 1, "dead_lettered": 0}
    assert logs == [
        {
            "event": "evidence_coverage.unrecorded",
            "log_level": "warning",
            "unrecorded": 0,
            "republished": 1,
            "dead_lettered": 0,
            "older_than_seconds": 900,
            "republish_after_seconds": 900,
            "republishing": "done",
            "case_ids": [],
            "republished_case_ids": ["lost-20"],
            "dead_lettered_case_ids": [],
            "why": WHY,
        }
    ]
    assert metrics.calls == [("healed", (1, 0)), ("ledger_unrecorded", 0)]
    # The original is closed; its copy is open, young, and counts one republish.
    assert open_case_ids(store) == [("lost-12", 0), ("young", 0), ("lost-20", 1)]


def test_zero_turns_republishing_off_and_only_counts(
    store: FlakyStore, sent: list[tuple[str, Any]], metrics: CountingMetrics, runtime: Service
) -> None:
    runtime.settings = Settings(reconcile_after_seconds=0)
    noted(store, [("lost-30", 30, 0)])

    result, logs = run(reconcile, 600)

    assert sent == []
    assert result == {"unrecorded": 1, "republished": 0, "dead_lettered": 0}
    assert [(log["republishing"], log["case_ids"]) for log in logs] == [("off", ["lost-30"])]
    assert metrics.calls == [("healed", (0, 0)), ("ledger_unrecorded", 1)]
    assert open_case_ids(store) == [("lost-30", 0)]


def test_each_copy_counts_one_more_republish_under_an_id_derived_from_its_original(
    store: FlakyStore, sent: list[tuple[str, Any]]
) -> None:
    noted(store, [("twice", 20, 2)])

    result, _ = run(reconcile, 600)

    original = ledger_entry("twice", case_id="twice", republished=2)
    assert result["republished"] == 1
    assert [task_id for task_id, _ in sent] == [republish_task_id(original)]
    assert open_case_ids(store) == [("twice", 3)]
    [copy] = store.unrecorded(published_before=store.ledger_now() + MINUTE)
    assert copy.task_id == republish_task_id(original)
    assert republish_task_id(copy) != copy.task_id  # the next copy is another write


def test_a_message_republished_the_limit_times_is_dead_lettered_with_the_reason(
    store: FlakyStore, sent: list[tuple[str, Any]], metrics: CountingMetrics
) -> None:
    noted(store, [("spent", 20, 3), ("fresh", 20, 0)])

    result, logs = run(reconcile, 600)

    assert result == {"unrecorded": 0, "republished": 1, "dead_lettered": 1}
    assert [payload for _, payload in sent] == ['{"case_id": "case-fresh-0"}']
    [letter] = store.dead_letters()
    assert (letter.error, letter.body, letter.task_id, letter.position) == (
        LIMIT_REASON,
        '{"case_id": "case-spent-0"}',
        "spent",
        0,
    )
    assert [(log["dead_lettered_case_ids"], log["republished_case_ids"]) for log in logs] == [
        (["spent"], ["fresh"])
    ]
    assert metrics.calls == [("healed", (1, 1)), ("ledger_unrecorded", 0)]
    # Its entry is closed: no later run sends or dead-letters it again.
    assert open_case_ids(store) == [("fresh", 1)]
    age_ledger(store, 20 * MINUTE)
    sent.clear()
    result, _ = run(reconcile, 600)
    assert result == {"unrecorded": 0, "republished": 1, "dead_lettered": 0}
    assert len(store.dead_letters()) == 1


def test_a_run_that_finds_the_lease_held_sends_nothing(
    store: FlakyStore, sent: list[tuple[str, Any]]
) -> None:
    """Two runs at once (two beats, or a run longer than the interval): one republishes."""
    noted(store, [("lost-20", 20, 0)])
    assert store.take_lease("reconcile", "another run", 300)

    result, logs = run(reconcile, 600)

    assert sent == []
    assert result == {"unrecorded": 1, "republished": 0, "dead_lettered": 0}
    assert [log["republishing"] for log in logs] == [
        "skipped: another reconcile run holds the lease"
    ]
    store.give_back_lease("reconcile", "another run")
    result, _ = run(reconcile, 600)
    assert result["republished"] == 1


def test_the_gauge_counts_what_the_self_heal_left_never_what_it_will_send(
    store: FlakyStore, sent: list[tuple[str, Any]], metrics: CountingMetrics
) -> None:
    """Between the counting age (600 s) and the republish age (900 s) a message is the next
    run's to send: the alert on the gauge must not page for it. One the heal left (another
    run held the lease past its time) is counted."""
    noted(store, [("lost-20", 20, 0), ("lost-12", 12, 0)])
    store.take_lease("reconcile", "a stuck run", 300)

    result, logs = run(reconcile, 600)

    assert sent == []
    assert result == {"unrecorded": 1, "republished": 0, "dead_lettered": 0}
    assert [(log["case_ids"], log["older_than_seconds"]) for log in logs] == [(["lost-20"], 900)]
    assert metrics.calls == [("healed", (0, 0)), ("ledger_unrecorded", 1)]


def test_a_heal_that_fails_still_sets_the_gauge(
    store: FlakyStore, monkeypatch: pytest.MonkeyPatch, metrics: CountingMetrics
) -> None:
    """The broker refused the copies: the gauge counts what is left before the error goes
    up, so the alert sees a self-heal that cannot send."""
    from kombu.exceptions import OperationalError

    def refused(*args: Any, **kwargs: Any) -> str:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(publishing, "send", refused)
    monkeypatch.setattr(APP, "producer_or_acquire", lambda: nullcontext(None))
    noted(store, [("lost-20", 20, 0), ("lost-12", 12, 0)])

    with pytest.raises(OperationalError, match="Connection refused"):
        run(reconcile, 600)

    assert metrics.calls == [("ledger_unrecorded", 1)]


def test_a_run_gives_its_lease_back(store: FlakyStore, sent: list[tuple[str, Any]]) -> None:
    run(reconcile, 600)

    assert store.take_lease("reconcile", "the next run", 300)


def test_nothing_unrecorded_is_one_info_line(
    store: FlakyStore, sent: list[tuple[str, Any]], metrics: CountingMetrics
) -> None:
    result, logs = run(reconcile, None)  # the settings' default age

    assert result == {"unrecorded": 0, "republished": 0, "dead_lettered": 0}
    assert logs == [
        {
            "event": "evidence_coverage.reconcile",
            "log_level": "info",
            "unrecorded": 0,
            "republished": 0,
            "dead_lettered": 0,
            "older_than_seconds": 900,
            "republish_after_seconds": 900,
            "republishing": "done",
        }
    ]
    assert metrics.calls == [("healed", (0, 0)), ("ledger_unrecorded", 0)]


@pytest.fixture
def prometheus() -> Iterator[Metrics]:
    """Real counters in prometheus_client's registry, taken out again afterwards."""
    from prometheus_client import REGISTRY

    metrics = Metrics(enabled=True)
    yield metrics
    for collector in list(REGISTRY._collector_to_names):  # no public listing
        if any(
            name.startswith("evidence_coverage_")
            for name in REGISTRY._collector_to_names[collector]
        ):
            REGISTRY.unregister(collector)


def test_the_counters_start_at_zero_and_count_each_run(prometheus: Metrics) -> None:
    from prometheus_client import REGISTRY

    def values() -> tuple[float | None, float | None]:
        return (
            REGISTRY.get_sample_value("evidence_coverage_republished_total"),
            REGISTRY.get_sample_value("evidence_coverage_republish_limit_total"),
        )

    assert values() == (0.0, 0.0)
    prometheus.healed(republished=4, dead_lettered=1)
    prometheus.healed(republished=2, dead_lettered=0)
    assert values() == (6.0, 1.0)
