"""A failing contract test says which library versions it ran with, and which versions its
fast path was checked against (the module's CHECKED_AGAINST)."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.unit.seams import versions_line


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    checked = getattr(getattr(item, "module", None), "CHECKED_AGAINST", None)
    if report.failed and checked is not None:
        report.sections.append(("library versions", versions_line(checked)))
    return report
