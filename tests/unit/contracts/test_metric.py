"""The evidence_coverage metric: every rule, its order and its exact reason text (SPEC §1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import METRIC_VERSION, evidence_coverage, score_claims

ERROR = "Error executing metric evidence_coverage: "

# (required_claim_ids, supported_claim_ids, expected value, expected reason), by id.
CASES = [
    pytest.param(
        ["refund-window", "refund-method", "support-channel"],
        ["refund-window", "support-channel"],
        2 / 3,
        "supported=2; required=3; missing=refund-method",
        id="spec-example-two-of-three",
    ),
    pytest.param(
        ["c1"],
        ["old-c1"],
        None,
        ERROR + "supported_claim_ids contains unknown IDs: old-c1",
        id="spec-example-unknown-id",
    ),
    pytest.param(
        ["a", "b"], ["b", "a"], 1.0, "supported=2; required=2; missing=none", id="all-supported"
    ),
    pytest.param(
        ["z", "a", "m"], [], 0.0, "supported=0; required=3; missing=a,m,z", id="none-supported"
    ),
    pytest.param(
        ["b", "C", "a"],
        [],
        0.0,
        "supported=0; required=3; missing=C,a,b",
        id="missing-sorted-by-code-point",
    ),
    pytest.param(
        ["a", ""], ["a"], None, ERROR + "required_claim_ids contains a blank claim ID", id="blank"
    ),
    pytest.param(
        ["a", " \t "],
        ["a"],
        None,
        ERROR + "required_claim_ids contains a blank claim ID",
        id="whitespace-only-is-blank",
    ),
    pytest.param(
        ["a"],
        ["\n"],
        None,
        ERROR + "supported_claim_ids contains a blank claim ID",
        id="blank-supported",
    ),
    pytest.param(
        ["", "a"],
        ["unknown"],
        None,
        ERROR + "required_claim_ids contains a blank claim ID",
        id="blank-required-beats-unknown-supported",
    ),
    pytest.param(
        ["a", "a", ""],
        [],
        None,
        ERROR + "required_claim_ids contains a blank claim ID",
        id="blank-beats-duplicate",
    ),
    pytest.param(
        ["a", "a"],
        [""],
        None,
        ERROR + "required_claim_ids contains duplicate claim IDs: a",
        id="required-duplicate-beats-supported-blank",
    ),
    pytest.param(
        ["a"],
        ["", "a", "a"],
        None,
        ERROR + "supported_claim_ids contains a blank claim ID",
        id="supported-blank-beats-supported-duplicate",
    ),
    pytest.param(
        ["b", "a", "b", "a", "c"],
        ["c"],
        None,
        ERROR + "required_claim_ids contains duplicate claim IDs: a,b",
        id="duplicates-sorted-comma-joined",
    ),
    pytest.param(
        [" a", "a ", "b"],
        [],
        None,
        ERROR + "required_claim_ids contains duplicate claim IDs: a",
        id="duplicate-after-stripping",
    ),
    pytest.param(
        ["a", "b"],
        ["b", " b"],
        None,
        ERROR + "supported_claim_ids contains duplicate claim IDs: b",
        id="supported-duplicate",
    ),
    pytest.param(
        ["a"],
        ["x", "x"],
        None,
        ERROR + "supported_claim_ids contains duplicate claim IDs: x",
        id="supported-duplicate-beats-unknown",
    ),
    pytest.param(
        [],
        [" "],
        None,
        ERROR + "supported_claim_ids contains a blank claim ID",
        id="supported-blank-beats-empty-required",
    ),
    pytest.param([], [], None, ERROR + "required_claim_ids must not be empty", id="empty-required"),
    pytest.param(
        [],
        ["a"],
        None,
        ERROR + "required_claim_ids must not be empty",
        id="empty-required-beats-unknown",
    ),
    pytest.param(
        ["a"],
        ["z", "a", "b", "Y"],
        None,
        ERROR + "supported_claim_ids contains unknown IDs: Y,b,z",
        id="unknown-sorted-comma-joined",
    ),
    pytest.param(
        ["C1"],
        ["c1"],
        None,
        ERROR + "supported_claim_ids contains unknown IDs: c1",
        id="case-sensitive-unknown",
    ),
    pytest.param(
        ["C1", "c1"],
        ["c1"],
        0.5,
        "supported=1; required=2; missing=C1",
        id="case-variants-are-distinct-ids",
    ),
    pytest.param([" a "], ["a"], 1.0, "supported=1; required=1; missing=none", id="stripped-equal"),
    pytest.param(
        ["  b ", "a"],
        [],
        0.0,
        "supported=0; required=2; missing=a,b",
        id="reasons-show-stripped-ids",
    ),
    pytest.param(
        ["\u00a0a\u3000"],
        ["a"],
        1.0,
        "supported=1; required=1; missing=none",
        id="unicode-whitespace-stripped",
    ),
    pytest.param(
        ["refund window"],
        ["refundwindow"],
        None,
        ERROR + "supported_claim_ids contains unknown IDs: refundwindow",
        id="inner-whitespace-kept",
    ),
    pytest.param(
        ["\u00e9", "e\u0301"],
        ["\u00e9"],
        0.5,
        "supported=1; required=2; missing=e\u0301",
        id="unicode-not-normalised",
    ),
]


def test_spec_example_two_of_three() -> None:
    """SPEC §1's first example scores exactly 2/3 with its exact reason."""
    result = evidence_coverage.score(
        required_claim_ids=["refund-window", "refund-method", "support-channel"],
        supported_claim_ids=["refund-window", "support-channel"],
    )

    assert result.value == 2 / 3
    assert result.reason == "supported=2; required=3; missing=refund-method"


def test_spec_example_unknown_id() -> None:
    """SPEC §1's second example is invalid: value None and the unknown-IDs reason."""
    result = evidence_coverage.score(required_claim_ids=["c1"], supported_claim_ids=["old-c1"])

    assert result.value is None
    assert result.reason == ERROR + "supported_claim_ids contains unknown IDs: old-c1"


@pytest.mark.parametrize(("required", "supported", "value", "reason"), CASES)
def test_score(required: list[str], supported: list[str], value: float | None, reason: str) -> None:
    """`.score()` returns the exact value and reason the first applicable rule gives."""
    result = evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)

    assert (result.value, result.reason) == (value, reason)


@pytest.mark.parametrize(("required", "supported", "value", "reason"), CASES)
def test_score_claims(
    required: list[str], supported: list[str], value: float | None, reason: str
) -> None:
    """The worker's fast path returns the same (value, reason) as `.score()` on every rule."""
    fast = score_claims(required, supported)
    slow = evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)

    assert (fast.value, fast.reason) == (value, reason)
    assert (fast.value, fast.reason) == (slow.value, slow.reason)


def test_valid_value_is_a_float() -> None:
    """A valid value is a float, so 0 covered claims is 0.0 rather than the int 0."""
    result = evidence_coverage.score(required_claim_ids=["a"], supported_claim_ids=[])

    assert type(result.value) is float
    assert result.value == 0.0


def test_inputs_are_not_mutated() -> None:
    """Stripping happens on copies: the caller's lists keep their original IDs."""
    required = [" a ", "b"]
    supported = ["a "]

    evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)
    score_claims(required, supported)

    assert required == [" a ", "b"]
    assert supported == ["a "]


@pytest.mark.parametrize(
    ("kwargs", "missing", "present"),
    [
        pytest.param(
            {"required_claim_ids": ["a"]},
            "supported_claim_ids",
            "required_claim_ids",
            id="supported-missing",
        ),
        pytest.param(
            {"supported_claim_ids": ["a"]},
            "required_claim_ids",
            "supported_claim_ids",
            id="required-missing",
        ),
    ],
)
def test_missing_named_argument_is_a_call_error(
    kwargs: dict[str, list[str]], missing: str, present: str
) -> None:
    """A missing named argument raises TypeError naming it rather than scoring an invalid row."""
    with pytest.raises(TypeError) as raised:
        evidence_coverage.score(**kwargs)

    message = str(raised.value)
    assert f"{missing}: Field required" in message
    assert f"{present}: Field required" not in message


def test_positional_arguments_are_a_call_error() -> None:
    """Positional arguments raise TypeError asking for keyword arguments."""
    with pytest.raises(TypeError, match="requires keyword arguments, not positional"):
        evidence_coverage.score(["a"], ["a"])


def test_name() -> None:
    """The metric is registered under the public name evidence_coverage."""
    assert evidence_coverage.name == "evidence_coverage"


def test_allowed_values() -> None:
    """The metric's allowed range is exactly the closed interval (0.0, 1.0)."""
    assert evidence_coverage.allowed_values == (0.0, 1.0)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        pytest.param(
            1.5,
            "Metric evidence_coverage returned 1.5 but expected value in range (0.0, 1.0)",
            id="above",
        ),
        pytest.param(
            -0.1,
            "Metric evidence_coverage returned -0.1 but expected value in range (0.0, 1.0)",
            id="below",
        ),
        pytest.param(0.0, None, id="lower-bound"),
        pytest.param(1.0, None, id="upper-bound"),
        pytest.param(0.5, None, id="inside"),
    ],
)
def test_range_validator(value: float, error: str | None) -> None:
    """Ragas's range validator rejects values outside (0.0, 1.0) with a message, bounds included."""
    assert evidence_coverage.validate_result_value(value) == error


def test_metric_version() -> None:
    """METRIC_VERSION names the rules above; a rule change must bump it."""
    assert METRIC_VERSION == "evidence_coverage/1"


# Claim IDs that exercise every rule: blanks, whitespace padding, case variants, unicode
# (composed and decomposed, non-breaking and ideographic spaces, a zero-width space that is
# not whitespace), and plain IDs so that valid rows are common too.
ID_POOL = [
    "a",
    "b",
    "c1",
    "C1",
    "A",
    " a",
    "a ",
    "\ta\n",
    "",
    " ",
    "\u00a0",
    "\u00e9",
    "e\u0301",
    "\u00df",
    "SS",
    "\u0130",
    "\u200ba",
    "\u00a0b\u3000",
    "r\u00fcckgabe",
    "\u8fd4\u54c1",
]
claim_ids = st.lists(
    st.one_of(st.sampled_from(ID_POOL), st.text(alphabet="aAb \u00e9", max_size=3)),
    max_size=6,
)
# Distinct after stripping and never blank: required lists drawn from here are often valid.
distinct_ids = st.lists(
    st.sampled_from([claim_id for claim_id in ID_POOL if claim_id.strip()]).filter(
        lambda claim_id: claim_id == claim_id.strip()
    ),
    unique=True,
    max_size=6,
)
padding = st.sampled_from(["", " ", "\t", "\u00a0"])


@st.composite
def claim_lists(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Required and supported lists, mixing anything-goes lists with plausible ones: distinct
    required IDs and a (sometimes padded) subset of them as supported, so valid rows with
    partial coverage are common rather than rare."""
    required = draw(st.one_of(claim_ids, distinct_ids))
    if not required:
        return required, draw(claim_ids)
    padded = st.tuples(padding, st.sampled_from(required), padding).map("".join)
    subset = st.lists(padded, unique_by=str.strip, max_size=len(required))
    return required, draw(st.one_of(claim_ids, subset))


@given(lists=claim_lists())
def test_fast_path_matches_ragas(lists: tuple[list[str], list[str]]) -> None:
    """For any ID lists, score_claims and `.score()` agree and value is None exactly on errors."""
    required, supported = lists
    fast = score_claims(required, supported)
    slow = evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)

    assert (fast.value, fast.reason) == (slow.value, slow.reason)
    assert (fast.value is None) == fast.reason.startswith("Error executing metric")
