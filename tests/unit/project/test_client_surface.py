"""worker.client's public surface, pinned (as httpx pins its exports): the one public class,
its public methods and attributes, and each method's parameters, kinds and defaults."""

from __future__ import annotations

import inspect
import math
import re
from typing import Any

import pytest

import worker.client
from worker.client import EvidenceClient
from worker.settings import Settings

# Per public method (and __init__): (name, kind, default) of each parameter after self/cls.
KEYWORD = inspect.Parameter.KEYWORD_ONLY
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
EMPTY = inspect.Parameter.empty
SIGNATURES: dict[str, list[tuple[str, Any, Any]]] = {
    "__init__": [
        ("settings", POSITIONAL, EMPTY),
        ("store", KEYWORD, None),
        ("sample_rate", KEYWORD, None),
    ],
    "close": [],
    "from_env": [("sample_rate", KEYWORD, None)],
    "history": [("input_hash", POSITIONAL, EMPTY)],
    "lookup": [
        ("contract_version", KEYWORD, EMPTY),
        ("answer", KEYWORD, EMPTY),
        ("contexts", KEYWORD, EMPTY),
        ("required_claim_ids", KEYWORD, EMPTY),
        ("grader", KEYWORD, EMPTY),
        ("expected_evidence", KEYWORD, None),
    ],
    "publish": [("message", POSITIONAL, EMPTY)],
    "publish_batch": [("messages", POSITIONAL, EMPTY)],
}


def test_the_module_defines_one_public_name() -> None:
    """EvidenceClient is the only public name worker.client defines (its imports aside)."""
    defined = sorted(
        name
        for name, value in vars(worker.client).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == "worker.client"
    )
    assert defined == ["EvidenceClient"]


def test_the_client_s_public_methods() -> None:
    """Exactly these methods are public; a new one is a decision this list records."""
    public = sorted(name for name in vars(EvidenceClient) if not name.startswith("_"))
    assert public == ["close", "from_env", "history", "lookup", "publish", "publish_batch"]


def test_from_env_is_a_classmethod() -> None:
    """from_env builds a client from the environment without an instance."""
    assert isinstance(inspect.getattr_static(EvidenceClient, "from_env"), classmethod)


def test_each_method_s_parameters_kinds_and_defaults() -> None:
    """Parameter names (keyword-only ones are public names too), kinds and defaults."""
    found = {
        name: [
            (parameter.name, parameter.kind, parameter.default)
            for parameter in inspect.signature(getattr(EvidenceClient, name)).parameters.values()
            if parameter.name not in {"self", "cls"}
        ]
        for name in SIGNATURES
    }
    assert found == SIGNATURES


class NoStore:
    """Stands in for a store: the client only keeps it until a call needs it."""

    def close(self) -> None:
        pass


def test_a_client_s_public_attributes() -> None:
    """A client keeps its settings, its store and its sample rate, all public; nothing else is."""
    settings = Settings()
    store = NoStore()
    client = EvidenceClient(settings, store=store, sample_rate=0.25)  # type: ignore[arg-type]
    public = {name: value for name, value in vars(client).items() if not name.startswith("_")}
    assert public == {"settings": settings, "store": store, "sample_rate": 0.25}


@pytest.mark.parametrize(
    ("rate", "error"),
    [
        (1.5, "sample rate 1.5 is outside 0.0..1.0"),
        (-0.25, "sample rate -0.25 is outside 0.0..1.0"),
        (math.nan, "sample rate nan is not a finite number in 0.0..1.0"),
        ("0.25", "sample rate '0.25' is not a number in 0.0..1.0"),
    ],
    ids=str,
)
def test_a_sample_rate_that_is_no_share_is_refused_before_anything_opens(
    rate: object, error: str
) -> None:
    """ValueError at construction, before the store is opened (none is given here)."""
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        EvidenceClient(Settings(store_url="redis://127.0.0.1:1/0"), sample_rate=rate)  # type: ignore[arg-type]


def test_a_sample_rate_of_0_or_1_is_kept_as_a_float() -> None:
    for rate, kept in [(0, 0.0), (1, 1.0), (0.1, 0.1)]:
        client = EvidenceClient(Settings(), store=NoStore(), sample_rate=rate)  # type: ignore[arg-type]
        assert type(client.sample_rate) is float
        assert client.sample_rate == kept
