"""The input hash: one key for the complete inputs of one judgement (SPEC §3)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from contracts.messages import AttributionResult, Context, Grader
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
    return judgement_inputs(
        contract_version=message.contract_version,
        answer=message.answer,
        contexts=message.contexts,
        required_claim_ids=message.required_claim_ids,
        grader=message.grader,
    )


def judgement_inputs(
    *,
    contract_version: str,
    answer: str,
    contexts: Sequence[Context],
    required_claim_ids: Sequence[str],
    grader: Grader,
) -> dict[str, Any]:
    """The hashed inputs from their parts: known before the grader runs, so an upstream job
    can ask for an existing outcome before paying for a judgement."""
    return {
        "metric_version": METRIC_VERSION,
        "contract_version": contract_version,
        "answer": answer,
        "contexts": [context.model_dump(mode="json") for context in contexts],
        "required_claim_ids": sorted(required_claim_ids),
        "grader": grader.model_dump(mode="json"),
    }


def hash_of(inputs: dict[str, Any]) -> str:
    """Lowercase hex SHA-256 of the canonical encoding of judgement inputs."""
    return hashlib.sha256(canonical_json(inputs)).hexdigest()


def input_hash(message: AttributionResult) -> str:
    """The cache key of a message: hash_of(hash_inputs(message))."""
    return hash_of(hash_inputs(message))
