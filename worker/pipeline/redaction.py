"""Excerpts of answers, as a stored attempt may keep them (SPEC §9, EVIDENCE_KEEP_EXCERPTS),
and the redacted text a record line carries with EVIDENCE_LOG_RAW_TEXT.

redact() catches three kinds of personal data, each replaced by a bracketed name:
- e-mail addresses (`name@host.tld`): `[email]`;
- payment card numbers, 13 to 19 digits, optionally grouped by spaces or hyphens, that pass
  the Luhn check: `[card]`;
- phone numbers, 8 to 15 digits with an optional leading `+` and spaces, dots, hyphens or
  parentheses between them (an ISO date, 2026-12-04, is not one): `[phone]`.
It does not catch names, postal addresses or national ID numbers: an excerpt is the cited
span of an answer, kept for a reviewer, and stays off unless a team opts in.

Written here rather than taken from a library: the libraries that detect personal data
(Presidio, scrubadub) bring language models or large dependency trees for far more kinds
than these three patterns, and an excerpt is cut in the worker's scoring path.
"""

from __future__ import annotations

import re
from typing import Any, Final

from contracts import AttributionResult

_EMAIL: Final = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# A run of digits with the separators phone and card numbers are written with, taken whole so
# that no part of a longer number is mistaken for one; number() decides what the run is.
_NUMBER: Final = re.compile(r"(?<!\w)\+?\(?\d[\d ().-]*\d(?!\w)")
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def _luhn(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = int(char)
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _number(match: re.Match[str]) -> str:
    run = match.group()
    digits = re.sub(r"\D", "", run)
    if 13 <= len(digits) <= 19 and _luhn(digits):
        return "[card]"
    if 8 <= len(digits) <= 15 and not _DATE.fullmatch(run.strip()):
        return "[phone]"
    return run


def redact(text: str) -> str:
    """`text` with e-mail addresses, payment card numbers and phone numbers replaced."""
    return _NUMBER.sub(_number, _EMAIL.sub("[email]", text))


def excerpt(answer: str, span: tuple[int, int], max_chars: int) -> str | None:
    """The cited span of the answer, redacted, at most `max_chars` characters; None when the
    span is not 0 <= start < end <= len(answer) (triage's cited_span_invalid)."""
    start, end = span
    if not 0 <= start < end <= len(answer):
        return None
    return redact(answer[start:end])[:max_chars]


def logged_text(message: AttributionResult, max_chars: int) -> dict[str, Any]:
    """The answer and each context's text, redacted and cut to `max_chars`, as a record line
    carries them with EVIDENCE_LOG_RAW_TEXT: names that say they are redacted, so that the
    log processor that blanks raw `answer` and `contexts` fields lets them through."""
    return {
        "answer_redacted": redact(message.answer)[:max_chars],
        "contexts_redacted": [
            {"document_id": context.document_id, "text": redact(context.text)[:max_chars]}
            for context in message.contexts
        ],
    }
