"""Fixtures shared by both test layers: clean environment, clean logging, message factories."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import settings

from contracts import AttributionResult

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
