"""The determinism canary: stored first outcomes re-scored with the code installed now."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts import Attempt
from tests import factories
from tests.conftest import FIXED_NOW
from worker.audit.canary import run_canary, sample
from worker.cli import main
from worker.stores.sqlite.sqlite_store import SQLiteStore


def attempt(value: float | None, reason: str, **overrides: Any) -> Attempt:
    fields = {"task_id": "t-1", "required_claim_ids": ["a", "b"], "supported_claim_ids": ["a"]}
    return factories.attempt(value=value, reason=reason, **{**fields, **overrides})


GOOD = attempt(0.5, "supported=1; required=2; missing=b")
# What an older metric might have said about the same lists.
DRIFTED = attempt(
    0.5, "supported=1; required=2; missing=[b]", case_id="refund-002", ragas_version="0.4.2"
)


def test_a_reproduced_outcome_is_not_a_difference() -> None:
    """An outcome the installed code reproduces exactly is checked and not reported."""
    result = run_canary([("h1", GOOD)])

    assert (result.seen, result.checked, result.differences) == (1, 1, [])


def test_a_changed_reason_is_a_difference_with_both_versions() -> None:
    """A stored reason the installed code no longer gives is listed with stored and now."""
    [difference] = run_canary([("h1", GOOD), ("h2", DRIFTED)]).differences

    assert difference.as_json() == {
        "input_hash": "h2",
        "case_id": "refund-002",
        "stored": {
            "value": 0.5,
            "reason": "supported=1; required=2; missing=[b]",
            "metric_version": "evidence_coverage/1",
            "ragas_version": "0.4.2",
        },
        "now": {
            "value": 0.5,
            "reason": "supported=1; required=2; missing=b",
            "metric_version": "evidence_coverage/1",
            "ragas_version": "0.4.3",
        },
        "ragas_score": {"value": 0.5, "reason": "supported=1; required=2; missing=b"},
    }


def test_an_invalid_outcome_is_reproduced_as_invalid() -> None:
    """A stored invalid row (value None) is compared like any other, never as 0.0."""
    stored = attempt(
        None,
        "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: z",
        supported_claim_ids=["z"],
    )
    as_zero = stored.model_copy(update={"value": 0.0})

    assert run_canary([("h1", stored)]).differences == []
    assert [d.input_hash for d in run_canary([("h2", as_zero)]).differences] == ["h2"]


def test_sample_is_seeded_uniform_and_bounded() -> None:
    """A sample has the requested size, is repeatable per seed and draws from the whole run."""
    items = [(f"h{n}", GOOD) for n in range(1000)]

    first = [h for h, _ in sample(items, 50, seed=3)]
    again = [h for h, _ in sample(items, 50, seed=3)]
    other = [h for h, _ in sample(items, 50, seed=4)]

    assert len(first) == 50
    assert first == again
    assert first != other
    assert max(int(h[1:]) for h in first) >= 500
    assert [h for h, _ in sample(items[:3], 50, seed=3)] == ["h0", "h1", "h2"]


@pytest.fixture
def store_with(tmp_path: Path) -> Callable[..., str]:
    """An SQLite store holding the given (hash, first attempt) pairs; returns its URL."""

    def build(*pairs: tuple[str, Attempt]) -> str:
        path = tmp_path / "canary.sqlite3"
        store = SQLiteStore(path)
        for input_hash, first in pairs:
            store.record(input_hash, first, now=FIXED_NOW)
        store.close()
        return f"sqlite:///{path}"

    return build


def test_cli_exits_3_and_prints_each_difference(
    store_with: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`canary --all` prints one JSON line per difference and exits 3."""
    url = store_with(("h1", GOOD), ("h2", DRIFTED))

    code = main(["canary", "--store", url, "--all"])

    out, err = capsys.readouterr()
    assert code == 3
    assert [json.loads(line)["input_hash"] for line in out.splitlines()] == ["h2"]
    assert err == f"canary: re-scored 2 of 2 stored first outcomes; 1 differs (store {url})\n"


def test_cli_exits_0_when_everything_is_reproduced(
    store_with: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A store whose outcomes the installed code reproduces gives exit 0 and no lines."""
    url = store_with(("h1", GOOD))

    assert main(["canary", "--store", url, "--sample", "10"]) == 0
    assert capsys.readouterr().out == ""
