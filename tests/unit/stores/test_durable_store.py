"""The store wrapper that waits out an outage: backoff, window, what it reports, impatience."""

from __future__ import annotations

from typing import Any

import pytest

from worker.errors import ConfigurationError, TransientError
from worker.settings import Settings, load_settings
from worker.stores.durable import DurableStore, backoff, impatient


class Outage:
    """A store whose writes fail `failures` times, then succeed; reads never fail."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def dead_letter(self, *letters: Any) -> None:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise TransientError("Redis unreachable: connection refused")

    def alerts(self, limit: int = 100) -> list[Any]:
        raise TransientError("reads are not retried")


def durable(outage: Outage, window: float) -> tuple[DurableStore, list[Any]]:
    events: list[Any] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        events.append(("sleep", seconds))
        now[0] += seconds

    store = DurableStore(
        outage,  # type: ignore[arg-type]
        window_seconds=window,
        on_wait=lambda error, attempt, delay: events.append(("wait", attempt, delay)),
        on_recovered=lambda: events.append(("recovered",)),
        sleep=sleep,
        clock=lambda: now[0],
        rng=lambda: 0.0,
    )
    return store, events


@pytest.mark.parametrize(
    ("attempt", "random_draw", "seconds"),
    [(1, 0.0, 0.5), (2, 0.0, 1.0), (4, 0.0, 4.0), (5, 0.0, 8.0), (6, 0.0, 10.0), (30, 0.0, 10.0),
     (1, 1.0, 0.25), (6, 0.5, 7.5)],
)  # fmt: skip
def test_backoff_doubles_caps_and_jitters_down(
    attempt: int, random_draw: float, seconds: float
) -> None:
    """0.5 s doubling, capped at 10 s, then shortened by up to half at random."""
    assert backoff(attempt, rng=lambda: random_draw) == seconds


def test_a_write_waits_until_the_store_takes_it() -> None:
    """Two failures: two waits reported, then the write lands and recovery is reported."""
    outage = Outage(failures=2)
    store, events = durable(outage, window=30)

    store.dead_letter()

    assert outage.calls == 3
    assert events == [
        ("wait", 1, 0.5), ("sleep", 0.5), ("wait", 2, 1.0), ("sleep", 1.0), ("recovered",)
    ]  # fmt: skip


def test_a_write_gives_up_when_the_next_wait_would_pass_the_window() -> None:
    """With 2 s of window: waits of 0.5 s and 1 s fit, the next (2 s) would not: raised."""
    outage = Outage(failures=10)
    store, events = durable(outage, window=2)

    with pytest.raises(TransientError, match="connection refused"):
        store.dead_letter()

    assert outage.calls == 3
    assert [event for event in events if event[0] == "sleep"] == [("sleep", 0.5), ("sleep", 1.0)]


def test_an_impatient_write_fails_at_once() -> None:
    """Inside impatient() (the consumer's event loop) nothing sleeps."""
    outage = Outage(failures=1)
    store, events = durable(outage, window=30)

    with impatient(), pytest.raises(TransientError):
        store.dead_letter()

    assert (outage.calls, events) == (1, [])


def test_reads_are_not_retried() -> None:
    """A reader hears at once that the store is away."""
    store, events = durable(Outage(failures=0), window=30)

    with pytest.raises(TransientError, match="reads are not retried"):
        store.alerts()

    assert events == []


def test_the_window_defaults_to_most_of_the_visibility_timeout() -> None:
    """80% of EVIDENCE_VISIBILITY_TIMEOUT_SECONDS unless set."""
    assert Settings(visibility_timeout_seconds=100).store_retry_window == 80
    assert Settings(store_retry_window_seconds=5).store_retry_window == 5


def test_a_window_as_long_as_the_visibility_timeout_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task still waiting when the timeout passes would see its message delivered twice."""
    monkeypatch.setenv("EVIDENCE_VISIBILITY_TIMEOUT_SECONDS", "60")
    monkeypatch.setenv("EVIDENCE_STORE_RETRY_WINDOW_SECONDS", "60")

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value) == (
        "EVIDENCE_STORE_RETRY_WINDOW_SECONDS must be below EVIDENCE_VISIBILITY_TIMEOUT_SECONDS"
    )


def test_attempts_kept_longer_than_their_outcome_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """They would go with their first outcome anyway: the setting would say what is not so."""
    monkeypatch.setenv("EVIDENCE_RESULT_TTL_SECONDS", "60")
    monkeypatch.setenv("EVIDENCE_ATTEMPTS_TTL_SECONDS", "61")

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value) == (
        "EVIDENCE_ATTEMPTS_TTL_SECONDS must be at most EVIDENCE_RESULT_TTL_SECONDS"
    )
    monkeypatch.setenv("EVIDENCE_ATTEMPTS_TTL_SECONDS", "60")
    assert load_settings().attempts_ttl_seconds == 60
