"""The package's import structure: no import cycle, and importing builds nothing.

The layer order itself is import-linter's to check (`lint-imports`, [tool.importlinter] in
pyproject.toml); these tests hold what a layers contract cannot: a cycle inside one layer, and
a module that reads the environment or exits when imported. Cycles are found on grimp's graph
(import-linter's own), which counts function-level imports and those under TYPE_CHECKING too.
"""

from __future__ import annotations

import os
import subprocess
import sys

import grimp
import pytest

from tests.conftest import ROOT

PACKAGES = ("contracts", "worker")
# The `-A` target: the one module that builds the app from the environment, and refuses a bad
# one. `python -m` entry points run their command when imported, by design.
BUILDS_FROM_ENVIRONMENT = "worker.app"
BAD_ENVIRONMENT = {"EVIDENCE_BROKER_URL": "ftp://nope"}
REFUSAL = (
    "evidence-worker: configuration error: EVIDENCE_BROKER_URL: ftp://nope: unsupported broker "
    "scheme 'ftp' (accepted: redis://, rediss://, amqp://, amqps://): use redis://host:port/db "
    "or amqp://user:password@host:port/vhost\n"
)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def importable(graph: grimp.ImportGraph) -> list[str]:
    """Every module of the packages a program may import, in name order."""
    return sorted(
        module
        for module in graph.modules
        if module != BUILDS_FROM_ENVIRONMENT and not module.endswith(".__main__")
    )


def cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest cycle through each import that closes one, as module names."""
    found: set[tuple[str, ...]] = set()
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycle = (importer, *back)
                start = cycle.index(min(cycle[:-1]))  # one rotation per cycle
                found.add((*cycle[start:-1], *cycle[:start], cycle[start]))
    return sorted(found)


def run_with_bad_environment(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **BAD_ENVIRONMENT},
    )


def test_the_graph_holds_the_whole_package(graph: grimp.ImportGraph) -> None:
    """The checks below see every module: the graph has the app, the tasks and the CLI."""
    assert {"worker.app", "worker.runtime.tasks", "worker.cli.score", "contracts.metric"} <= set(
        graph.modules
    )


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    """No module imports, however indirectly and wherever in its body, one that imports it."""
    assert [" -> ".join(cycle) for cycle in cycles(graph)] == []


def test_a_cycle_is_found_and_named() -> None:
    """The search above finds a cycle when there is one, and names it from its first module."""
    graph = grimp.ImportGraph()
    for importer, imported in [("p.b", "p.c"), ("p.c", "p.a"), ("p.a", "p.b"), ("p.a", "p.d")]:
        graph.add_import(importer=importer, imported=imported)

    assert cycles(graph) == [("p.a", "p.b", "p.c", "p.a")]


def test_importing_any_module_but_the_a_target_builds_nothing(graph: grimp.ImportGraph) -> None:
    """With a broker URL the app would refuse, every other module imports cleanly: nothing
    reads the environment, builds an app or exits at import. The last name printed is the
    module that failed."""
    modules = importable(graph)
    code = (
        f"import importlib\nfor name in {modules!r}:\n"
        "    print(name, flush=True)\n    importlib.import_module(name)\n"
    )

    result = run_with_bad_environment(code)

    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.split() == modules


def test_the_a_target_refuses_a_bad_environment_with_one_line() -> None:
    """`celery -A worker.app` with an unusable setting: exit 2 and one line, no traceback."""
    result = run_with_bad_environment(f"import {BUILDS_FROM_ENVIRONMENT}")

    assert (result.returncode, result.stdout, result.stderr) == (2, "", REFUSAL)
