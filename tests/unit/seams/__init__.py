"""Contract tests of the fast paths that stand in for a library's own code: each runs the
library's code path and the fast path on one table of inputs and fails on any difference."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version


def versions_line(checked: Mapping[str, str]) -> str:
    """The line a failing contract test adds: "ran with kombu 5.7.1, orjson 3.13.0; the fast
    path was checked against kombu 5.7.0, orjson 3.13.0"."""
    ran = ", ".join(f"{name} {version(name)}" for name in checked)
    against = ", ".join(f"{name} {pinned}" for name, pinned in checked.items())
    return f"ran with {ran}; the fast path was checked against {against}"
