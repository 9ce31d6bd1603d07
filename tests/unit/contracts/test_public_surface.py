"""contracts' public surface, pinned (as httpx pins its exports): `contracts.__all__` is exactly
these names, each resolves, and each class or function is contracts' own."""

from __future__ import annotations

import inspect

import contracts

PUBLIC_NAMES = [
    "METRIC_VERSION",
    "RAGAS_VERSION",
    "Alert",
    "AlertRecord",
    "Attempt",
    "AttributionResult",
    "Citation",
    "Context",
    "ContractDriftAlert",
    "ContractDriftRecord",
    "CoverageRecord",
    "Decision",
    "Grader",
    "Judgement",
    "Outcome",
    "Policy",
    "PolicyError",
    "ReleaseRow",
    "ScoreRecord",
    "decide",
    "evidence_coverage",
    "input_hash",
    "json_schemas",
    "judge",
    "parse_policy",
    "policy_from_threshold",
    "score_claims",
]


def test_all_is_exactly_the_public_names() -> None:
    """Adding or dropping a public name is a decision this list records."""
    assert contracts.__all__ == PUBLIC_NAMES


def test_every_public_name_resolves() -> None:
    """Each name in __all__ is an attribute of the package (the Ragas ones on first use)."""
    missing = [name for name in contracts.__all__ if not hasattr(contracts, name)]
    assert missing == []


def test_every_public_class_and_function_is_defined_in_contracts() -> None:
    """No public name is a re-export of another library's object."""
    foreign = {
        name: value.__module__
        for name in contracts.__all__
        if inspect.isclass(value := getattr(contracts, name)) or inspect.isfunction(value)
        if not value.__module__.startswith("contracts.")
    }
    assert foreign == {}
