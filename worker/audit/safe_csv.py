"""Every CSV the project writes, safe to open in a spreadsheet (OWASP: CSV injection).

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is one a spreadsheet
may run as a formula (`=HYPERLINK(...)`, `+1+cmd|' /C calc'!A0`, `-2+3`, `@SUM(1+1)`); it is
written with a leading `'`, which spreadsheets read as "text follows" and do not show. Every
cell is treated alike, numbers included, as OWASP advises: a negative number would read as
the text `'-0.5`; the project writes none (values, thresholds and candidates lie in 0..1).
A cell that already starts with `'` gets one more, so that restored() gives back exactly
the cell that was written: a spreadsheet shows `''x` as `'x`, and a reader of our own files
(`calibrate --decisions`) strips exactly one.

RFC 4180 quoting is the csv module's, over the neutralised cells.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Final, TextIO

TRIGGERS: Final = ("=", "+", "-", "@", "\t", "\r", "'")
MARK: Final = "'"


def neutralised(cell: str) -> str:
    """The cell as written: with a leading `'` when a spreadsheet could read it as a formula
    (or it starts with `'` itself)."""
    return MARK + cell if cell.startswith(TRIGGERS) else cell


def restored(cell: str) -> str:
    """A cell as read back from a file neutralised() wrote: the cell before it was written."""
    return cell[1:] if cell.startswith(MARK) else cell


class SafeWriter:
    """csv.writer whose every cell goes through neutralised()."""

    def __init__(self, out: TextIO) -> None:
        self._writer = csv.writer(out)  # RFC 4180: quoted as needed, lines end in CRLF

    def writerow(self, cells: Iterable[str]) -> None:
        self._writer.writerow([neutralised(cell) for cell in cells])
