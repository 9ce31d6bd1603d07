"""The input hash: golden vectors pin the encoding; each field is either in or out (SPEC §3).

The golden digests below were computed once, outside the project's code, as

    hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ).hexdigest()

where obj is exactly {"metric_version": "evidence_coverage/1", "contract_version", "answer",
"contexts" (in order, each {"document_id", "text"}), "required_claim_ids" (sorted, duplicates
kept, not stripped), "grader" (the whole object, params included)} of the message, and then
pasted here as literals. If a vector changes, the cache key changed: every stored first
outcome is orphaned, so METRIC_VERSION or contract_version must move with it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import AttributionResult, input_hash
from contracts.hashing import canonical_json, hash_inputs, judgement_inputs

MessageFactory = Callable[..., AttributionResult]

GRADER = {
    "name": "claim-attributor",
    "version": "3.2.0",
    "model": "gpt-4o-mini-2024-07-18",
    "prompt": "Say which required claims the contexts support.",
    "params": {"temperature": 0.0, "seed": 7},
}

GOLDEN = [
    pytest.param(
        {
            "case_id": "refund-001",
            "contract_version": "support-faq/2026-10",
            "required_claim_ids": ["refund-window", "refund-method", "support-channel"],
            "supported_claim_ids": ["refund-window", "support-channel"],
            "answer": "Returns are accepted within 30 days. Reach support through live chat.",
            "contexts": [
                {
                    "document_id": "policy/returns#window",
                    "text": "Items may be returned within 30 days.",
                },
                {"document_id": "help/contact#chat", "text": "Support is available by live chat."},
            ],
            "grader": GRADER,
        },
        "66cf6255e15c6b738c43f9e2d0a0074dc3769b7bea70f4fc54bcaefcd6510772",
        id="ascii-refund",
    ),
    pytest.param(
        {
            "case_id": "r\u00fcckgabe-7",
            "contract_version": "faq-de/2026-11",
            "required_claim_ids": ["r\u00fcckgabe-frist", "Z-claim", "a-claim"],
            "supported_claim_ids": [],
            "answer": (
                "R\u00fcckgaben sind innerhalb von 30 Tagen m\u00f6glich \u2014 "
                "\u8fd4\u54c1\u306f30\u65e5\u4ee5\u5185\u3002"
            ),
            "contexts": [
                {
                    "document_id": "richtlinie/r\u00fcckgabe",
                    "text": "Artikel k\u00f6nnen binnen 30 Tagen zur\u00fcckgegeben werden. \u2713",
                }
            ],
            "grader": {
                "name": "pr\u00fcfer",
                "version": "1.0",
                "model": "m",
                "prompt": "Welche Aussagen sind belegt?",
                "params": {},
            },
        },
        "ab22e535c39cfc42e3efac83e96dcf5bc3efd0ac6ced4502d7204b4e323e1d35",
        id="non-ascii-utf8",
    ),
    pytest.param(
        {
            "case_id": "nested-params",
            "contract_version": "c/3",
            "required_claim_ids": ["b", "a", "b", " c"],
            "supported_claim_ids": ["a"],
            "answer": "a",
            "contexts": [],
            "grader": {
                "name": "g",
                "version": "2",
                "model": "m",
                "prompt": "p",
                "params": {
                    "temperature": 0.25,
                    "top_p": 1.0,
                    "sampling": {"seed": 42, "penalties": {"presence": -0.5, "frequency": 1e-05}},
                    "stop": ["\n", None, True],
                },
            },
        },
        "5de796421751e873156a886003e8693893b122cea1d573f9d91f985653f173ff",
        id="nested-float-params-duplicates-unstripped",
    ),
]


@pytest.mark.parametrize(("fields", "digest"), GOLDEN)
def test_golden_vector_from_dict(fields: dict[str, Any], digest: str) -> None:
    """A message validated from a dict hashes to its independently computed golden digest."""
    assert input_hash(AttributionResult.model_validate(fields)) == digest


@pytest.mark.parametrize(("fields", "digest"), GOLDEN)
def test_golden_vector_from_json(fields: dict[str, Any], digest: str) -> None:
    """The same message arriving as JSON text hashes to the same golden digest."""
    assert input_hash(AttributionResult.model_validate_json(json.dumps(fields))) == digest


def test_hash_is_lowercase_hex_sha256(message: MessageFactory) -> None:
    """The hash is 64 lowercase hexadecimal characters."""
    assert re.fullmatch(r"[0-9a-f]{64}", input_hash(message()))


def test_hash_is_deterministic(message: MessageFactory) -> None:
    """Two separately built equal messages hash to the same key."""
    assert input_hash(message()) == input_hash(message())


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"supported_claim_ids": ["refund-window"]}, id="supported-changed"),
        pytest.param({"supported_claim_ids": []}, id="supported-empty"),
        pytest.param(
            {
                "citations": [
                    {
                        "claim_id": "refund-window",
                        "document_id": "policy/returns#window",
                        "answer_span": [0, 36],
                    }
                ]
            },
            id="citations",
        ),
        pytest.param({"case_id": "refund-002"}, id="case_id"),
        pytest.param(
            {"produced_at": datetime(2026, 12, 2, 9, 30, tzinfo=UTC).isoformat()}, id="produced_at"
        ),
        pytest.param({"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}, id="trace_id"),
        pytest.param({"policy_group": "disclosure"}, id="policy_group"),
        pytest.param({"blocking": False}, id="blocking"),
        pytest.param(
            {"required_claim_ids": ["support-channel", "refund-window", "refund-method"]},
            id="required-order",
        ),
    ],
)
def test_hash_ignores(message: MessageFactory, overrides: dict[str, Any]) -> None:
    """What the judge produced, per-sample metadata and required-ID order leave the hash alone."""
    assert input_hash(message(**overrides)) == input_hash(message())


CONTEXTS = [
    {"document_id": "policy/returns#window", "text": "Items may be returned within 30 days."},
    {"document_id": "help/contact#chat", "text": "Support is available by live chat."},
]


def _contexts_with(index: int, field: str, value: str) -> list[dict[str, str]]:
    contexts = copy.deepcopy(CONTEXTS)
    contexts[index][field] = value
    return contexts


def _grader_with(**changes: Any) -> dict[str, Any]:
    return {**GRADER, **changes}


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"answer": "Returns are accepted within 14 days."}, id="answer"),
        pytest.param(
            {"answer": "Returns are accepted within 30 days. Reach support through live chat. "},
            id="answer-trailing-space",
        ),
        pytest.param({"contexts": _contexts_with(0, "text", "Returns: 14 days.")}, id="ctx0-text"),
        pytest.param({"contexts": _contexts_with(1, "text", "Chat is closed.")}, id="ctx1-text"),
        pytest.param(
            {"contexts": _contexts_with(0, "document_id", "policy/returns#v2")},
            id="ctx0-document_id",
        ),
        pytest.param(
            {"contexts": _contexts_with(1, "document_id", "help/contact#email")},
            id="ctx1-document_id",
        ),
        pytest.param({"contexts": CONTEXTS[:1]}, id="context-dropped"),
        pytest.param(
            {
                "required_claim_ids": [
                    "refund-window",
                    "refund-method",
                    "support-channel",
                    "warranty",
                ]
            },
            id="required-added",
        ),
        pytest.param(
            {
                "required_claim_ids": [
                    "refund-window",
                    "refund-method",
                    "support-channel",
                    "refund-method",
                ]
            },
            id="required-duplicate",
        ),
        pytest.param(
            {"required_claim_ids": ["refund-window ", "refund-method", "support-channel"]},
            id="required-surrounding-whitespace-not-stripped",
        ),
        pytest.param(
            {"required_claim_ids": ["refund window", "refund-method", "support-channel"]},
            id="required-inner-whitespace",
        ),
        pytest.param(
            {"required_claim_ids": ["Refund-window", "refund-method", "support-channel"]},
            id="required-case",
        ),
        pytest.param({"contract_version": "support-faq/2026-11"}, id="contract_version"),
        pytest.param({"grader": _grader_with(name="other-attributor")}, id="grader-name"),
        pytest.param({"grader": _grader_with(version="3.2.1")}, id="grader-version"),
        pytest.param({"grader": _grader_with(model="gpt-4o-2024-08-06")}, id="grader-model"),
        pytest.param({"grader": _grader_with(prompt="Which claims?")}, id="grader-prompt"),
        pytest.param(
            {"grader": _grader_with(params={"temperature": 0.2, "seed": 7})},
            id="grader-params-value",
        ),
        pytest.param(
            {"grader": _grader_with(params={"temperature": 0.0, "seed": 7, "top_p": 0.9})},
            id="grader-params-added-key",
        ),
        pytest.param({"grader": _grader_with(params={})}, id="grader-params-emptied"),
        pytest.param(
            {"grader": _grader_with(params={"temperature": 0.0, "seed": {"value": 7}})},
            id="grader-params-nested",
        ),
    ],
)
def test_hash_depends_on(message: MessageFactory, overrides: dict[str, Any]) -> None:
    """Every input of the judgement changes the hash when it changes."""
    assert input_hash(message(**overrides)) != input_hash(message())


def test_context_order_matters(message: MessageFactory) -> None:
    """Contexts are hashed in rank order: the same passages reordered are different inputs."""
    ranked = message(contexts=CONTEXTS)
    reordered = message(contexts=list(reversed(CONTEXTS)))

    assert input_hash(ranked) != input_hash(reordered)


def test_nested_param_order_does_not_matter(message: MessageFactory) -> None:
    """Grader params are encoded with sorted keys at every depth, so key order is irrelevant."""
    first = _grader_with(params={"a": {"x": 1, "y": [1.5, 2]}, "b": 0.5})
    second = _grader_with(params={"b": 0.5, "a": {"y": [1.5, 2], "x": 1}})

    assert input_hash(message(grader=first)) == input_hash(message(grader=second))


def json_reference(value: Any) -> bytes:
    """SPEC §3's encoding, spelled out with the standard library alone."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)  # past 64 bits: orjson refuses those
    | st.floats()  # NaN, infinities, subnormals and every exponent json spells its own way
    | st.text(),  # lone surrogates, control characters, U+2028, astral planes
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


@given(value=JSON_VALUES)
def test_canonical_json_writes_exactly_the_json_module_s_bytes(value: Any) -> None:
    """The fast encoder and the standard library agree byte for byte on any JSON value."""
    assert canonical_json(value) == json_reference(value)


# `message` is a stateless factory: sharing it across examples is safe.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4), answer=st.text())
def test_input_hash_is_the_sha256_of_json_module_bytes(
    message: MessageFactory, params: dict[str, Any], answer: str
) -> None:
    """The message's hash, which walks only the grader for floats, is SPEC §3's hash of all."""
    sample = message(answer=answer, grader={**GRADER, "params": params})
    reference = hashlib.sha256(json_reference(hash_inputs(sample))).hexdigest()

    assert input_hash(sample) == reference


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"t": 1e-05}, b'{"t":1e-05}', id="small-float-in-exponent-form"),
        pytest.param([1e16, -0.0], b"[1e+16,-0.0]", id="large-float-and-negative-zero"),
        pytest.param(float("nan"), b"NaN", id="nan"),
        pytest.param([float("inf"), -float("inf")], b"[Infinity,-Infinity]", id="infinities"),
        pytest.param({"k": ["a", {"f": 2.5}]}, b'{"k":["a",{"f":2.5}]}', id="float-under-strings"),
        pytest.param(2**64, b"18446744073709551616", id="integer-beyond-64-bits"),
        pytest.param("\ud800", b'"\xed\xa0\x80"', id="lone-surrogate-kept"),
        pytest.param({"b": 1, "a": "\u00e9"}, '{"a":"\u00e9","b":1}'.encode(), id="sorted-utf8"),
    ],
)
def test_canonical_json_spells_the_awkward_values_like_json(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected


def test_hash_inputs_of_a_message_equal_judgement_inputs_of_its_parts(
    message: MessageFactory,
) -> None:
    """The worker's one-call dump and the upstream client's parts give one dict, so one hash."""
    sample = message(required_claim_ids=["c2", "C1", "c2"])
    assert hash_inputs(sample) == judgement_inputs(
        contract_version=sample.contract_version,
        answer=sample.answer,
        contexts=sample.contexts,
        required_claim_ids=sample.required_claim_ids,
        grader=sample.grader,
    )
