"""A policy without review_band and [observe] gives the record lines main gave before either
existed (tests/fixtures/records-82d07f0): the new fields are absent, not null (SPEC §12)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT, Run

BEFORE = ROOT / "tests" / "fixtures" / "records-82d07f0"
POLICY = EXAMPLES / "policy.toml"
BASELINE = EXAMPLES / "policy-2026-11.toml"
# What differs from run to run, as the fixture's README says it was replaced.
VARYING = [
    (re.compile(r'"(timestamp|recorded_at|raised_at)":"[^"]*"'), r'"\1":"T"'),
    (re.compile(r'"duration_ms":[0-9.e-]+'), '"duration_ms":0'),
    (re.compile(r"score-[0-9a-f]{12}-"), "score-RUN-"),
]


def steady(text: str) -> str:
    for pattern, replacement in VARYING:
        text = pattern.sub(replacement, text)
    return text


@pytest.mark.parametrize("name", ["attribution-results", "triage-rows"])
def test_score_lines_are_as_before(cli: Callable[..., Run], tmp_path: Path, name: str) -> None:
    """`score` of a shipped example under the example policy prints the lines main printed."""
    run = cli(
        "score",
        EXAMPLES / f"{name}.jsonl",
        "--policy",
        POLICY,
        "--store",
        f"sqlite:///{tmp_path}/s.sqlite3",
    )

    expected = (BEFORE / f"score-{name}.jsonl").read_text(encoding="utf-8")
    assert steady(run.out) == expected


def test_gate_lines_are_as_before(cli: Callable[..., Run]) -> None:
    """`gate --baseline-policy` of the triage example prints the lines main printed."""
    run = cli(
        "gate",
        EXAMPLES / "triage-rows.jsonl",
        "--policy",
        POLICY,
        "--baseline-policy",
        BASELINE,
    )

    assert run.out == (BEFORE / "gate-triage-rows-baseline.jsonl").read_text(encoding="utf-8")
