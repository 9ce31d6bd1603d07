"""The input hash: one key for the complete inputs of one judgement (SPEC §3)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from contracts.messages import AttributionResult, Context, Grader
from contracts.metric import METRIC_VERSION

HASHED_FIELDS = {"contract_version", "answer", "contexts", "required_claim_ids", "grader"}


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: the bytes of Python's
    `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.

    orjson writes those bytes about twice as fast once floats are spelled as json spells them
    (orjson writes 1e-05 as 0.00001). What orjson refuses (lone surrogates, integers beyond 64
    bits) takes the json path, where surrogatepass keeps a lone surrogate (legal in JSON text,
    not in UTF-8) hashable instead of crashing the worker on a hostile message.
    """
    return _encode(value, _floats_spelled_as_json(value))


def _encode(value: Any, floats_spelled: Any) -> bytes:
    """orjson's bytes of `floats_spelled`, or json's of `value` where orjson refuses."""
    try:
        return orjson.dumps(floats_spelled, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass")


def _floats_spelled_as_json(value: Any) -> Any:
    """`value` with every float replaced by json's spelling of it, as a ready-made fragment.

    Strings, most of a message, are passed over without a call: this runs on every message.
    """
    if isinstance(value, dict):
        return {
            key: child if type(child) is str else _floats_spelled_as_json(child)
            for key, child in value.items()
        }
    if isinstance(value, list | tuple):
        return [child if type(child) is str else _floats_spelled_as_json(child) for child in value]
    if isinstance(value, float):
        return orjson.Fragment(json_float(value))
    return value


def json_float(value: float) -> str:
    """How json.dumps writes a float (its floatstr): repr, or NaN/Infinity/-Infinity."""
    if math.isfinite(value):
        return float.__repr__(value)
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def hash_inputs(message: AttributionResult) -> dict[str, Any]:
    """Exactly what the hash covers; what the judge produced and metadata are left out.

    The same dict as judgement_inputs(...) of the message's parts, dumped in one call.
    """
    inputs = message.model_dump(mode="json", include=HASHED_FIELDS)
    inputs["metric_version"] = METRIC_VERSION
    inputs["required_claim_ids"].sort()
    if message.expected_evidence:  # only when given: every hash from before stays the same
        inputs["expected_evidence"] = message.expected_evidence
    return inputs


def judgement_inputs(
    *,
    contract_version: str,
    answer: str,
    contexts: Sequence[Context],
    required_claim_ids: Sequence[str],
    grader: Grader,
    expected_evidence: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The hashed inputs from their parts: known before the grader runs, so an upstream job
    can ask for an existing outcome before paying for a judgement."""
    inputs: dict[str, Any] = {
        "metric_version": METRIC_VERSION,
        "contract_version": contract_version,
        "answer": answer,
        "contexts": [context.model_dump(mode="json") for context in contexts],
        "required_claim_ids": sorted(required_claim_ids),
        "grader": grader.model_dump(mode="json"),
    }
    if expected_evidence:
        inputs["expected_evidence"] = {key: list(ids) for key, ids in expected_evidence.items()}
    return inputs


def hash_of(inputs: dict[str, Any]) -> str:
    """Lowercase hex SHA-256 of the canonical encoding of judgement inputs."""
    return hashlib.sha256(canonical_json(inputs)).hexdigest()


def input_hash(message: AttributionResult) -> str:
    """The cache key of a message: hash_of(hash_inputs(message)), the same bytes hashed.

    By the schema every hashed field but the grader is text, or lists and objects of text:
    only the grader's free-form params can hold a float, so only the grader is walked (the
    contexts were most of the walk's time, on every message).
    """
    inputs = hash_inputs(message)
    floats_spelled = {**inputs, "grader": _floats_spelled_as_json(inputs["grader"])}
    return hashlib.sha256(_encode(inputs, floats_spelled)).hexdigest()
