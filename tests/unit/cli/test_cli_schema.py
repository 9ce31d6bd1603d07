"""`evidence-worker schema`: prints the published JSON Schemas, or writes them as files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts import json_schemas
from tests.conftest import ROOT
from tests.unit.contracts.test_schemas import EXPECTED_FILES
from worker.cli import main

SCHEMA_DIR = ROOT / "contracts" / "schemas"
SCHEMA_NAMES = EXPECTED_FILES


def test_schema_prints_the_four_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    """`schema` prints one JSON object keyed by the five schema file names, and exits 0."""
    code = main(["schema"])
    printed = json.loads(capsys.readouterr().out)

    assert code == 0
    assert sorted(printed) == SCHEMA_NAMES


def test_printed_schemas_match_the_published_files(capsys: pytest.CaptureFixture[str]) -> None:
    """Each printed schema equals the file committed under contracts/schemas/."""
    main(["schema"])
    printed = json.loads(capsys.readouterr().out)

    for name in SCHEMA_NAMES:
        assert printed[name] == json.loads((SCHEMA_DIR / name).read_text()), name


def test_printed_schemas_are_the_models_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    """What `schema` prints is exactly contracts.json_schemas()."""
    main(["schema"])

    assert json.loads(capsys.readouterr().out) == json_schemas()


def test_schema_write_creates_five_identical_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`schema --write DIR` writes five files byte-identical to contracts/schemas/."""
    target = tmp_path / "out" / "schemas"
    code = main(["schema", "--write", str(target)])
    captured = capsys.readouterr()

    assert code == 0
    assert sorted(path.name for path in target.iterdir()) == SCHEMA_NAMES
    for name in SCHEMA_NAMES:
        assert (target / name).read_bytes() == (SCHEMA_DIR / name).read_bytes(), name
    assert captured.out == ""
    assert captured.err == f"schema: wrote 5 files to {target}\n"


def test_schema_write_overwrites_stale_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing, outdated schema file is replaced by the current one."""
    stale = tmp_path / "release-row.schema.json"
    stale.write_text("{}\n")

    main(["schema", "--write", str(tmp_path)])

    assert stale.read_bytes() == (SCHEMA_DIR / "release-row.schema.json").read_bytes()
