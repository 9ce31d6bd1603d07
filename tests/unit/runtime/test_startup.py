"""Start-up stays light: the scoring path and the command line never import Ragas."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module", ["contracts", "worker.cli", "worker.runtime.tasks", "worker.app", "worker.client"]
)
def test_module_does_not_import_ragas(module: str) -> None:
    """Importing a module of the scoring path or the CLI leaves Ragas and langchain unloaded."""
    code = (
        f"import sys, {module}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'ragas', 'langchain_core'})\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_ragas_objects_load_on_first_use() -> None:
    """contracts.evidence_coverage is the Ragas metric, loaded when first asked for."""
    import ragas

    import contracts
    from contracts.ragas_metric import evidence_coverage

    assert contracts.evidence_coverage is evidence_coverage
    assert ragas.__version__ == contracts.RAGAS_VERSION


def test_unknown_attribute_is_an_attribute_error() -> None:
    """The lazy loader answers only for the Ragas names."""
    import contracts

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        contracts.nope  # noqa: B018
