"""Fixtures shared by both test layers: clean environment, clean logging, message factories."""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import settings

from contracts import AttributionResult
from tests import servers
from tests.servers import servers_need_the_mark  # noqa: F401  (an autouse fixture)
from worker.cli import main
from worker.cli.progress import Progress
from worker.runtime import gc_tuning

ALERT_LINES = frozenset({"evidence_coverage.nondeterminism", "evidence_coverage.contract_drift"})

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "contracts" / "examples"
FIXED_NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

# Property tests: a quick look locally, a thorough one in CI (CI=true), or choose with
# HYPOTHESIS_PROFILE=fast|thorough.
settings.register_profile("fast", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=3_000, deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "thorough" if os.environ.get("CI") else "fast")
)

BASE_MESSAGE: dict[str, Any] = {
    "schema_version": 1,
    "case_id": "refund-001",
    "contract_version": "support-faq/2026-10",
    "required_claim_ids": ["refund-window", "refund-method", "support-channel"],
    "supported_claim_ids": ["refund-window", "support-channel"],
    "answer": "Returns are accepted within 30 days. Reach support through live chat.",
    "contexts": [
        {"document_id": "policy/returns#window", "text": "Items may be returned within 30 days."},
        {"document_id": "help/contact#chat", "text": "Support is available by live chat."},
    ],
    "citations": [],
    "grader": {
        "name": "claim-attributor",
        "version": "3.2.0",
        "model": "gpt-4o-mini-2024-07-18",
        "prompt": "Say which required claims the contexts support.",
        "params": {"temperature": 0.0, "seed": 7},
    },
}

# Citations of the base message's two supported claims, into its answer: with them its
# missing claim is `not_cited`, owned by the product (SPEC §9).
CITED_SUPPORTED: list[dict[str, Any]] = [
    {"claim_id": "refund-window", "document_id": "policy/returns#window", "answer_span": [0, 36]},
    {"claim_id": "support-channel", "document_id": "help/contact#chat", "answer_span": [37, 69]},
]


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, this worker's own Redis, named before any test module is imported."""
    if os.environ.get("PYTEST_XDIST_WORKER") and config.option.markexpr != "not integration":
        private = servers.PrivateRedis()
        private.start()
        config.stash[PRIVATE_REDIS] = private


def pytest_unconfigure(config: pytest.Config) -> None:
    private = config.stash.get(PRIVATE_REDIS, None)
    if private is not None:
        private.stop()


PRIVATE_REDIS = pytest.StashKey[servers.PrivateRedis]()


@pytest.fixture(autouse=True, scope="session")
def settle_walks_the_run_alone() -> Iterator[None]:
    """`score` settles the collector as a process that has just started does: a full
    collection, then the heap frozen (worker/runtime/gc_tuning.py). In a test process that
    collection walked the whole suite's heap, imports and collected tests, on every in-process
    `score` run: most of the fast lane's CPU (docs/development.md, "How long"). The suite's
    heap is frozen first, so it walks what the run made, as a real process walks its start-up
    heap; restore() unfreezes both, and the collector is left as it was (test_score_gc)."""
    settle = gc_tuning.settle

    def settle_after_the_suite() -> tuple[int, int, int]:
        gc.freeze()
        return settle()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gc_tuning, "settle", settle_after_the_suite)
        yield


@pytest.fixture(autouse=True)
def no_wall_clock_progress(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CLI run in-process prints no progress line: off a terminal one comes every 2 s of wall
    clock, so a loaded machine added one to runs whose stderr the tests read line by line. The
    progress tests (their `clock` fixture) drive Progress with a fake clock instead."""
    if "clock" not in request.fixturenames:
        defaults = {**(Progress.__init__.__kwdefaults__ or {}), "every_seconds": math.inf}
        monkeypatch.setattr(Progress.__init__, "__kwdefaults__", defaults)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No EVIDENCE_* or MIN_EVIDENCE_COVERAGE leaks into a test from the machine or another test."""
    for name in list(os.environ):
        if name.startswith("EVIDENCE_") or name == "MIN_EVIDENCE_COVERAGE":
            monkeypatch.delenv(name)
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


@pytest.fixture
def message_dict() -> Callable[..., dict[str, Any]]:
    """Build a valid AttributionResult dict; keyword arguments override fields."""

    def build(**overrides: Any) -> dict[str, Any]:
        return {**copy.deepcopy(BASE_MESSAGE), **overrides}

    return build


@pytest.fixture
def message(message_dict: Callable[..., dict[str, Any]]) -> Callable[..., AttributionResult]:
    """Build a validated AttributionResult; keyword arguments override fields."""

    def build(**overrides: Any) -> AttributionResult:
        return AttributionResult.model_validate(message_dict(**overrides))

    return build


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """Write rows (dicts are JSON-encoded, str/bytes written as-is) to a .jsonl file."""

    def write(rows: list[Any], name: str = "input.jsonl") -> Path:
        path = tmp_path / name
        with path.open("wb") as handle:
            for row in rows:
                text = json.dumps(row) if isinstance(row, dict) else row
                handle.write((text.encode() if isinstance(text, str) else text) + b"\n")
        return path

    return write


@dataclass
class Run:
    """One in-process CLI run: exit code, stdout parsed as JSON lines, raw stdout and stderr."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines()]

    @property
    def records(self) -> list[dict[str, Any]]:
        """The per-message records (scored and rejected), without alert lines."""
        return [line for line in self.lines if line["event"] not in ALERT_LINES]

    @property
    def alerts(self) -> list[dict[str, Any]]:
        """The alert lines, both kinds."""
        return [line for line in self.lines if line["event"] in ALERT_LINES]

    @property
    def hashes(self) -> list[str]:
        return [line["input_hash"] for line in self.lines]

    @property
    def summary(self) -> str:
        """The single stderr line, without the run's elapsed time and store."""
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        return re.sub(r" \(\d+\.\d+s, store [^()]*\)$", "", lines[0])


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run `evidence-worker ARGS` in-process and capture what it printed."""

    def run(*argv: str | Path) -> Run:
        code = main([str(arg) for arg in argv])
        captured = capsys.readouterr()
        return Run(code=code, out=captured.out, err=captured.err)

    return run
