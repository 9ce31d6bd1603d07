"""docs/worker.md's upstream loop runs as printed: each sampled case is published once, and the
should_regrade share of them twice."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from contracts.sampling import sampled, should_regrade
from tests.conftest import ROOT
from worker.client import EvidenceClient

SECTION = "\n## Sampling production traffic, and re-grading some of it\n"


def the_loop() -> str:
    page = (ROOT / "docs" / "worker.md").read_text("utf-8")
    section = page.split(SECTION, 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return str(block)


@dataclass(frozen=True)
class Case:
    case_id: str


class Client:
    """Stands in for EvidenceClient.from_env(): keeps what is published."""

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish(self, message: dict[str, Any]) -> str:
        self.published.append(message["case_id"])
        return "task"


def test_the_loop_publishes_the_sample_and_its_regrade_share_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = the_loop()
    assert len(code.splitlines()) <= 12  # the ten lines, and its two imports
    client = Client()
    monkeypatch.setattr(EvidenceClient, "from_env", classmethod(lambda cls: client))
    cases = [Case(f"case-{n}") for n in range(2_000)]

    exec(  # the page's own code, with the job's two functions
        code,
        {"todays_cases": lambda: cases, "grade": lambda case: {"case_id": case.case_id}},
    )

    expected = []
    for case in cases:
        if sampled(case.case_id, 0.05):
            expected.append(case.case_id)
            if should_regrade(case.case_id, 0.2):
                expected.append(case.case_id)
    assert client.published == expected
    twice = {case_id for case_id in expected if expected.count(case_id) == 2}
    assert len(set(expected)) == 108  # of 2,000 at 5%
    assert len(twice) == 23  # of 108 at 20%
