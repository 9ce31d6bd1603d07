"""Excerpts kept beside an attempt (SPEC §9, EVIDENCE_KEEP_EXCERPTS): what the redactor
catches, what it leaves alone, and the cut."""

from __future__ import annotations

import pytest

from worker.pipeline.redaction import excerpt, redact


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("write to jane.doe+refunds@example.co.uk today", "write to [email] today"),
        ("card 4111 1111 1111 1111 on file", "card [card] on file"),
        ("card 4111-1111-1111-1111.", "card [card]."),
        ("amex 378282246310005", "amex [card]"),
        ("call +44 20 7946 0958 or (555) 123-4567.", "call [phone] or [phone]."),
        ("call 555.123.4567", "call [phone]"),
    ],
)
def test_email_card_and_phone_numbers_are_replaced(text: str, redacted: str) -> None:
    assert redact(text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "Refunds within 30 days, to the original payment method.",
        "order 12345, ticket 1234567",  # fewer than 8 digits
        "shipped 2026-12-04",  # an ISO date is not a phone number
        "card 4111 1111 1111 1112 fails the Luhn check",  # 16 digits: not a phone either
        "version 3.2.0 at 12:30",
        "sku abc12345678",  # digits inside a word
    ],
)
def test_other_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_an_excerpt_is_the_span_redacted_then_cut() -> None:
    answer = "Mail ann@example.com for a refund within 30 days."

    assert excerpt(answer, (0, 20), 280) == "Mail [email]"
    assert excerpt(answer, (0, len(answer)), 10) == "Mail [emai"


@pytest.mark.parametrize("span", [(5, 5), (9, 3), (-1, 4), (0, 999)])
def test_an_invalid_span_has_no_excerpt(span: tuple[int, int]) -> None:
    assert excerpt("short answer", span, 280) is None
