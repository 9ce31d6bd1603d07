"""`score` freezes the heap while it scores and thaws it after (issue 24)."""

from __future__ import annotations

import gc
from pathlib import Path

from worker.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "contracts/examples/attribution-results.jsonl"


def test_score_leaves_nothing_frozen(tmp_path: Path) -> None:
    """An in-process caller finds the collector as it was: nothing frozen."""
    frozen = gc.get_freeze_count()

    code = main(["score", str(EXAMPLE), "--store", f"sqlite:///{tmp_path}/s.sqlite3"])

    assert code == 3  # the example ends in a nondeterminism alert
    assert gc.get_freeze_count() == frozen == 0
