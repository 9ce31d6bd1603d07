"""The input hash: one key for the complete inputs of one judgement (SPEC §3)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from contracts.messages import AttributionResult
from contracts.metric import METRIC_VERSION


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8.

    surrogatepass keeps a lone surrogate (legal in JSON text, not in UTF-8) hashable
    instead of crashing the worker on a hostile message.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def hash_inputs(message: AttributionResult) -> dict[str, Any]:
    """Exactly what the hash covers; what the judge produced and metadata are left out."""
    return {
        "metric_version": METRIC_VERSION,
        "contract_version": message.contract_version,
        "answer": message.answer,
        "contexts": [context.model_dump(mode="json") for context in message.contexts],
        "required_claim_ids": sorted(message.required_claim_ids),
        "grader": message.grader.model_dump(mode="json"),
    }


def input_hash(message: AttributionResult) -> str:
    """Lowercase hex SHA-256 of the canonical encoding of hash_inputs(message)."""
    return hashlib.sha256(canonical_json(hash_inputs(message))).hexdigest()
