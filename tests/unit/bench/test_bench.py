"""The pure parts of `bench`: its sample messages, percentiles, memory growth and ratios."""

from __future__ import annotations

from collections import Counter

import pytest

from contracts import input_hash
from worker.bench.drain import (
    PhaseResult,
    _percentile,
    process_rss_growth_pct,
    rss_growth_pct,
    sample_messages,
    summarize,
)
from worker.errors import InputError
from worker.pipeline.intake import parse_message
from worker.pipeline.scoring import score


def _kind(message: dict[str, object]) -> str:
    try:
        parsed = parse_message(message, max_bytes=1_000_000)
    except InputError:
        return "rejected"
    return "valid" if score(parsed)[1].value is not None else "invalid"


def test_sample_messages_mix_valid_invalid_and_rejected() -> None:
    """The bench traffic is mostly valid, with metric-invalid and schema-invalid messages."""
    kinds = Counter(_kind(message) for message in sample_messages(2_000))

    assert set(kinds) == {"valid", "invalid", "rejected"}
    assert kinds["valid"] > 0.8 * 2_000
    assert kinds["rejected"] > 0


def test_sample_messages_repeat_some_input_hashes() -> None:
    """Some messages repeat earlier inputs, so the store sees hits and conflicts."""
    hashes = Counter(
        input_hash(parse_message(message, max_bytes=1_000_000))
        for message in sample_messages(2_000)
        if _kind(message) != "rejected"
    )

    assert sum(n - 1 for n in hashes.values() if n > 1) > 50


def test_sample_messages_are_deterministic_and_case_ids_unique() -> None:
    """The same seed gives the same traffic, and every message has its own case_id."""
    first, second = list(sample_messages(500)), list(sample_messages(500))

    assert first == second
    assert len({message["case_id"] for message in first}) == 500


@pytest.mark.parametrize(
    ("values", "pct", "expected"),
    [
        ([], 50, None),
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 50, 3.0),
        ([float(n) for n in range(1, 101)], 99, 99.0),
    ],
)
def test_percentile(values: list[float], pct: int, expected: float | None) -> None:
    """Nearest-rank percentiles over the latency samples."""
    assert _percentile(values, pct) == expected


def test_rss_growth_from_steady_state() -> None:
    """Growth is measured from the sample at 10% of the run to the last one."""
    samples = [100.0, 150.0] + [200.0] * 17 + [210.0]  # start-up, steady, end

    assert rss_growth_pct(samples) == 5.0
    assert rss_growth_pct([1.0, 2.0]) is None


def test_process_rss_growth_is_the_worst_single_process() -> None:
    """A child growing 50% is reported even when the total of all processes looks flat."""
    flat, growing = 300.0, 100.0
    samples = [{1: flat, 2: growing, 3: 100.0} for _ in range(19)]
    samples.append({1: flat, 2: growing * 1.5, 3: 100.0})

    assert process_rss_growth_pct(samples) == 50.0
    assert rss_growth_pct([sum(sample.values()) for sample in samples]) == 10.0
    assert process_rss_growth_pct([]) is None


def _run(phase: str, rate: float) -> PhaseResult:
    return PhaseResult(
        phase=phase,
        messages=1000,
        seconds=1000 / rate,
        msgs_per_s=rate,
        us_per_msg=1e6 / rate,
        p50_latency_ms=None,
        p99_latency_ms=None,
        peak_rss_mb=100.0,
    )


def test_summarize_reports_medians_and_ratios() -> None:
    """Medians over repeats with min/max, and the ratios the targets are stated in."""
    runs = [
        _run("noop", 1000),
        _run("noop", 1200),
        _run("noop", 1100),
        _run("score", 900),
        _run("score", 880),
        _run("score", 920),
        _run("batch", 9000),
        _run("batch", 9900),
        _run("batch", 9500),
    ]

    summary = summarize(runs)

    assert (
        summary["noop_msgs_per_s"],
        summary["noop_msgs_per_s_min"],
        summary["noop_msgs_per_s_max"],
    ) == (1100, 1000, 1200)
    assert summary["ratio_score_to_noop"] == round(900 / 1100, 3)
    assert summary["ratio_batch_to_score"] == round(9500 / 900, 3)
    # repetition by repetition: 900/1000, 880/1200, 920/1100 and 9000/900, 9900/880, 9500/920
    assert (
        summary["ratio_score_to_noop_paired"],
        summary["ratio_score_to_noop_paired_min"],
        summary["ratio_score_to_noop_paired_max"],
    ) == (round(920 / 1100, 3), round(880 / 1200, 3), 0.9)
    assert summary["ratio_batch_to_score_paired"] == round(9500 / 920, 3)
    assert summary["peak_rss_mb"] == 100.0
