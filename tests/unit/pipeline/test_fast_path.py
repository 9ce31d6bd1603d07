"""The worker's scoring path returns exactly what the Ragas metric returns (issue 4)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import evidence_coverage
from contracts.metric import RAGAS_ERROR_PREFIX, score_pair
from worker.bench.micro import raw_set_arithmetic

# A small alphabet makes collisions (duplicates, overlaps, unknown IDs) common.
ID_PIECES = ["c1", "C1", "c2", "claim-ü", "名前", "x", "", " ", "\t"]
claim_id = st.one_of(
    st.sampled_from(ID_PIECES),
    st.builds(
        lambda pad, core, tail: pad + core + tail,
        st.sampled_from(["", " ", "\n"]),
        st.sampled_from(ID_PIECES),
        st.sampled_from(["", " ", "\u3000"]),
    ),
    st.text(max_size=4),
)
id_lists = st.lists(claim_id, max_size=8)
# Around the 32 claims whose reason prefixes score_pair makes in advance: mostly valid rows
# (supported a subset of required), some with a repeat or an unknown ID.
many_ids = st.sampled_from([f"c{n}" for n in range(45)])
long_id_lists = st.lists(many_ids, min_size=28, max_size=45)


@st.composite
def long_rows(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    required = draw(st.lists(many_ids, min_size=28, max_size=40, unique=True))
    supported = draw(st.lists(st.sampled_from(required), unique=True))
    return required, [*supported, *draw(st.lists(many_ids, max_size=1))]


def spec_reference(required_raw: list[str], supported_raw: list[str]) -> tuple[float | None, str]:
    """SPEC §1 read literally, rule by rule, with lists: the oracle for score_pair's shortcuts."""
    fields = {
        "required_claim_ids": [claim_id.strip() for claim_id in required_raw],
        "supported_claim_ids": [claim_id.strip() for claim_id in supported_raw],
    }
    for field, ids in fields.items():
        if "" in ids:
            return None, f"{RAGAS_ERROR_PREFIX}{field} contains a blank claim ID"
        repeated = sorted({claim_id for claim_id in ids if ids.count(claim_id) > 1})
        if repeated:
            listed = ",".join(repeated)
            return None, f"{RAGAS_ERROR_PREFIX}{field} contains duplicate claim IDs: {listed}"
    required, supported = fields["required_claim_ids"], fields["supported_claim_ids"]
    if not required:
        return None, f"{RAGAS_ERROR_PREFIX}required_claim_ids must not be empty"
    unknown = sorted(claim_id for claim_id in supported if claim_id not in required)
    if unknown:
        return None, f"{RAGAS_ERROR_PREFIX}supported_claim_ids contains unknown IDs: " + ",".join(
            unknown
        )
    missing = ",".join(sorted(claim_id for claim_id in required if claim_id not in supported))
    reason = f"supported={len(supported)}; required={len(required)}; missing={missing or 'none'}"
    return len(supported) / len(required), reason


@pytest.mark.timeout(900)  # the thorough profile's calls of Ragas's .score()
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(required=id_lists, supported=id_lists)
def test_worker_path_equals_ragas_score(required: list[str], supported: list[str]) -> None:
    """score_pair gives the same (value, reason) as evidence_coverage.score for any lists."""
    expected = evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)

    assert score_pair(required, supported) == (expected.value, expected.reason)


@given(required=st.one_of(id_lists, long_id_lists), supported=st.one_of(id_lists, long_id_lists))
def test_worker_path_follows_the_spec_rule_by_rule(
    required: list[str], supported: list[str]
) -> None:
    """score_pair's set shortcuts give what SPEC §1's rules, read literally, give."""
    assert score_pair(required, supported) == spec_reference(required, supported)


@given(row=long_rows())
def test_worker_path_equals_ragas_score_for_long_lists(row: tuple[list[str], list[str]]) -> None:
    """Past the prepared reason prefixes too, score_pair, .score() and the spec agree."""
    required, supported = row
    expected = evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)

    assert score_pair(required, supported) == (expected.value, expected.reason)
    assert score_pair(required, supported) == spec_reference(required, supported)


@given(required=id_lists, supported=id_lists)
def test_raw_baseline_agrees_on_validity_and_value(
    required: list[str], supported: list[str]
) -> None:
    """The microbenchmark's raw baseline computes the same value (or None) as the metric."""
    value, _ = score_pair(required, supported)

    assert raw_set_arithmetic(required, supported) == value
