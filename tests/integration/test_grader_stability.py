"""Grader stability end to end (issue 26, SPEC §10): re-grades sent through a real prefork
worker on a real Redis broker and store; `stability` over the store and over the worker's own
record lines, `report` over both, and the worker's /metrics all give the same figures.

Three graders. A: five inputs, four re-graded once, two of those flipped. B: three inputs, one
re-graded twice (confirmed, then flipped), one once, one never. C: one input, never re-graded
(no rate, no interval, and its counters exported at 0). Per input hash that is A 5/4/2, B 3/2/1,
C 1/0/0; the counters count records instead (a re-grade is each hit or conflict), so B's
regrades_total is 3 where its re-graded hashes are 2.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts.grader_stability import wilson_interval
from tests.conftest import Run
from tests.integration import worker_harness
from tests.integration.test_metrics import Samples, free_port, scrape_until
from tests.integration.worker_harness import Worker, send_scores
from worker.observability.metrics import MULTIPROC_ENV

pytestmark = pytest.mark.integration

start_worker = worker_harness.start_worker
queue = worker_harness.queue
publisher = worker_harness.publisher

A = {"name": "claim-attributor", "version": "3.2.0", "model": "gpt-4o-mini-2024-07-18"}
B = {"name": "claim-attributor", "version": "4.0.0", "model": "gpt-4.1-mini-2025-04-14"}
C = {"name": "span-judge", "version": "1.0.0", "model": "claude-haiku-4-5"}
ALL = ["refund-window", "refund-method", "support-channel"]
SOME = ["refund-window", "support-channel"]


def row(grader: dict[str, str], inputs: int, regraded: int, flipped: int) -> dict[str, Any]:
    """One grader's object as `stability --json` prints it."""
    low, high = wilson_interval(flipped, regraded) if regraded else (None, None)
    return {
        "grader_name": grader["name"],
        "grader_version": grader["version"],
        "grader_model": grader["model"],
        "inputs": inputs,
        "regraded": regraded,
        "flipped": flipped,
        "flip_rate": flipped / regraded if regraded else None,
        "flip_rate_low": low,
        "flip_rate_high": high,
    }


# Least stable first: A's interval starts at 15.0%, B's at 9.5%, C has none.
EXPECTED = [row(A, 5, 4, 2), row(B, 3, 2, 1), row(C, 1, 0, 0)]


def test_the_pinned_interval_ends_are_the_ones_the_order_rests_on() -> None:
    """The order above is not an accident of the helper: the two low ends, to the digit."""
    assert [expected["flip_rate_low"] for expected in EXPECTED] == [
        0.15003898915214947,
        0.09453120573423071,
        None,
    ]


def test_stability_report_and_metrics_agree_on_re_grades_through_a_real_worker(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Any],
    message_dict: Callable[..., dict[str, Any]],
    cli: Callable[..., Run],
    key_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    worker = start_worker(
        queue,
        env={
            "EVIDENCE_METRICS_PORT": str(port),
            MULTIPROC_ENV: str(tmp_path / "metrics"),
        },
    )
    worker.wait_ready()
    app = publisher()

    def graded(grader: dict[str, str], case: str, supported: list[str]) -> dict[str, Any]:
        """`case`'s inputs (its answer names it) as `grader` judged them this time."""
        return message_dict(
            case_id=f"{case}-{time.monotonic_ns()}",
            answer=f"Returns are accepted within 30 days. Reach support through live chat. {case}",
            supported_claim_ids=supported,
            grader={**message_dict()["grader"], **grader},
        )

    # Three waves, each waited for: a re-grade must find its first outcome recorded, or two
    # pool children could race to be the first.
    waves = [
        [graded(A, f"a{n}", SOME) for n in range(1, 6)]
        + [graded(B, f"b{n}", SOME) for n in range(1, 4)]
        + [graded(C, "c1", SOME)],
        [
            graded(A, "a1", SOME),
            graded(A, "a2", SOME),
            graded(A, "a3", ALL),
            graded(A, "a4", ALL),
            graded(B, "b1", SOME),
            graded(B, "b2", SOME),
        ],
        [graded(B, "b1", ALL)],
    ]
    sent = 0
    for wave in waves:
        send_scores(app, queue, wave)
        sent += len(wave)
        worker.wait_for(sent)

    records = worker.records()
    assert [line["event"] for line in records] == ["evidence_coverage.scored"] * 16
    caches = sorted(line["cache"] for line in records)
    assert caches == ["conflict"] * 3 + ["hit"] * 4 + ["miss"] * 9
    assert len(worker.events("evidence_coverage.nondeterminism")) == 3

    # The store: stability, then the report's Graders section, the same objects.
    monkeypatch.setenv("EVIDENCE_KEY_PREFIX", key_prefix)
    store = worker_harness.STORE_URL
    from_store = cli("stability", "--store", store, "--json")
    assert (from_store.code, from_store.err) == (0, f"stability: 3 graders in {store}\n")
    assert from_store.lines == EXPECTED
    report_store = cli("report", "--store", store, "--json")
    assert report_store.code == 0, report_store.err
    assert json.loads(report_store.out)["graders"] == EXPECTED

    # The worker's record lines (its stdout, Celery's own lines and all), the same again.
    from_records = cli("stability", "--records", worker.stdout_path, "--json")
    assert (from_records.code, from_records.lines) == (0, EXPECTED)
    report_records = cli("report", worker.stdout_path, "--json")
    assert report_records.code == 0, report_records.err
    assert json.loads(report_records.out)["graders"] == EXPECTED

    # A's low end, 15.0%, is above 0.1: exit 3; below it, 0.
    assert cli("stability", "--store", store, "--max-flip-rate", "0.1").code == 3
    assert cli("stability", "--store", store, "--max-flip-rate", "0.2").code == 0

    # /metrics: each hit or conflict record is a re-grade, each conflict a flip, summed over
    # both pool children; C's series exist at 0.
    # A record's line is written before its counts: wait for the last message's to land.
    def settled(got: Samples) -> bool:
        return (
            counted(got, "regrades", A) >= 4
            and counted(got, "regrades", B) >= 3
            and counted(got, "flips", B) >= 1
        )

    samples = scrape_until(port, settled, timeout=30)
    graders = {"A": A, "B": B, "C": C}
    regrades = {name: counted(samples, "regrades", grader) for name, grader in graders.items()}
    flips = {name: counted(samples, "flips", grader) for name, grader in graders.items()}
    assert regrades == {"A": 4, "B": 3, "C": 0}
    assert flips == {"A": 2, "B": 1, "C": 0}
    lines_by_grader = {
        name: sum(
            line["cache"] in ("hit", "conflict")
            for line in records
            if (line["grader_version"], line["grader_name"]) == (grader["version"], grader["name"])
        )
        for name, grader in graders.items()
    }
    assert lines_by_grader == regrades


def counted(samples: Samples, counter: str, grader: dict[str, str]) -> float:
    """evidence_coverage_<counter>_total for `grader`; -1 when the series is not exported."""
    labels = (
        ("grader_model", grader["model"]),
        ("grader_name", grader["name"]),
        ("grader_version", grader["version"]),
    )
    return samples.get((f"evidence_coverage_{counter}_total", labels), -1.0)
