"""Ctrl-C during `score`: the summary's recorded count is exactly what the store holds."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BASE_MESSAGE, Run
from worker.cli import score as score_command
from worker.cli.exit_codes import INTERRUPTED
from worker.pipeline.service import Service


def test_ctrl_c_inside_a_chunk_counts_exactly_what_the_store_recorded(
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGINT arrives after the second chunk of 3 is recorded and before it is counted: the
    chunk is counted, then the run stops; 6 rows said, 6 first outcomes in the store; 130."""
    grader = BASE_MESSAGE["grader"]
    rows = [
        message_dict(case_id=f"c-{n}", grader={**grader, "params": {"seed": n}}) for n in range(10)
    ]
    monkeypatch.setattr(score_command, "CHUNK", 3)
    handle = Service.handle
    calls = []

    def handle_then_interrupt(self: Service, batch: Any) -> Any:
        results = handle(self, batch)
        calls.append(len(batch))
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # recorded, not yet counted
        return results

    monkeypatch.setattr(Service, "handle", handle_then_interrupt)

    run = cli("score", write_jsonl(rows), "--store", store_url)
    listed = cli("records", "--store", store_url, "--quiet")

    assert run.code == INTERRUPTED
    assert calls == [3, 3]
    assert run.err == (
        f"score: interrupted; 6 rows recorded in {store_url} (run the file again: recorded "
        "rows come back as cache hits)\n"
    )
    assert listed.err.startswith("records: 6 rows of 6 first outcomes read;")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
