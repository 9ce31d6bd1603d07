"""The pure parts of the instruction count: reading callgrind's total, the per-message
arithmetic, the files, the command and the environment of a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.bench.instructions import (
    PRODUCED_AT,
    CallgrindError,
    Measurement,
    callgrind_total,
    parser,
    per_message,
    report,
    run_environment,
    score_command,
    write_messages,
)

# The head and tail of a real callgrind output (valgrind 3.19), its cost lines cut.
CALLGRIND_OUTPUT = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 12948
cmd:  python -m worker.cli score messages-1200.jsonl --store sqlite:///s.sqlite3
part: 1

positions: line
events: Ir
summary: 3495197353

fl=(1) ???
fn=(1) 0x0000000000020290
0 17
totals: 3495197353
"""


def test_callgrind_total_reads_the_summary_line() -> None:
    """The total is the first count of the summary (or totals) line."""
    assert callgrind_total(CALLGRIND_OUTPUT) == 3_495_197_353


def test_callgrind_total_reads_a_totals_line_alone() -> None:
    """Newer outputs may carry only the closing totals line."""
    assert callgrind_total("events: Ir\nfn=(1) main\n0 5\ntotals: 1234\n") == 1234


def test_callgrind_total_refuses_an_output_without_one() -> None:
    """A cut output (the run died) is an error, not a zero."""
    with pytest.raises(CallgrindError, match="no 'totals:' or 'summary:' line"):
        callgrind_total("events: Ir\nfn=(1) main\n0 5\n")


def test_per_message_is_the_difference_over_the_difference() -> None:
    """What every run pays once cancels: (3,495,197,353 - 2,072,466,369) / 1,000."""
    assert per_message((200, 2_072_466_369), (1200, 3_495_197_353)) == 1_422_730.984


def test_per_message_needs_two_counts() -> None:
    """Two runs of the same size say nothing per message."""
    with pytest.raises(ValueError, match="different message counts"):
        per_message((200, 10), (200, 20))


def test_report_gives_the_ratio_of_this_checkout_to_the_base() -> None:
    """The first measurement is this checkout's, the second the base's."""
    current = Measurement("/work/new", {200: 2_000, 1200: 14_000}, 12.0)
    base = Measurement("/work/base", {200: 1_000, 1200: 9_000}, 8.0)

    assert report([current, base]) == {
        "checkouts": [
            {
                "checkout": "/work/new",
                "instructions": {200: 2_000, 1200: 14_000},
                "per_message": 12.0,
            },
            {
                "checkout": "/work/base",
                "instructions": {200: 1_000, 1200: 9_000},
                "per_message": 8.0,
            },
        ],
        "ratio": 1.5,
    }


def test_report_of_one_checkout_has_no_ratio() -> None:
    """Without a base there is nothing to compare with."""
    assert "ratio" not in report([Measurement("/work/new", {1: 5, 2: 9}, 4.0)])


def test_the_smaller_file_is_the_larger_ones_beginning(tmp_path: Path) -> None:
    """Both files come from one generator, stamped with the same produced_at."""
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    write_messages(small, 3)
    write_messages(large, 5)

    lines = large.read_text().splitlines()
    assert small.read_text().splitlines() == lines[:3]
    assert len(lines) == 5
    assert {json.loads(line)["produced_at"] for line in lines} == {PRODUCED_AT}


def test_score_command_runs_the_checkouts_own_cli_under_callgrind(tmp_path: Path) -> None:
    """valgrind's callgrind, its output file, then `python -m worker.cli score FILE --store`."""
    command = score_command(tmp_path / "m.jsonl", "sqlite:///s.db", tmp_path / "cg.out")

    assert command[:3] == [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={tmp_path}/cg.out",
    ]
    assert command[4:] == [
        "-m",
        "worker.cli",
        "score",
        f"{tmp_path}/m.jsonl",
        "--store",
        "sqlite:///s.db",
    ]


def test_run_environment_puts_the_checkout_first_and_drops_the_callers_settings() -> None:
    """No EVIDENCE_* of the caller's reaches the run but its own key prefix."""
    environment = run_environment(
        Path("/work/base"),
        {"PATH": "/usr/bin", "EVIDENCE_STORE_URL": "redis://x", "PYTHONPATH": "/elsewhere"},
        "instructions-1a2b",
    )

    assert environment == {
        "PATH": "/usr/bin",
        "PYTHONPATH": "/work/base",
        "PYTHONHASHSEED": "0",
        "EVIDENCE_KEY_PREFIX": "instructions-1a2b",
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--messages", "1200,200"], "the first smaller"),
        (["--messages", "200"], "give two message counts"),
        (["--store", "postgres://db"], "use sqlite or redis://host:port/db"),
    ],
)
def test_parser_refuses_bad_options(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Usage errors exit 2 and say what to give instead."""
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(argv)

    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_parser_defaults() -> None:
    """200 and 1,200 messages on SQLite, this checkout alone."""
    args = parser().parse_args([])

    assert (args.messages, args.store, args.base_checkout, args.keep) == (
        (200, 1200),
        "sqlite",
        None,
        None,
    )
