"""The published JSON Schemas in contracts/schemas/ match the models (SPEC §2, §6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import contracts
from contracts import json_schemas

SCHEMAS = Path(contracts.__file__).parent / "schemas"
REGENERATE = "run `evidence-worker schema --write contracts/schemas` and commit the result"
EXPECTED_FILES = [
    "alert-record.schema.json",
    "attribution-result.schema.json",
    "contract-drift-record.schema.json",
    "coverage-record.schema.json",
    "release-row.schema.json",
]


def test_published_file_names() -> None:
    """contracts/schemas/ holds exactly the five published schema files."""
    assert sorted(path.name for path in SCHEMAS.glob("*.json")) == EXPECTED_FILES, REGENERATE


def test_generated_file_names() -> None:
    """json_schemas() generates exactly the five published schema files."""
    assert sorted(json_schemas()) == EXPECTED_FILES


@pytest.mark.parametrize("name", EXPECTED_FILES)
def test_schema_file_is_current(name: str) -> None:
    """Each committed schema file equals the models' schema as `schema --write` writes it."""
    expected = json.dumps(json_schemas()[name], indent=2, sort_keys=True) + "\n"
    path = SCHEMAS / name

    assert path.exists(), f"{path} is missing: {REGENERATE}"
    assert path.read_text(encoding="utf-8") == expected, f"{path} is stale: {REGENERATE}"
