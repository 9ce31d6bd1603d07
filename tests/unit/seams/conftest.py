"""A failing contract test says which library versions it ran with, and which versions its
fast path was checked against (the module's CHECKED_AGAINST)."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from importlib.metadata import version

import pytest


def versions_line(checked: Mapping[str, str]) -> str:
    """ "ran with kombu 5.7.1, orjson 3.13.0; checked against kombu 5.7.0, orjson 3.13.0"."""
    ran = ", ".join(f"{name} {version(name)}" for name in checked)
    against = ", ".join(f"{name} {pinned}" for name, pinned in checked.items())
    return f"ran with {ran}; the fast path was checked against {against}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    checked = getattr(getattr(item, "module", None), "CHECKED_AGAINST", None)
    if report.failed and checked is not None:
        report.sections.append(("library versions", versions_line(checked)))
    return report
