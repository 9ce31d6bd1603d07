"""Table markup for the report's HTML pages (worker/report/html.py, report_days_html.py)."""

from __future__ import annotations

from html import escape


def table(header: list[str], rows: list[list[str]], css: str) -> list[str]:
    """A table of cells already rendered by `td` (so escaped), under an escaped header."""
    head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
    return [
        f'<table class="{css}">',
        f"<thead><tr>{head}</tr></thead>",
        "<tbody>",
        *("<tr>" + "".join(row) + "</tr>" for row in rows),
        "</tbody>",
        "</table>",
    ]


def td(text: str | int, css: str = "") -> str:
    """One escaped cell, with a class when given."""
    attribute = f' class="{css}"' if css else ""
    return f"<td{attribute}>{escape(str(text))}</td>"
