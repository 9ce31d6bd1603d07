"""docs/ragas.md as a Ragas user runs it: its Python blocks, in order, as one program
through the installed Ragas, print what the page says they print (its `# ` lines)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.bad_input import clean_env

PAGE = Path(__file__).parents[3] / "docs" / "ragas.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_the_ragas_page_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    """score, ascore, batch_score and an @experiment over a Dataset: no network, no LLM,
    no file left behind; every line the page promises, in order."""
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    program = "\n".join(blocks)
    promised = [line.removeprefix("# ") for line in program.splitlines() if line.startswith("# ")]

    run = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=clean_env({"RAGAS_DO_NOT_TRACK": "true", "NO_PROXY": "*"}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert len(blocks) == 3
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == promised
    assert list(tmp_path.iterdir()) == []
