"""`evidence-worker stability`: one line or JSON object per grader, least stable first, exit 3
above --max-flip-rate; the same figures from the store and from the record lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, Run

EXAMPLE = EXAMPLES / "attribution-results.jsonl"
# The example holds one re-grade, a conflict, by 3.2.0; 4.0.0 grades three inputs once.
UNSTABLE = (
    "claim-attributor 3.2.0 gpt-4o-mini-2024-07-18: 4 inputs, 1 re-graded, 1 flipped; "
    "flip rate 100.0% (95% interval 20.7% to 100.0%)"
)
UNKNOWN = (
    "claim-attributor 4.0.0 gpt-4.1-mini-2025-04-14: 3 inputs, 0 re-graded, 0 flipped; "
    "flip rate unknown (nothing re-graded)"
)
UNSTABLE_JSON = (
    '{"grader_name":"claim-attributor","grader_version":"3.2.0",'
    '"grader_model":"gpt-4o-mini-2024-07-18","inputs":4,"regraded":1,"flipped":1,'
    '"flip_rate":1.0,"flip_rate_low":0.20654931437723742,"flip_rate_high":1.0}'
)
UNKNOWN_JSON = (
    '{"grader_name":"claim-attributor","grader_version":"4.0.0",'
    '"grader_model":"gpt-4.1-mini-2025-04-14","inputs":3,"regraded":0,"flipped":0,'
    '"flip_rate":null,"flip_rate_low":null,"flip_rate_high":null}'
)


@pytest.fixture
def records(score: Callable[..., Run], tmp_path: Path) -> Path:
    """The example scored into the test's store; its record lines kept in a file."""
    run = score(EXAMPLE)
    path = tmp_path / "records.jsonl"
    path.write_text(run.out)
    return path


def test_a_line_per_grader_least_stable_first(
    cli: Callable[..., Run], records: Path, store_url: str
) -> None:
    """Over the store: the flipped grader first, the one with nothing re-graded last; exit 0."""
    run = cli("stability", "--store", store_url)

    assert (run.code, run.out.splitlines()) == (0, [UNSTABLE, UNKNOWN])
    assert run.err == f"stability: 2 graders in {store_url}\n"


def test_json_objects_from_the_store_and_from_the_record_lines_are_the_same(
    cli: Callable[..., Run], records: Path, store_url: str
) -> None:
    """The record file alone gives the store's figures."""
    from_store = cli("stability", "--store", store_url, "--json")
    from_records = cli("stability", "--records", records, "--json")

    assert from_store.out.splitlines() == [UNSTABLE_JSON, UNKNOWN_JSON]
    assert from_records.out == from_store.out
    assert from_records.err == f"stability: 2 graders in {records}\n"


@pytest.mark.parametrize(
    ("rate", "code", "above"), [("0.2", 3, 1), ("0.2066", 0, 0), ("1", 0, 0), ("0", 3, 1)]
)
def test_exit_3_when_a_low_end_exceeds_max_flip_rate(
    cli: Callable[..., Run], records: Path, store_url: str, rate: str, code: int, above: int
) -> None:
    """The low end (0.2065...) is compared, strictly; a grader with no interval never exceeds."""
    run = cli("stability", "--store", store_url, "--max-flip-rate", rate)

    assert run.code == code
    assert run.err == (
        f"stability: 2 graders in {store_url}; {above} with flip_rate_low above "
        f"--max-flip-rate {float(rate):g}\n"
    )


def test_since_after_every_attempt_lists_no_grader(
    cli: Callable[..., Run], records: Path, store_url: str
) -> None:
    """Nothing recorded since: no line, exit 0, the window said."""
    run = cli("stability", "--store", store_url, "--since", "2999-01-01")

    assert (run.code, run.out) == (0, "")
    assert run.err == f"stability: 0 graders in {store_url} since 2999-01-01T00:00:00+00:00\n"
