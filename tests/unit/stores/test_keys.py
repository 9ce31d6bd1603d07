"""Key names hold existing stores' data: their spelling must never change."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from worker.stores.redis.keys import case_key, contract_key

# Any text a message may carry in a case ID or contract version: lone surrogates included.
TEXTS = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def test_key_names_are_fixed() -> None:
    assert contract_key("p", "support-faq/2026-10", "refund-1") == (
        "p:contract:" + _digest(["support-faq/2026-10", "refund-1"])
    )
    odd = 'Ré"f\n\ud800'
    assert contract_key("p", None, odd) == "p:contract:" + _digest([None, odd])
    assert case_key("p", "refund-1") == "p:case:" + _digest("refund-1")


@given(TEXTS, TEXTS)
def test_key_names_hash_the_json_dumps_spelling(version: str, case_id: str) -> None:
    assert contract_key("p", version, case_id) == "p:contract:" + _digest([version, case_id])
    assert case_key("p", case_id) == "p:case:" + _digest(case_id)
