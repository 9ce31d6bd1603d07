"""worker.audit.safe_csv: every CSV cell a spreadsheet could run as a formula is neutralised
(OWASP: CSV injection), and our own readers get the cell back exactly."""

from __future__ import annotations

import csv
import io

import pytest

from worker.audit.safe_csv import SafeWriter, neutralised, restored

INJECTIONS = ['=HYPERLINK("x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\t=1+1", "\r=1"]
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@pytest.mark.parametrize("cell", INJECTIONS)
def test_a_formula_cell_gets_a_leading_quote(cell: str) -> None:
    """Each of OWASP's starting characters is written after a '."""
    assert neutralised(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["refund-001", "0.5", "", '["c1"]', "a=b", " =x"])
def test_other_cells_are_written_as_they_are(cell: str) -> None:
    """A cell that starts with anything else is untouched."""
    assert neutralised(cell) == cell


@pytest.mark.parametrize("cell", [*INJECTIONS, "'quoted", "''", "plain", "-0.5"])
def test_restored_gives_back_the_cell_that_was_written(cell: str) -> None:
    """A cell that starts with ' is quoted once more, so restoring is exact for every cell."""
    assert restored(neutralised(cell)) == cell


def test_a_file_read_back_with_the_csv_module_has_no_formula_cell() -> None:
    """Every cell of every row, read back by the csv module, starts with no formula character."""
    out = io.StringIO(newline="")
    writer = SafeWriter(out)
    writer.writerow(["case_id", "value"])
    for cell in INJECTIONS:
        writer.writerow([cell, "-0.5"])

    rows = list(csv.reader(io.StringIO(out.getvalue(), newline="")))

    assert [restored(row[0]) for row in rows[1:]] == INJECTIONS
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_STARTS), cell


def test_no_module_writes_csv_but_through_the_safe_writer() -> None:
    """Every CSV the project writes goes through SafeWriter: no other module calls the csv
    module's writers."""
    from tests.conftest import ROOT

    writers = [
        path.relative_to(ROOT).as_posix()
        for package in ("worker", "contracts")
        for path in (ROOT / package).rglob("*.py")
        if ("csv.writer(" in (text := path.read_text("utf-8")) or "csv.DictWriter(" in text)
    ]

    assert writers == ["worker/audit/safe_csv.py"]
