"""What the commands print, in one place: a row as one JSON line (dumps_line), where a
command read and wrote (`store …`, `broker …`, named alike in every summary line), the choice
between a table and JSON lines (`--format`, `--quiet`), and the table itself.

The table is drawn with rich (a dependency of Ragas already, pinned in requirements.lock):
it sizes columns to the terminal, cuts long cells with an ellipsis, and honours NO_COLOR and
a dumb TERM by itself. It is imported only when a table is drawn: a pipe, which gets the JSON
lines, never pays for it.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from worker.settings import masked_url

TABLE = "table"
JSONL = "jsonl"
CSV = "csv"
QUIET = "quiet"
# Rows a table shows; the rest are counted under it (a terminal shows a screenful anyway).
TABLE_ROWS = 50
SCORE_COLUMNS = ("case", "status", "value", "owner", "missing IDs", "cache")
GATE_COLUMNS = ("case", "status", "value", "owner", "missing IDs", "blocking")
STATUS_STYLES = {"pass": "green", "fail": "red", "invalid": "magenta", "review": "yellow"}


def where(*, store: str | None = None, broker: str | None = None) -> str:
    """`store URL`, `broker URL` or both, passwords masked: how every summary line names
    what a command read and wrote (docs/cli.md, "Where a command reads and writes")."""
    parts = []
    if store is not None:
        parts.append(f"store {masked_url(store)}")
    if broker is not None:
        parts.append(f"broker {';'.join(masked_url(url) for url in broker.split(';'))}")
    return ", ".join(parts)


def located(summary: str, *, store: str | None = None, broker: str | None = None) -> str:
    """A summary line with where() in parentheses at its end."""
    return f"{summary} ({where(store=store, broker=broker)})"


def add_format_options(
    parser: argparse.ArgumentParser, formats: Sequence[str] = (TABLE, JSONL), *, what: str = ""
) -> None:
    """--format (a table on a terminal, else JSON lines) and --quiet (the summary only)."""
    said = {
        TABLE: "a compact table",
        JSONL: "one JSON object per line",
        CSV: "a header, then one line per row, lists as JSON text, a cell starting with = + - "
        "@ tab, CR or ' written with a leading ' so no spreadsheet runs it as a formula",
    }
    parser.add_argument(
        "--format",
        choices=formats,
        help="; ".join(f"{name}: {said[name]}" for name in formats)
        + f"{what} (default: {TABLE} when stdout is a terminal, else {JSONL})",
    )
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="print the summary line only (on stderr)"
    )


def chosen_format(args: argparse.Namespace, stream: TextIO | None = None) -> str:
    """QUIET, else --format, else TABLE on a terminal and JSONL anywhere else."""
    if getattr(args, "quiet", False):
        return QUIET
    if getattr(args, "format", None):
        return str(args.format)
    return TABLE if is_terminal(stream or sys.stdout) else JSONL


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Table:
    """Rows for the terminal: the first TABLE_ROWS kept, the others counted, drawn at the end."""

    def __init__(
        self, columns: Sequence[str], *, wrap: str | None = None, limit: int = TABLE_ROWS
    ) -> None:
        """`wrap`: the one column whose cells may take more lines (a reason, a hash); the
        others keep to one line, cut with an ellipsis."""
        self.columns = tuple(columns)
        self.wrap = wrap
        self.limit = limit
        self.rows: list[tuple[str, ...]] = []
        self.more = 0

    def add(self, *cells: Any) -> None:
        if len(self.rows) < self.limit:
            self.rows.append(tuple(cell_text(cell) for cell in cells))
        else:
            self.more += 1

    def print(self, stream: TextIO | None = None) -> None:
        """Draw the table on `stream` (stdout), a line after it for the rows left out."""
        from rich import box
        from rich.console import Console
        from rich.table import Table as RichTable
        from rich.text import Text

        console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=False)
        table = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        widths = fitted_widths(
            [
                max([len(column), *(len(row[i]) for row in self.rows)])
                for i, column in enumerate(self.columns)
            ],
            floors=[len(column) for column in self.columns],
            room=console.width - COLUMN_GAP * (len(self.columns) - 1) - EDGES,
            folds=self.columns.index(self.wrap) if self.wrap in self.columns else None,
        )
        for column, width in zip(self.columns, widths, strict=True):
            wraps = column == self.wrap
            table.add_column(
                column,
                width=width,
                overflow="fold" if wraps else "ellipsis",
                no_wrap=not wraps,
            )
        status = self.columns.index("status") if "status" in self.columns else -1
        for row in self.rows:
            # Text, never markup: a case ID such as "[red]x" is shown as it is.
            table.add_row(
                *(
                    Text(cell, style=STATUS_STYLES.get(cell, "") if i == status else "")
                    for i, cell in enumerate(row)
                )
            )
        console.print(table)
        if self.more:
            console.print(
                Text(
                    f"… and {self.more:,} more rows: --format jsonl prints every one",
                    style="dim",
                )
            )


# What rich's SIMPLE_HEAD table without edges adds to its columns' widths, as measured on a line:
# three spaces between two columns (padding, the blank rule, padding), two more in all.
COLUMN_GAP = 3
EDGES = 2


def fitted_widths(
    natural: list[int], *, floors: list[int], room: int, folds: int | None = None
) -> list[int]:
    """Column widths that fit `room` characters: each column's natural width, cut one
    character at a time, never below its floor: first the column that folds onto more lines
    (`folds`, which loses nothing), then the widest. A table wider than the terminal would lose
    its last columns whole to rich's cropping (the cache column on 80 columns)."""
    widths = list(natural)
    if folds is not None:
        widths[folds] = max(floors[folds], min(widths[folds], room - sum(natural) + natural[folds]))
    while sum(widths) > room:
        cuttable = [i for i, width in enumerate(widths) if width > floors[i]]
        if not cuttable:
            break  # narrower than the floors: the terminal crops, as any program's would
        widest = max(cuttable, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def cell_text(value: Any) -> str:
    """A value as a cell: '-' for none, lists joined, and every character a terminal would act
    on (escapes, newlines, a lone surrogate) written as its Python escape."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, list | tuple):
        return ", ".join(cell_text(item) for item in value) or "-"
    return printable(str(value))


def printable(text: str) -> str:
    """`text` with each character that is not printable as its escape (\\x1b, \\n, \\ud800)."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )


class Discard(io.StringIO):
    """A text stream that keeps nothing: where record lines go when a table stands in."""

    def write(self, text: str) -> int:
        return len(text)


def dumps_line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
