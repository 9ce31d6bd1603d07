"""How every command writes a count for people: digits grouped by commas ("12,000"), and the
noun singular for exactly one ("1 line", "2 lines"). JSON output carries plain integers;
this is for the lines on stderr and the text report only."""

from __future__ import annotations

# Nouns whose plural is not the noun and an "s" (or "es" after a sibilant).
IRREGULAR = {"entry": "entries", "query": "queries"}


def number(count: int) -> str:
    """A count as people read it: 12,000."""
    return f"{count:,}"


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, agreeing: "1 row", "0 rows", "1,200 rows", "3 hashes"."""
    return f"{count:,} {noun if count == 1 else plural(noun)}"


def plural(noun: str) -> str:
    """The English plural of the nouns our lines count (regular ones, and IRREGULAR)."""
    if noun in IRREGULAR:
        return IRREGULAR[noun]
    if noun.endswith(("s", "sh", "ch", "x")):
        return noun + "es"
    return noun + "s"
