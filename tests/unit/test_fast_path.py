"""The worker's scoring path returns exactly what the Ragas metric returns (issue 4)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts import evidence_coverage
from contracts.metric import score_pair
from worker.bench_micro import raw_set_arithmetic

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


@pytest.mark.timeout(900)  # 10,000 calls of Ragas's .score() at ~0.5 ms plus generation
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(required=id_lists, supported=id_lists)
def test_worker_path_equals_ragas_score(required: list[str], supported: list[str]) -> None:
    """score_pair gives the same (value, reason) as evidence_coverage.score for any lists."""
    expected = evidence_coverage.score(required_claim_ids=required, supported_claim_ids=supported)

    assert score_pair(required, supported) == (expected.value, expected.reason)


@settings(max_examples=2_000, deadline=None)
@given(required=id_lists, supported=id_lists)
def test_raw_baseline_agrees_on_validity_and_value(
    required: list[str], supported: list[str]
) -> None:
    """The microbenchmark's raw baseline computes the same value (or None) as the metric."""
    value, _ = score_pair(required, supported)

    assert raw_set_arithmetic(required, supported) == value
