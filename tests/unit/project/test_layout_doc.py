"""docs/layout.md names every package and top-level module of contracts/ and worker/: a new
one fails here until the page says where it sits and what it holds."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

LAYOUT = ROOT / "docs" / "layout.md"
PACKAGES = ("contracts", "worker")


def parts(package: str) -> list[str]:
    """The package's subpackages as `pkg/name/` and top-level modules as `pkg/name.py`."""
    found = []
    for path in sorted((ROOT / package).iterdir()):
        if path.is_dir() and (path / "__init__.py").is_file():
            found.append(f"{package}/{path.name}/")
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.append(f"{package}/{path.name}")
    return found


def section(text: str, heading: str) -> str:
    """The text under a `## ` heading, up to the next one."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/layout.md has no section {heading!r}"
    return match.group(1)


def named(part: str, text: str) -> bool:
    """contracts/ lists its modules by file name in its own section's tree; the rest are named
    by path (`worker/app.py`, `worker/stores/`)."""
    if part.startswith("contracts/"):
        name = part.removeprefix("contracts/")
        tree = section(text, "contracts/")
        return re.search(rf"^\s+{re.escape(name)}\s", tree, re.M) is not None
    return f"`{part}`" in text


@pytest.mark.parametrize("part", [part for package in PACKAGES for part in parts(package)])
def test_the_layout_page_names_each_package_and_top_level_module(part: str) -> None:
    """The page names the package or module (`worker/usage_errors.py`, `worker/stores/`)."""
    assert named(part, LAYOUT.read_text(encoding="utf-8")), f"docs/layout.md leaves out {part}"


def test_the_layout_page_is_checked_against_every_part_of_both_packages() -> None:
    """The check walks both packages and finds their parts (a test that found none would
    pass for any page)."""
    found = [part for package in PACKAGES for part in parts(package)]

    assert {"worker/app.py", "worker/stores/", "contracts/metric.py"} <= set(found)


def test_a_part_the_page_leaves_out_fails() -> None:
    """A page without one of them does not pass: the check reads what the page says."""
    text = LAYOUT.read_text(encoding="utf-8")

    assert not named("worker/usage_errors.py", text.replace("`worker/usage_errors.py`", "usage"))
    assert not named("contracts/drift.py", text.replace("drift.py ", "other "))
