"""The example file and the checks the `score` tests share: hashes, published shapes."""

from __future__ import annotations

import json
from typing import Any

from contracts import (
    AlertRecord,
    AttributionResult,
    ContractDriftRecord,
    CoverageRecord,
    input_hash,
)
from tests.conftest import EXAMPLES, Run

EXAMPLE_FILE = EXAMPLES / "attribution-results.jsonl"
EXAMPLE_POLICY = EXAMPLES / "policy.toml"
TWO_THIRDS = 2 / 3


def example_rows() -> list[dict[str, Any]]:
    """The example file's messages, as dicts, in line order."""
    return [json.loads(line) for line in EXAMPLE_FILE.read_text().splitlines() if line.strip()]


def hash_of(row: dict[str, Any]) -> str:
    """The input hash of a message given as a dict."""
    return input_hash(AttributionResult.model_validate(row))


def assert_published_shapes(run: Run) -> None:
    """Each stdout line validates as the published record or alert its event names."""
    for line in run.lines:
        if line["event"] == "evidence_coverage.nondeterminism":
            AlertRecord.model_validate(line)
        elif line["event"] == "evidence_coverage.contract_drift":
            ContractDriftRecord.model_validate(line)
        else:
            CoverageRecord.model_validate(line)
