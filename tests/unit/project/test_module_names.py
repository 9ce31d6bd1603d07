"""No two modules of contracts/ and worker/ share a file name, outside worker/cli/ (issue 38):
a module is named for what it holds, and two that hold different things read alike in a
traceback, an import and a search. worker/cli/ names each module for its command, so
worker/cli/records.py may stand beside the module that builds `records`' rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("contracts", "worker")
COMMANDS = "worker/cli"  # one module per command, named for it
# Every package has these; their names say their role, not what they hold.
ROLES = frozenset({"__init__.py", "__main__.py"})


def modules() -> list[str]:
    """The modules the rule covers, as paths from the repository root."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if path.name in ROLES or name.startswith(f"{COMMANDS}/"):
                continue
            found.append(name)
    return found


def shared_names(paths: Iterable[str]) -> list[str]:
    """One line for each file name that more than one of `paths` has, naming every path."""
    by_name: defaultdict[str, list[str]] = defaultdict(list)
    for path in paths:
        by_name[Path(path).name].append(path)
    return [
        f"{name}: {' and '.join(sorted(held))}"
        for name, held in sorted(by_name.items())
        if len(held) > 1
    ]


def test_no_two_modules_share_a_file_name_outside_the_commands() -> None:
    """Rename one of each pair for what it holds (docs/layout.md says what each holds)."""
    shared = shared_names(modules())

    assert shared == [], "modules that share a file name: " + "; ".join(shared)


def test_the_check_covers_both_packages_and_leaves_out_the_commands() -> None:
    """The walk finds modules at every depth of both packages (a walk that found none would
    pass any tree), and none of worker/cli/ nor an __init__.py."""
    found = set(modules())

    assert {"contracts/metric.py", "worker/app.py", "worker/pipeline/scoring.py"} <= found
    assert not {path for path in found if path.startswith("worker/cli/")}
    assert not {path for path in found if Path(path).name in ROLES}


def test_a_shared_name_is_reported_with_both_paths() -> None:
    """What the failure says: the name, then each path that has it."""
    paths = ["contracts/records.py", "worker/app.py", "worker/audit/records.py"]

    assert shared_names(paths) == ["records.py: contracts/records.py and worker/audit/records.py"]
