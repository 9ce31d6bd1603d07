"""`evidence-worker bench` end to end on a small run: it measures, reports and cleans up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import redis

from tests.integration.worker_harness import REDIS_PORT
from worker.cli import main

pytestmark = pytest.mark.integration

BENCH_BROKER = f"redis://127.0.0.1:{REDIS_PORT}/11"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_bench_json_reports_every_phase_and_leaves_no_keys(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A small run prints the documented keys for all three phases and deletes its keys."""
    code = main(
        [
            "bench",
            "--messages",
            "400",
            "--batch-size",
            "50",
            "--broker",
            BENCH_BROKER,
            "--pool",
            "solo",
            "--json",
        ]
    )

    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in (
        "noop_msgs_per_s",
        "score_msgs_per_s",
        "batch_msgs_per_s",
        "ratio_score_to_noop",
        "ratio_batch_to_score",
        "peak_rss_mb",
    ):
        assert summary[key] > 0, key
    assert [run["phase"] for run in summary["runs"]] == ["noop", "score", "batch"]
    assert all(run["messages"] == 400 for run in summary["runs"])
    assert summary["score_p99_latency_ms"] >= summary["score_p50_latency_ms"] > 0
    # Solo: the one process scores; it has no pool children to spend CPU.
    assert summary["score_worker_main_cpu_us_per_msg"] > 0
    assert summary["score_worker_pool_cpu_us_per_msg"] == 0
    assert list(redis.Redis.from_url(BENCH_BROKER).scan_iter(match="*bench-*")) == []


def test_bench_micro_reports_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --micro --json` times the worker's scoring call against raw set arithmetic."""
    assert main(["bench", "--micro", "--json"]) == 0

    result = json.loads(capsys.readouterr().out)
    assert set(result) == {
        "raw_us_per_call",
        "worker_us_per_call",
        "ragas_score_us_per_call",
        "ratio_worker_to_raw",
        "ratio_ragas_to_worker",
    }
    assert result["ratio_worker_to_raw"] > 0


def test_bench_rejects_unknown_phases(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown phase name is a usage problem: one line, exit 2."""
    assert main(["bench", "--phases", "noop,warp"]) == 2
    assert capsys.readouterr().err == (
        "evidence-worker: --phases: unknown phase(s) warp; use noop,score,batch\n"
    )


@pytest.mark.timeout(300)
def test_bench_runs_the_worker_of_another_checkout_on_its_own_messages(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--worker-checkout: the worker under test imports that checkout's code (a copy of this
    one here, whose app leaves a mark), and drains this bench's messages."""
    checkout = tmp_path / "other"
    for package in ("worker", "contracts"):
        shutil.copytree(ROOT / package, checkout / package)
    mark = tmp_path / "ran-from-the-other-checkout"
    app = checkout / "worker" / "app.py"
    app.write_text(app.read_text() + f"\nopen({str(mark)!r}, 'w').close()\n")

    code = main(
        [
            "bench",
            "--messages",
            "200",
            "--batch-size",
            "50",
            "--broker",
            BENCH_BROKER,
            "--phases",
            "batch",
            "--pool",
            "solo",
            "--worker-checkout",
            str(checkout),
            "--json",
        ]
    )

    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert mark.exists()
    assert [(run["phase"], run["messages"]) for run in summary["runs"]] == [("batch", 200)]
    assert summary["batch_msgs_per_s"] > 0


def test_bench_with_metrics_runs_workers_that_count(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--metrics: the worker exports its counters as deploy/ runs it; what it counted by the
    end is every message of the run and its warm-up (8 tasks a pool process, 2 of them, 50
    messages a task), and the mix's repeats as re-grades."""
    code = main(
        [
            "bench",
            "--messages",
            "200",
            "--batch-size",
            "50",
            "--broker",
            BENCH_BROKER,
            "--phases",
            "batch",
            "--metrics",
            "--json",
        ]
    )

    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["batch_metrics_messages"] == 200 + 8 * 2 * 50
    assert summary["batch_metrics_regrades"] > 0
    # Prefork: the CPU the main process and the pool children spent per message, apart.
    assert summary["batch_worker_main_cpu_us_per_msg"] > 0
    assert summary["batch_worker_pool_cpu_us_per_msg"] > 0
    assert list(redis.Redis.from_url(BENCH_BROKER).scan_iter(match="*bench-*")) == []
