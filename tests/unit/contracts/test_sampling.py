"""contracts.sampling: which case IDs a sample rate keeps, decided by SHA-256 alone (SPEC §10),
and which of them to grade twice."""

from __future__ import annotations

import hashlib
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import sampling
from contracts.sampling import check_rate, sample_point, sampled, should_regrade


def point(key: str) -> float:
    """SPEC §10's formula, written out again: the first 8 bytes of the key's SHA-256 as a
    big-endian integer, over 2**64."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64


# case ID, its digest's first 8 bytes, rate, sampled?
KNOWN = [
    ("case-3", "05a28dfea5f90feb", 0.02, False),  # 0.0220...
    ("case-3", "05a28dfea5f90feb", 0.1, True),
    ("é-ünïcode", "1a194fc69b9708fd", 0.1, False),  # 0.1019...: hashed as UTF-8
    ("é-ünïcode", "1a194fc69b9708fd", 0.25, True),
    ("case-2", "34335cf42e144aaf", 0.1, False),  # 0.2039...
    ("case-2", "34335cf42e144aaf", 0.25, True),
    ("refund-002", "409d8abfb28ea924", 0.25, False),  # 0.2524...
    ("refund-002", "409d8abfb28ea924", 0.2525, True),
    ("refund-001", "7ec2f2f79e209e0f", 0.25, False),  # 0.4951...
    ("refund-001", "7ec2f2f79e209e0f", 0.5, True),
    ("case-7", "f75ccb85a4a0cca6", 0.96, False),  # 0.9662...
    ("case-7", "f75ccb85a4a0cca6", 0.97, True),
    ("", "e3b0c44298fc1c14", 0.88, False),  # 0.8894...: the empty key is a key like any
    ("", "e3b0c44298fc1c14", 0.89, True),
]


@pytest.mark.parametrize(("case_id", "prefix", "rate", "expected"), KNOWN)
def test_known_case_ids_are_in_or_out(
    case_id: str, prefix: str, rate: float, expected: bool
) -> None:
    """Each row: the digest prefix is the case ID's, and the decision is `prefix / 2**64 < rate`."""
    assert hashlib.sha256(case_id.encode("utf-8")).digest()[:8].hex() == prefix
    assert (int(prefix, 16) / 2**64 < rate) is expected
    assert sampled(case_id, rate) is expected


@pytest.mark.parametrize("case_id", ["case-3", "refund-001", "case-7", "", "é-ünïcode"])
def test_the_sample_point_is_the_spec_s_formula(case_id: str) -> None:
    assert sample_point(case_id) == point(case_id)


@pytest.mark.parametrize("case_id", ["case-3", "refund-002", "case-7"])
def test_a_rate_equal_to_the_point_leaves_the_case_out(case_id: str) -> None:
    """Strictly below: the case's own point is the smallest rate that leaves it out."""
    at = point(case_id)
    assert sampled(case_id, at) is False
    assert sampled(case_id, math.nextafter(at, 1.0)) is True


@pytest.mark.parametrize("case_id", ["case-3", "refund-001", "case-7", "", "é-ünïcode"])
def test_rate_0_samples_nothing_and_rate_1_everything(case_id: str) -> None:
    assert sampled(case_id, 0.0) is False
    assert sampled(case_id, 0) is False
    assert sampled(case_id, 1.0) is True
    assert sampled(case_id, 1) is True


def test_rate_1_keeps_a_point_that_rounds_up_to_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last 2**10 64-bit integers over 2**64 round to 1.0 as floats: still sampled at 1."""
    assert (2**64 - 1) / 2**64 == 1.0
    monkeypatch.setattr(sampling, "sample_point", lambda _key: 1.0)
    assert sampled("any", 1.0) is True
    assert sampled("any", math.nextafter(1.0, 0.0)) is False


@given(
    st.text(),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_a_smaller_sample_lies_inside_a_larger_one(case_id: str, one: float, other: float) -> None:
    """Raising the rate only adds cases: sampled at the lower rate means sampled at the higher."""
    low, high = sorted((one, other))
    if sampled(case_id, low):
        assert sampled(case_id, high)


@given(st.text())
def test_the_10_percent_sample_lies_inside_the_25_percent_one(case_id: str) -> None:
    assert not sampled(case_id, 0.1) or sampled(case_id, 0.25)


def test_should_regrade_is_sampled_over_regrade_and_the_case_id() -> None:
    """`regrade:refund-001` hashes to 0.5167...: re-graded at 0.52, not at 0.51."""
    assert point("regrade:refund-001") == 0.5167707260991163
    assert should_regrade("refund-001", 0.52) is True
    assert should_regrade("refund-001", 0.51) is False
    # refund-001 itself is at 0.4951...: the two decisions differ at 0.5.
    assert (sampled("refund-001", 0.5), should_regrade("refund-001", 0.5)) == (True, False)


IDS = [f"case-{n}" for n in range(10_000)]


def test_the_regrade_subset_is_independent_of_the_sample() -> None:
    """Over 10,000 IDs at 25% sampled and 10% re-graded: about a quarter sampled, a tenth
    re-graded, and a tenth re-graded among the sampled as among the rest (loose bounds: the
    data are fixed, the tolerance is for the hash's luck, not for a clock). Without its
    prefix the re-grade set would be the sample's lowest tenth, all of it inside the sample."""
    sample = {case_id for case_id in IDS if sampled(case_id, 0.25)}
    regrade = {case_id for case_id in IDS if should_regrade(case_id, 0.1)}
    rest = len(IDS) - len(sample)
    assert len(sample) / len(IDS) == pytest.approx(0.25, abs=0.02)
    assert len(regrade) / len(IDS) == pytest.approx(0.1, abs=0.02)
    assert len(sample & regrade) / len(sample) == pytest.approx(0.1, abs=0.02)
    assert len(regrade - sample) / rest == pytest.approx(0.1, abs=0.02)
    # The contrast: the same hash without the prefix nests the two sets.
    unprefixed = {case_id for case_id in IDS if sampled(case_id, 0.1)}
    assert unprefixed <= sample


@pytest.mark.parametrize(
    ("rate", "error"),
    [
        (-0.1, "sample rate -0.1 is outside 0.0..1.0"),
        (1.5, "sample rate 1.5 is outside 0.0..1.0"),
        (math.nan, "sample rate nan is not a finite number in 0.0..1.0"),
        (math.inf, "sample rate inf is not a finite number in 0.0..1.0"),
        ("0.5", "sample rate '0.5' is not a number in 0.0..1.0"),
        (True, "sample rate True is not a number in 0.0..1.0"),
        (None, "sample rate None is not a number in 0.0..1.0"),
    ],
    ids=str,
)
def test_a_rate_that_is_no_share_is_refused(rate: object, error: str) -> None:
    """Never a silent none-or-all: NaN would compare False and sample nothing."""
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        check_rate(rate)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        sampled("case-1", rate)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"^{re.escape(error)}$"):
        should_regrade("case-1", rate)  # type: ignore[arg-type]
